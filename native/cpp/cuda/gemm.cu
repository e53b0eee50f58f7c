// GEMM: C = alpha * op(A) @ op(B) + beta * C + bias, A f32, B f32 / f16 / bf16, batched with strides.
//
// Kernels (GemmKernel in cuda_kernels.h), all deterministic (fixed reduction order, no atomics):
//   Reference  one thread per output element; double accumulation; B converted exactly. The oracle.
//   Simt       64x64x16 shared-memory tiles, 256 threads with 4x4 outputs each, f32 FMA. Full f32 precision.
//   Skinny     m <= 8 (decode): A staged in shared memory, one warp per two output columns when B is [n,k] (the
//              Hugging Face Linear layout; 16-byte vector loads of B when aligned), else one thread per column with
//              the k range split over the block's warps. f32 FMA. Memory-bound, so it streams B once at full width.
//   Tensor     WMMA (nvcuda::wmma) tensor cores, BMxBNx32 tiles (128x128 or 64x64), 8 warps, f32 accumulate.
//              A tiles are converted while being staged in shared memory; masked loads zero-fill every edge
//              (m, n, k need not be multiples of 16), so partial tiles never read out of bounds.
//              PRECISION: with f32 B, both A and B are rounded to TF32 (m16n16k8, 10-bit mantissa, relative
//              rounding error <= 2^-11 each); with f16 B, A is rounded to f16 (<= 2^-11, and |A| must stay below
//              65504); with bf16 B, A is rounded to bf16 (<= 2^-9). B itself is exact in the f16/bf16 cases.
//              Accumulation is f32 throughout.
//   Tensor NT  the same arithmetic for the HF Linear layout (A [m,k], B [n,k], rows 16-byte aligned): 16-byte vector
//              loads, two shared-memory stages, 128 registers, two blocks per SM (see gemm_tc_nt_kernel).
// Auto: m <= 8 -> Skinny; any of m, n, k < 16 -> Simt; otherwise Tensor: the NT kernel when it applies and its
// 128x128 tiles fill half the SMs, else 128x128 generic tiles when they give every SM a tile, else 64x64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_common.cuh"

namespace tessera::gpu {

namespace {

using namespace nvcuda;

constexpr int64_t kMaxGridYZ = 65535;

int dtype_code(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::BF16: return 2;
    default: fail(ErrorCode::DTypeMismatch, std::string("gemm: B must be f32, f16 or bf16, got ") + dtype_name(t));
  }
}

int64_t b_elem_bytes(int code) { return code == 0 ? 4 : 2; }

// Per-batch operand bases. B is addressed through its element type, so the byte offset depends on the dtype.
template <int kB>
struct Batch {
  const float* a;
  const void* b;
  float* c;
  __device__ Batch(const GemmArgs& g, int64_t bi, int64_t sa, int64_t sb, int64_t sc)
      : a(g.a + bi * sa), b(static_cast<const char*>(g.b) + bi * sb * (kB == 0 ? 4 : 2)), c(g.c + bi * sc) {}
};

__device__ __forceinline__ float load_a(const float* a, int64_t lda, bool trans_a, int64_t i, int64_t p) {
  return trans_a ? a[p * lda + i] : a[i * lda + p];
}

template <int kB>
__device__ __forceinline__ float load_b(const void* b, int64_t ldb, bool trans_b, int64_t p, int64_t j) {
  return load_as_f32<kB>(b, trans_b ? j * ldb + p : p * ldb + j);
}

// alpha * acc + beta * C + bias[j]; C is not read when beta == 0 (it may be uninitialised).
__device__ __forceinline__ void store_c(const GemmArgs& g, float* c, int64_t i, int64_t j, float acc) {
  float v = g.alpha * acc;
  if (g.beta != 0.0f) v += g.beta * c[i * g.ldc + j];
  if (g.bias) v += g.bias[j];
  c[i * g.ldc + j] = v;
}

// ---------------------------------------------------------------- reference

template <int kB>
__global__ void gemm_reference_kernel(GemmArgs g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  const int64_t per = g.m * g.n;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= batch * per) return;
  const int64_t bi = e / per, r = e % per, i = r / g.n, j = r % g.n;
  const Batch<kB> op(g, bi, sa, sb, sc);
  double acc = 0.0;
  for (int64_t p = 0; p < g.k; ++p)
    acc += static_cast<double>(load_a(op.a, g.lda, g.trans_a, i, p)) * static_cast<double>(load_b<kB>(op.b, g.ldb, g.trans_b, p, j));
  double v = static_cast<double>(g.alpha) * acc;
  if (g.beta != 0.0f) v += static_cast<double>(g.beta) * op.c[i * g.ldc + j];
  if (g.bias) v += g.bias[j];
  op.c[i * g.ldc + j] = static_cast<float>(v);
}

// ---------------------------------------------------------------- SIMT tiles

constexpr int kSimtBM = 64, kSimtBN = 64, kSimtBK = 16, kSimtThreads = 256;

template <int kB>
__global__ void __launch_bounds__(kSimtThreads)
gemm_simt_kernel(GemmArgs g, int64_t batch, int64_t sa, int64_t sb, int64_t sc, int64_t tiles_m, int64_t tiles_n) {
  // k-major tiles: a thread's 4 rows (resp. columns) are 16 apart, so a warp reads As with broadcasts and Bs with
  // consecutive addresses.
  __shared__ float As[kSimtBK][kSimtBM + 4];
  __shared__ float Bs[kSimtBK][kSimtBN + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  for (int64_t bi = blockIdx.z; bi < batch; bi += gridDim.z) {
    const Batch<kB> op(g, bi, sa, sb, sc);
    for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
      for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const int64_t m0 = tm * kSimtBM, n0 = tn * kSimtBN;
        float acc[4][4] = {};
        for (int64_t k0 = 0; k0 < g.k; k0 += kSimtBK) {
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int e = tid + t * kSimtThreads;
            // Consecutive threads walk the dimension that is contiguous in global memory.
            const int mm = g.trans_a ? e % kSimtBM : e / kSimtBK;
            const int kk = g.trans_a ? e / kSimtBM : e % kSimtBK;
            const int64_t gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < g.m && gk < g.k) ? load_a(op.a, g.lda, g.trans_a, gm, gk) : 0.0f;
          }
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int e = tid + t * kSimtThreads;
            const int nn = g.trans_b ? e / kSimtBK : e % kSimtBN;
            const int kk = g.trans_b ? e % kSimtBK : e / kSimtBN;
            const int64_t gn = n0 + nn, gk = k0 + kk;
            Bs[kk][nn] = (gn < g.n && gk < g.k) ? load_b<kB>(op.b, g.ldb, g.trans_b, gk, gn) : 0.0f;
          }
          __syncthreads();
#pragma unroll
          for (int kk = 0; kk < kSimtBK; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
          }
          __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int64_t gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
            if (gm < g.m && gn < g.n) store_c(g, op.c, gm, gn, acc[i][j]);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- skinny (m <= 8)

constexpr int kSkinnyThreads = 256, kSkinnyWarps = 8, kSkinnyKChunk = 1024;
static_assert(kSkinnyMaxRows == 8, "the skinny kernel keeps one accumulator per row in registers");

// Stages A[0:m, k0:k0+kSkinnyKChunk] in shared memory as f32, zero beyond k.
__device__ __forceinline__ void stage_a(const GemmArgs& g, const float* a, int64_t k0, float (*As)[kSkinnyKChunk]) {
  const int total = static_cast<int>(g.m) * kSkinnyKChunk;
  for (int e = threadIdx.x; e < total; e += blockDim.x) {
    const int i = e / kSkinnyKChunk, kk = e % kSkinnyKChunk;
    const int64_t p = k0 + kk;
    As[i][kk] = p < g.k ? load_a(a, g.lda, g.trans_a, i, p) : 0.0f;
  }
}

// kVec consecutive B values of row `row` (global element index of (k0, col)) starting at kk, as f32. The 16-byte
// path needs kk + kVec <= kend and an aligned address (checked by the host for the whole launch).
template <int kB, int kVec>
__device__ __forceinline__ void load_b_run(const void* b, int64_t row, int kk, int64_t kend, float (&bv)[kVec]) {
  if constexpr (kVec > 1) {
    if (kk + kVec <= kend) {
      const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const char*>(b) + (row + kk) * (kB == 0 ? 4 : 2));
      const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
      if constexpr (kB == 0) {
#pragma unroll
        for (int q = 0; q < 4; ++q) bv[q] = __uint_as_float(w[q]);
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // two f16/bf16 values per word, low half first (little endian)
          const uint16_t lo = static_cast<uint16_t>(w[q] & 0xffffu), hi = static_cast<uint16_t>(w[q] >> 16);
          bv[2 * q] = kB == 1 ? f16_bits_to_f32(lo) : bf16_bits_to_f32(lo);
          bv[2 * q + 1] = kB == 1 ? f16_bits_to_f32(hi) : bf16_bits_to_f32(hi);
        }
      }
      return;
    }
  }
#pragma unroll
  for (int v = 0; v < kVec; ++v) bv[v] = kk + v < kend ? load_as_f32<kB>(b, row + kk + v) : 0.0f;
}

// B is [n, k] (trans_b, the Hugging Face Linear layout): each warp owns kSkinnyCols output columns; lanes stride
// over k, kVec elements (16 bytes) at a time when kVec > 1 (the host checked alignment), so the warp streams whole
// B rows, with one load per column in flight. A comes from shared memory in 16-byte reads (conflict-free), and each
// A value is used for every column. A butterfly reduction per (column, row) finishes.
constexpr int kSkinnyCols = 2;
template <int kB, int kVec>
__global__ void __launch_bounds__(kSkinnyThreads)
gemm_skinny_nk_kernel(GemmArgs g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  __shared__ __align__(16) float As[kSkinnyMaxRows][kSkinnyKChunk];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kSkinnyWarps + warp) * kSkinnyCols;
  const int m = static_cast<int>(g.m);
  for (int64_t bi = blockIdx.y; bi < batch; bi += gridDim.y) {
    const Batch<kB> op(g, bi, sa, sb, sc);
    float acc[kSkinnyCols][kSkinnyMaxRows] = {};
    for (int64_t k0 = 0; k0 < g.k; k0 += kSkinnyKChunk) {
      __syncthreads();  // the previous chunk is fully consumed before it is overwritten
      stage_a(g, op.a, k0, As);
      __syncthreads();
      if (col0 < g.n) {
        const int64_t kend = g.k - k0 < kSkinnyKChunk ? g.k - k0 : kSkinnyKChunk;
        for (int kk = lane * kVec; kk < kend; kk += 32 * kVec) {
          float bv[kSkinnyCols][kVec];
#pragma unroll
          for (int c = 0; c < kSkinnyCols; ++c) {
            if (col0 + c < g.n) {
              load_b_run<kB, kVec>(op.b, (col0 + c) * g.ldb + k0, kk, kend, bv[c]);
            } else {
#pragma unroll
              for (int v = 0; v < kVec; ++v) bv[c][v] = 0.0f;
            }
          }
#pragma unroll
          for (int i = 0; i < kSkinnyMaxRows; ++i) {
            if (i < m) {
              float av[kVec];
              if constexpr (kVec % 4 == 0) {
#pragma unroll
                for (int v = 0; v < kVec; v += 4) {
                  const float4 a4 = *reinterpret_cast<const float4*>(&As[i][kk + v]);
                  av[v] = a4.x; av[v + 1] = a4.y; av[v + 2] = a4.z; av[v + 3] = a4.w;
                }
              } else {
#pragma unroll
                for (int v = 0; v < kVec; ++v) av[v] = As[i][kk + v];
              }
#pragma unroll
              for (int c = 0; c < kSkinnyCols; ++c)
#pragma unroll
                for (int v = 0; v < kVec; ++v) acc[c][i] = fmaf(av[v], bv[c][v], acc[c][i]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kSkinnyCols; ++c) {
#pragma unroll
      for (int i = 0; i < kSkinnyMaxRows; ++i) acc[c][i] = warp_sum(acc[c][i]);
      if (col0 + c < g.n && lane == 0) {
#pragma unroll
        for (int i = 0; i < kSkinnyMaxRows; ++i)
          if (i < m) store_c(g, op.c, i, col0 + c, acc[c][i]);
      }
    }
  }
}

// B is [k, n]: thread per column (32 per block, coalesced row reads of B); each warp takes a fixed eighth of every
// k chunk, and the eight partial sums are added in warp order at the end.
template <int kB>
__global__ void __launch_bounds__(kSkinnyThreads)
gemm_skinny_kn_kernel(GemmArgs g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  __shared__ float As[kSkinnyMaxRows][kSkinnyKChunk];
  constexpr int kSlice = kSkinnyKChunk / kSkinnyWarps;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const int m = static_cast<int>(g.m);
  for (int64_t bi = blockIdx.y; bi < batch; bi += gridDim.y) {
    const Batch<kB> op(g, bi, sa, sb, sc);
    float acc[kSkinnyMaxRows] = {};
    for (int64_t k0 = 0; k0 < g.k; k0 += kSkinnyKChunk) {
      __syncthreads();
      stage_a(g, op.a, k0, As);
      __syncthreads();
      if (col < g.n) {
        const int kbeg = warp * kSlice;
        const int64_t left = g.k - k0 - kbeg;
        const int kend = left < kSlice ? static_cast<int>(left > 0 ? left : 0) : kSlice;
        for (int kk = 0; kk < kend; ++kk) {
          const float bv = load_as_f32<kB>(op.b, (k0 + kbeg + kk) * g.ldb + col);
#pragma unroll
          for (int i = 0; i < kSkinnyMaxRows; ++i)
            if (i < m) acc[i] = fmaf(As[i][kbeg + kk], bv, acc[i]);
        }
      }
    }
    // Combine the warps' partial sums through shared memory (As is free once every warp is past the last chunk).
    __syncthreads();
    float(*partial)[kSkinnyMaxRows][32] = reinterpret_cast<float(*)[kSkinnyMaxRows][32]>(&As[0][0]);
#pragma unroll
    for (int i = 0; i < kSkinnyMaxRows; ++i) partial[warp][i][lane] = acc[i];
    __syncthreads();
    if (warp < m && col < g.n) {
      float s = 0.0f;
      for (int w = 0; w < kSkinnyWarps; ++w) s += partial[w][warp][lane];
      store_c(g, op.c, warp, col, s);
    }
  }
}

// ---------------------------------------------------------------- tensor cores (WMMA)

// Per B dtype: the element type tiles are staged in, the fragment element type, the WMMA k, and conversions.
template <int kB>
struct Tc;
template <>
struct Tc<0> {  // f32 B: TF32, m16n16k8
  using Elem = float;
  using Frag = wmma::precision::tf32;
  static constexpr int kK = 8, kPad = 4;
  __device__ static Elem from_a(float x) { return wmma::__float_to_tf32(x); }
  __device__ static Elem from_b(const void* b, int64_t i) { return wmma::__float_to_tf32(static_cast<const float*>(b)[i]); }
  __device__ static Elem zero() { return 0.0f; }
};
template <>
struct Tc<1> {  // f16 B: A rounded to f16, m16n16k16
  using Elem = __half;
  using Frag = __half;
  static constexpr int kK = 16, kPad = 8;
  __device__ static Elem from_a(float x) { return __float2half_rn(x); }
  __device__ static Elem from_b(const void* b, int64_t i) { return __ushort_as_half(static_cast<const unsigned short*>(b)[i]); }
  __device__ static Elem zero() { return __ushort_as_half(0); }
};
template <>
struct Tc<2> {  // bf16 B: A rounded to bf16, m16n16k16
  using Elem = __nv_bfloat16;
  using Frag = __nv_bfloat16;
  static constexpr int kK = 16, kPad = 8;
  __device__ static Elem from_a(float x) { return __float2bfloat16_rn(x); }
  __device__ static Elem from_b(const void* b, int64_t i) { return __ushort_as_bfloat16(static_cast<const unsigned short*>(b)[i]); }
  __device__ static Elem zero() { return __ushort_as_bfloat16(0); }
};

constexpr int kTcBK = 32, kTcThreads = 256, kTcWarpsM = 2, kTcWarpsN = 4;

template <int kB, int kBM, int kBN>
struct TcShape {
  using T = Tc<kB>;
  using Elem = typename T::Elem;
  static constexpr int kLdA = kTcBK + T::kPad;  // As[m][k]: k contiguous (matrix_a row_major)
  // Bs is [k][n] (matrix_b row_major) for B [k,n], or [n][k] (matrix_b col_major) for B [n,k]: either way the
  // staging stores and the global loads both run along the contiguous global dimension.
  static constexpr int kLdBRow = kBN + T::kPad;
  static constexpr int kLdBCol = kTcBK + T::kPad;
  static constexpr int kABytes = kBM * kLdA * static_cast<int>(sizeof(Elem));
  static constexpr int kBBytesRow = kTcBK * kLdBRow * static_cast<int>(sizeof(Elem));
  static constexpr int kBBytesCol = kBN * kLdBCol * static_cast<int>(sizeof(Elem));
  static constexpr int kBBytes = kBBytesRow > kBBytesCol ? kBBytesRow : kBBytesCol;
  static constexpr int kWM = kBM / kTcWarpsM, kWN = kBN / kTcWarpsN;  // one warp's sub-tile
  static constexpr int kFM = kWM / 16, kFN = kWN / 16;                // its 16x16 accumulator fragments
  static constexpr int kAPerThread = kBM * kTcBK / kTcThreads, kBPerThread = kBN * kTcBK / kTcThreads;
  static constexpr int kScratchBytes = kTcThreads / 32 * 16 * 16 * 4;  // one 16x16 f32 staging tile per warp
  static_assert(kABytes % 128 == 0, "Bs must start 128-byte aligned");
  static_assert(kABytes + kBBytes <= 48 * 1024, "static shared memory is limited to 48 KiB");
  static_assert(kScratchBytes <= kABytes + kBBytes, "the epilogue scratch reuses the tile buffers");
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tiles are whole fragments");
  static_assert(kTcThreads % kBM == 0 && kTcThreads % kBN == 0 && kTcThreads % kTcBK == 0, "see TcLoadA / TcLoadB");
  static_assert(kLdA % (sizeof(Elem) == 2 ? 8 : 4) == 0 && kLdBRow % (sizeof(Elem) == 2 ? 8 : 4) == 0,
                "WMMA leading dimensions must be multiples of 16 bytes");
};

// Where thread `tid` puts its elements of a tile. Element e = tid + t * kTcThreads of an A tile (kBM x kTcBK) is
// read along the contiguous global dimension: k for A [m,k], m for A [k,m] (trans_a). Since kTcThreads is a
// multiple of both kTcBK and kBM, one coordinate is the same for all t and the other steps by a constant.
struct TcLoadA {
  int mm0, kk0, dm, dk, s0, sstep;
  __device__ TcLoadA(int tid, int bm, int lds, bool trans_a)
      : mm0(trans_a ? tid % bm : tid / kTcBK), kk0(trans_a ? tid / bm : tid % kTcBK),
        dm(trans_a ? 0 : kTcThreads / kTcBK), dk(trans_a ? kTcThreads / bm : 0),
        s0(mm0 * lds + kk0), sstep(dm * lds + dk) {}
};
// The same for a B tile (kTcBK x kBN): along k for B [n,k] (trans_b; staged [n][k]), along n for B [k,n] (staged
// [k][n]).
struct TcLoadB {
  int nn0, kk0, dn, dk, s0, sstep;
  __device__ TcLoadB(int tid, int bn, int lds, bool trans_b)
      : nn0(trans_b ? tid / kTcBK : tid % bn), kk0(trans_b ? tid % kTcBK : tid / bn),
        dn(trans_b ? kTcThreads / kTcBK : 0), dk(trans_b ? 0 : kTcThreads / bn),
        s0(trans_b ? nn0 * lds + kk0 : kk0 * lds + nn0), sstep(trans_b ? dn * lds : dk * lds) {}
};

// The tensor-core kernels' epilogue: each accumulator fragment goes through the warp's 16x16 f32 staging tile in
// shared memory (the fragment's register layout is opaque), which also applies the edge masks, alpha, beta and bias.
// (row0, col0): the warp's first output element.
template <typename FragC, int kFM, int kFN>
__device__ __forceinline__ void tc_epilogue(const GemmArgs& g, float* c, FragC (&acc)[kFM][kFN], float* scratch, int lane, int64_t row0,
                                            int64_t col0) {
#pragma unroll
  for (int i = 0; i < kFM; ++i) {
#pragma unroll
    for (int j = 0; j < kFN; ++j) {
      wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int e = lane + 32 * t, r = e >> 4, cc = e & 15;
        const int64_t gm = row0 + i * 16 + r, gn = col0 + j * 16 + cc;
        if (gm < g.m && gn < g.n) store_c(g, c, gm, gn, scratch[e]);
      }
      __syncwarp();
    }
  }
}

// 128x128 tiles need more than 128 registers per thread (one block per SM); 64x64 tiles fit two blocks per SM.
template <int kB, int kBM, int kBN, bool kTransB>
__global__ void __launch_bounds__(kTcThreads, kBM >= 128 ? 1 : 2)
gemm_tc_kernel(GemmArgs g, int64_t batch, int64_t sa, int64_t sb, int64_t sc, int64_t tiles_m, int64_t tiles_n) {
  using S = TcShape<kB, kBM, kBN>;
  using T = Tc<kB>;
  using Elem = typename S::Elem;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, T::kK, typename T::Frag, wmma::row_major>;
  using FragB = wmma::fragment<wmma::matrix_b, 16, 16, T::kK, typename T::Frag,
                               typename std::conditional<kTransB, wmma::col_major, wmma::row_major>::type>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, T::kK, float>;
  constexpr int kLdB = kTransB ? S::kLdBCol : S::kLdBRow;

  __shared__ __align__(128) unsigned char smem[S::kABytes + S::kBBytes];
  Elem* As = reinterpret_cast<Elem*>(smem);
  Elem* Bs = reinterpret_cast<Elem*>(smem + S::kABytes);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / kTcWarpsN, wn = warp % kTcWarpsN;
  const TcLoadA la(tid, kBM, S::kLdA, g.trans_a);
  const TcLoadB lb(tid, kBN, kLdB, kTransB);

  for (int64_t bi = blockIdx.z; bi < batch; bi += gridDim.z) {
    const Batch<kB> op(g, bi, sa, sb, sc);
    for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
      for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const int64_t m0 = tm * kBM, n0 = tn * kBN;
        FragC acc[S::kFM][S::kFN];
#pragma unroll
        for (int i = 0; i < S::kFM; ++i)
#pragma unroll
          for (int j = 0; j < S::kFN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

        // Register staging: the next k tile is fetched from global memory while the current one is multiplied.
        // Thread tid's t-th element of a tile sits at (row0 + t * drow, col0 + t * dcol) with one of the steps zero
        // (see TcLoad), so both the global and the shared address advance by a fixed stride per element.
        Elem a_reg[S::kAPerThread], b_reg[S::kBPerThread];
        auto fetch = [&](int64_t k0) {
          const int64_t gm0 = m0 + la.mm0, gk0 = k0 + la.kk0;
          const float* pa = op.a + (g.trans_a ? gk0 * g.lda + gm0 : gm0 * g.lda + gk0);
          const int64_t a_step = g.trans_a ? la.dk * g.lda : la.dm * g.lda;
#pragma unroll
          for (int t = 0; t < S::kAPerThread; ++t) {
            const bool in = gm0 + t * la.dm < g.m && gk0 + t * la.dk < g.k;
            a_reg[t] = in ? T::from_a(pa[t * a_step]) : T::zero();
          }
          const int64_t gn0 = n0 + lb.nn0, gkb0 = k0 + lb.kk0;
          const int64_t b_base = kTransB ? gn0 * g.ldb + gkb0 : gkb0 * g.ldb + gn0;
          const int64_t b_step = kTransB ? lb.dn * g.ldb : lb.dk * g.ldb;
#pragma unroll
          for (int t = 0; t < S::kBPerThread; ++t) {
            const bool in = gn0 + t * lb.dn < g.n && gkb0 + t * lb.dk < g.k;
            b_reg[t] = in ? T::from_b(op.b, b_base + t * b_step) : T::zero();
          }
        };
        auto stage = [&]() {
#pragma unroll
          for (int t = 0; t < S::kAPerThread; ++t) As[la.s0 + t * la.sstep] = a_reg[t];
#pragma unroll
          for (int t = 0; t < S::kBPerThread; ++t) Bs[lb.s0 + t * lb.sstep] = b_reg[t];
        };

        fetch(0);
        for (int64_t k0 = 0; k0 < g.k; k0 += kTcBK) {
          stage();
          __syncthreads();
          if (k0 + kTcBK < g.k) fetch(k0 + kTcBK);
#pragma unroll
          for (int kk = 0; kk < kTcBK; kk += T::kK) {
            FragB fb[S::kFN];
#pragma unroll
            for (int j = 0; j < S::kFN; ++j) {
              const int col = wn * S::kWN + j * 16;
              wmma::load_matrix_sync(fb[j], Bs + (kTransB ? col * kLdB + kk : kk * kLdB + col), kLdB);
            }
            // One A fragment live at a time keeps the register footprint down.
#pragma unroll
            for (int i = 0; i < S::kFM; ++i) {
              FragA fa;
              wmma::load_matrix_sync(fa, As + (wm * S::kWM + i * 16) * S::kLdA + kk, S::kLdA);
#pragma unroll
              for (int j = 0; j < S::kFN; ++j) wmma::mma_sync(acc[i][j], fa, fb[j], acc[i][j]);
            }
          }
          __syncthreads();  // every warp is done with this tile before the next stage() overwrites it
        }

        tc_epilogue(g, op.c, acc, reinterpret_cast<float*>(smem) + warp * 256, lane, m0 + wm * S::kWM, n0 + wn * S::kWN);
        __syncthreads();  // the scratch aliases the tiles the next output tile stages into
      }
    }
  }
}

// ---------------------------------------------------------------- tensor cores, the HF Linear layout (A [m,k], B [n,k])

// The common case of every Linear layer, given its own kernel: A row-major and B [n,k] (trans_b), both aligned for
// 16-byte loads. What the generic kernel above does per element, this one does per 16-byte vector: the staging
// registers hold 4 A floats and 8 (4 for TF32) B elements per load, A is converted four at a time, and shared memory
// has two stages, so one barrier per k tile is enough (a stage is rewritten only after every warp passed the barrier
// that follows its last read). Offsets inside a tile are 32-bit and the operand pointers advance by BK per tile,
// which keeps the kernel at 128 registers: two blocks (16 warps) per SM hide the global-load latency that one block
// of 8 warps exposed (the gpu-check measured the generic kernel at 3 % of the H100's bf16 tensor peak).
// Same arithmetic as the generic kernel (same rounding of A and B, f32 accumulation, k ascending in steps of the
// WMMA k), so the results are deterministic; the two kernels may differ by accumulation order across k tiles only.
template <int kB>
struct TcNt {
  using T = Tc<kB>;
  using Elem = typename T::Elem;
  static constexpr int kBM = 128, kBN = 128;
  static constexpr int kBK = kB == 0 ? 16 : 32;  // 64 bytes of k per row either way
  static constexpr int kLd = kBK + T::kPad;      // 80 bytes per staged row: conflict-free fragment loads
  static constexpr int kBVec = kB == 0 ? 4 : 8;  // B elements per 16-byte load
  static constexpr int kAVecs = kBM * kBK / 4 / kTcThreads;      // float4 loads of A per thread per tile
  static constexpr int kBVecs = kBN * kBK / kBVec / kTcThreads;  // 16-byte loads of B per thread per tile
  static constexpr int kARowStep = kTcThreads / (kBK / 4), kBRowStep = kTcThreads / (kBK / kBVec);
  static constexpr int kStageElems = (kBM + kBN) * kLd;
  static constexpr int kSmemBytes = 2 * kStageElems * static_cast<int>(sizeof(Elem));
  static constexpr int kWM = kBM / kTcWarpsM, kWN = kBN / kTcWarpsN, kFM = kWM / 16, kFN = kWN / 16;
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory is limited to 48 KiB");
  static_assert(kTcThreads / 32 * 16 * 16 * 4 <= kSmemBytes, "the epilogue scratch reuses the stages");
  static_assert(kAVecs >= 1 && kBVecs >= 1, "every thread loads at least one vector of each operand");
};

template <int kB>
__device__ __forceinline__ void store4_a(typename TcNt<kB>::Elem* dst, float4 v) {
  using T = Tc<kB>;
  if constexpr (kB == 0) {
    *reinterpret_cast<float4*>(dst) = make_float4(T::from_a(v.x), T::from_a(v.y), T::from_a(v.z), T::from_a(v.w));
  } else {
    typename TcNt<kB>::Elem e[4] = {T::from_a(v.x), T::from_a(v.y), T::from_a(v.z), T::from_a(v.w)};
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(e);
  }
}

// Blocks per SM the kernel is compiled for. 1 (no register cap, no spills) measured faster than 2 (128 registers,
// spills) on the Llama 512x4096x4096 shape of an H100 and slower on 4096^3 (native/README.md, GPU check); a build
// flag (CUDAFLAGS=-DTESSERA_GEMM_NT_MIN_BLOCKS=2) so the trade can be re-measured on other cards.
#ifndef TESSERA_GEMM_NT_MIN_BLOCKS
#define TESSERA_GEMM_NT_MIN_BLOCKS 1
#endif
template <int kB>
__global__ void __launch_bounds__(kTcThreads, TESSERA_GEMM_NT_MIN_BLOCKS)
gemm_tc_nt_kernel(GemmArgs g, int64_t batch, int64_t sa, int64_t sb, int64_t sc, int64_t tiles_m, int64_t tiles_n) {
  using S = TcNt<kB>;
  using T = Tc<kB>;
  using Elem = typename S::Elem;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, T::kK, typename T::Frag, wmma::row_major>;
  using FragB = wmma::fragment<wmma::matrix_b, 16, 16, T::kK, typename T::Frag, wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, T::kK, float>;
  using BRaw = typename std::conditional<kB == 0, float, uint16_t>::type;

  __shared__ __align__(128) unsigned char smem[S::kSmemBytes];
  Elem* const stages = reinterpret_cast<Elem*>(smem);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / kTcWarpsN, wn = warp % kTcWarpsN;
  // This thread's vectors: A row ar0 + t * kARowStep at k offset ac; B row br0 + t * kBRowStep at k offset bc.
  const int ar0 = tid / (S::kBK / 4), ac = (tid % (S::kBK / 4)) * 4;
  const int br0 = tid / (S::kBK / S::kBVec), bc = (tid % (S::kBK / S::kBVec)) * S::kBVec;

  for (int64_t bi = blockIdx.z; bi < batch; bi += gridDim.z) {
    const float* a_batch = g.a + bi * sa;
    const BRaw* b_batch = static_cast<const BRaw*>(g.b) + bi * sb;
    float* c_batch = g.c + bi * sc;
    for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
      for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const int64_t m0 = tm * S::kBM, n0 = tn * S::kBN;
        const float* pa = a_batch + (m0 + ar0) * g.lda + ac;  // advanced by kBK per tile
        const BRaw* pb = b_batch + (n0 + br0) * g.ldb + bc;
        const int a_rows = static_cast<int>(g.m - m0 < S::kBM ? g.m - m0 : S::kBM) - ar0;  // rows this thread may read
        const int b_rows = static_cast<int>(g.n - n0 < S::kBN ? g.n - n0 : S::kBN) - br0;

        FragC acc[S::kFM][S::kFN];
#pragma unroll
        for (int i = 0; i < S::kFM; ++i)
#pragma unroll
          for (int j = 0; j < S::kFN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

        float4 a_reg[S::kAVecs];
        uint4 b_reg[S::kBVecs];
        // k_left: columns of k from this tile's start; a vector is loaded whole when it is inside k, element-wise
        // (zero-filled past k) when it straddles the end, and zero when it is past it.
        auto fetch = [&](int64_t k_left) {
          const int ka = static_cast<int>(k_left - ac < 4 ? k_left - ac : 4);
#pragma unroll
          for (int t = 0; t < S::kAVecs; ++t) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (t * S::kARowStep < a_rows) {
              const float* p = pa + static_cast<int64_t>(t) * S::kARowStep * g.lda;
              if (ka >= 4) v = __ldg(reinterpret_cast<const float4*>(p));
              else {
                if (ka > 0) v.x = p[0];
                if (ka > 1) v.y = p[1];
                if (ka > 2) v.z = p[2];
              }
            }
            a_reg[t] = v;
          }
          const int kb = static_cast<int>(k_left - bc < S::kBVec ? k_left - bc : S::kBVec);
#pragma unroll
          for (int t = 0; t < S::kBVecs; ++t) {
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (t * S::kBRowStep < b_rows) {
              const BRaw* p = pb + static_cast<int64_t>(t) * S::kBRowStep * g.ldb;
              if (kb >= S::kBVec) v = __ldg(reinterpret_cast<const uint4*>(p));
              else if (kb > 0) {
                BRaw e[S::kBVec] = {};
                for (int q = 0; q < kb; ++q) e[q] = p[q];
                v = *reinterpret_cast<const uint4*>(e);
              }
            }
            b_reg[t] = v;
          }
          pa += S::kBK;
          pb += S::kBK;
        };
        auto stage = [&](int s) {
          Elem* As = stages + s * S::kStageElems;
          Elem* Bs = As + S::kBM * S::kLd;
#pragma unroll
          for (int t = 0; t < S::kAVecs; ++t) store4_a<kB>(As + (ar0 + t * S::kARowStep) * S::kLd + ac, a_reg[t]);
#pragma unroll
          for (int t = 0; t < S::kBVecs; ++t) {
            Elem* dst = Bs + (br0 + t * S::kBRowStep) * S::kLd + bc;
            if constexpr (kB == 0) {
              const float4 f = *reinterpret_cast<const float4*>(&b_reg[t]);
              *reinterpret_cast<float4*>(dst) = make_float4(T::from_a(f.x), T::from_a(f.y), T::from_a(f.z), T::from_a(f.w));
            } else {
              *reinterpret_cast<uint4*>(dst) = b_reg[t];
            }
          }
        };

        fetch(g.k);
        stage(0);
        __syncthreads();
        int cur = 0;
        for (int64_t k0 = 0; k0 < g.k; k0 += S::kBK) {
          const bool more = k0 + S::kBK < g.k;
          if (more) fetch(g.k - k0 - S::kBK);
          const Elem* As = stages + cur * S::kStageElems;
          const Elem* Bs = As + S::kBM * S::kLd;
          // Not unrolled: one k step's fragments live at a time is what keeps the kernel inside 128 registers.
#pragma unroll 1
          for (int kk = 0; kk < S::kBK; kk += T::kK) {
            FragB fb[S::kFN];
#pragma unroll
            for (int j = 0; j < S::kFN; ++j) wmma::load_matrix_sync(fb[j], Bs + (wn * S::kWN + j * 16) * S::kLd + kk, S::kLd);
#pragma unroll
            for (int i = 0; i < S::kFM; ++i) {
              FragA fa;
              wmma::load_matrix_sync(fa, As + (wm * S::kWM + i * 16) * S::kLd + kk, S::kLd);
#pragma unroll
              for (int j = 0; j < S::kFN; ++j) wmma::mma_sync(acc[i][j], fa, fb[j], acc[i][j]);
            }
          }
          if (more) stage(cur ^ 1);
          __syncthreads();
          cur ^= 1;
        }

        tc_epilogue(g, c_batch, acc, reinterpret_cast<float*>(smem) + warp * 256, lane, m0 + wm * S::kWM, n0 + wn * S::kWN);
        __syncthreads();  // the scratch aliases the stages the next output tile fills
      }
    }
  }
}

// ---------------------------------------------------------------- launch

int multiprocessors() {
  static const int count = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 132;  // an H100/H200's count: only a tile-size heuristic depends on it
    }
    return n;
  }();
  return count;
}

unsigned grid_dim(int64_t n, int64_t cap) { return static_cast<unsigned>(n < cap ? n : cap); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <int kB>
void launch_reference(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  const int64_t total = batch * g.m * g.n;
  const int64_t blocks = ceil_div(total, 256);
  if (blocks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "gemm reference: too many outputs for one launch");
  gemm_reference_kernel<kB><<<static_cast<unsigned>(blocks), 256>>>(g, batch, sa, sb, sc);
  check_launch("gemm_reference_kernel");
}

template <int kB>
void launch_simt(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  const int64_t tm = ceil_div(g.m, kSimtBM), tn = ceil_div(g.n, kSimtBN);
  const dim3 grid(grid_dim(tn, 0x7fffffffLL), grid_dim(tm, kMaxGridYZ), grid_dim(batch, kMaxGridYZ));
  gemm_simt_kernel<kB><<<grid, kSimtThreads>>>(g, batch, sa, sb, sc, tm, tn);
  check_launch("gemm_simt_kernel");
}

template <int kB>
void launch_skinny(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  if (g.trans_b) {
    constexpr int kVec = kB == 0 ? 4 : 8;  // 16 bytes of B per lane per step
    const int64_t eb = b_elem_bytes(kB);
    const bool vec = reinterpret_cast<uintptr_t>(g.b) % 16 == 0 && (g.ldb * eb) % 16 == 0 && (sb * eb) % 16 == 0;
    const dim3 grid(grid_dim(ceil_div(g.n, kSkinnyWarps * kSkinnyCols), 0x7fffffffLL), grid_dim(batch, kMaxGridYZ));
    if (vec) gemm_skinny_nk_kernel<kB, kVec><<<grid, kSkinnyThreads>>>(g, batch, sa, sb, sc);
    else gemm_skinny_nk_kernel<kB, 1><<<grid, kSkinnyThreads>>>(g, batch, sa, sb, sc);
    check_launch("gemm_skinny_nk_kernel");
  } else {
    const dim3 grid(grid_dim(ceil_div(g.n, 32), 0x7fffffffLL), grid_dim(batch, kMaxGridYZ));
    gemm_skinny_kn_kernel<kB><<<grid, kSkinnyThreads>>>(g, batch, sa, sb, sc);
    check_launch("gemm_skinny_kn_kernel");
  }
}

template <int kB, int kTile>
void launch_tc_tile(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  const int64_t tm = ceil_div(g.m, kTile), tn = ceil_div(g.n, kTile);
  const dim3 grid(grid_dim(tn, 0x7fffffffLL), grid_dim(tm, kMaxGridYZ), grid_dim(batch, kMaxGridYZ));
  if (g.trans_b) gemm_tc_kernel<kB, kTile, kTile, true><<<grid, kTcThreads>>>(g, batch, sa, sb, sc, tm, tn);
  else gemm_tc_kernel<kB, kTile, kTile, false><<<grid, kTcThreads>>>(g, batch, sa, sb, sc, tm, tn);
  check_launch("gemm_tc_kernel");
}

// Whether the Linear-layout kernel applies: A [m,k] and B [n,k], every row of both 16-byte aligned.
template <int kB>
bool tc_nt_fits(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb) {
  const int64_t b_vec = TcNt<kB>::kBVec;
  const bool a_ok = reinterpret_cast<uintptr_t>(g.a) % 16 == 0 && g.lda % 4 == 0 && (batch == 1 || sa % 4 == 0);
  const bool b_ok = reinterpret_cast<uintptr_t>(g.b) % 16 == 0 && g.ldb % b_vec == 0 && (batch == 1 || sb % b_vec == 0);
  return !g.trans_a && g.trans_b && a_ok && b_ok;
}

template <int kB>
void launch_tc(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  // 128x128 tiles reuse each loaded element twice as often; use them only while they still keep the SMs busy (the
  // Linear-layout kernel runs two blocks per SM, the generic one a single block).
  const int64_t big_tiles = ceil_div(g.m, 128) * ceil_div(g.n, 128) * batch;
  if (tc_nt_fits<kB>(g, batch, sa, sb) && 2 * big_tiles >= multiprocessors()) {
    const int64_t tm = ceil_div(g.m, 128), tn = ceil_div(g.n, 128);
    const dim3 grid(grid_dim(tn, 0x7fffffffLL), grid_dim(tm, kMaxGridYZ), grid_dim(batch, kMaxGridYZ));
    gemm_tc_nt_kernel<kB><<<grid, kTcThreads>>>(g, batch, sa, sb, sc, tm, tn);
    check_launch("gemm_tc_nt_kernel");
  } else if (big_tiles >= multiprocessors()) {
    launch_tc_tile<kB, 128>(g, batch, sa, sb, sc);
  } else {
    launch_tc_tile<kB, 64>(g, batch, sa, sb, sc);
  }
}

template <int kB>
void dispatch(const GemmArgs& g, int64_t batch, int64_t sa, int64_t sb, int64_t sc, GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::Reference: launch_reference<kB>(g, batch, sa, sb, sc); break;
    case GemmKernel::Simt: launch_simt<kB>(g, batch, sa, sb, sc); break;
    case GemmKernel::Skinny: launch_skinny<kB>(g, batch, sa, sb, sc); break;
    default: launch_tc<kB>(g, batch, sa, sb, sc); break;
  }
}

}  // namespace

GemmKernel gemm_auto_kernel(int64_t m, int64_t n, int64_t k) {
  if (m <= kSkinnyMaxRows) return GemmKernel::Skinny;
  if (m < 16 || n < 16 || k < 16) return GemmKernel::Simt;
  return GemmKernel::Tensor;
}

void gemm(const GemmArgs& args, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c, GemmKernel kernel) {
  if (batch == 0 || args.m == 0 || args.n == 0) return;  // nothing to write (k == 0 still writes beta*C + bias)
  if (kernel == GemmKernel::Auto) kernel = gemm_auto_kernel(args.m, args.n, args.k);
  if (kernel == GemmKernel::Skinny && args.m > kSkinnyMaxRows)
    fail(ErrorCode::InvalidArgument, "gemm: the skinny kernel handles m <= " + std::to_string(kSkinnyMaxRows) + ", got m = " + std::to_string(args.m));
  switch (dtype_code(args.b_dtype)) {
    case 0: dispatch<0>(args, batch, stride_a, stride_b, stride_c, kernel); break;
    case 1: dispatch<1>(args, batch, stride_a, stride_b, stride_c, kernel); break;
    default: dispatch<2>(args, batch, stride_a, stride_b, stride_c, kernel); break;
  }
}

}  // namespace tessera::gpu

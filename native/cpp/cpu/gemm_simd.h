// GEMM internals shared by gemm.cc (dispatch, scalar path) and gemm_avx2.cc / gemm_avx512.cc (SIMD bodies).
//
// Every packed GEMM runs as Z[P,Q] = X[P,K] · Y[K,Q], oriented so that the big operand is never transposed:
//   trans_b (HF Linear, W stored [n,k]):  X = W (rows contiguous in k), Y = op(A)^T, Z = C^T (stored transposed)
//   otherwise (B stored [k,n]):           X = op(A),                    Y = B,       Z = C
// The micro-kernel broadcasts one X element per row and k against vectors of Y along q. X rows are read in
// place (f32, and bf16 on AVX-512, converted by a shift in the kernel) or converted into a small tile first;
// Y is read as k-rows of q-vectors from packed panels. For trans_b, Y = op(A)^T is small and packed once per
// call (prepack_at) into panels every task reads, and tasks walk each tile of weight rows along all of k, so
// weights stream from memory exactly once in long sequential runs. Otherwise each task packs its block of B
// (on AVX-512 inside the first micro-kernel of each k block, which hides the loads behind arithmetic).
// Work is split into tasks over (P blocks x Q blocks); each task owns its Z block and reduces k in a fixed
// block order, so results do not depend on the thread count.
//
// Decode (m <= kGemmDotMaxRows with trans_b) instead streams each weight row once: dot products vectorised
// over k against all m activation rows (see GemmDotPlan), in register blocks of a few rows and a few weight
// rows; more rows than one block holds re-read a tile of weight rows from cache (dot_range in
// gemm_common.inl). Every output is then the same dot product whatever m is, so a row's result does not depend
// on its batch mates while m stays on this path: up to 8 rows on AVX2 and AVX-512, which hand more to their packed
// tiles (see dot_max_rows in gemm.cc), and up to kGemmDotMaxRows on the scalar path.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "../core/dtype.h"
#include "kernels.h"

namespace tessera::cpu {

// Largest k block a task reduces between two Z updates, and the row stride of the packed X tile: the tile's
// rows sit one cache line further apart than the block so that they fall in different L1 sets.
constexpr int64_t kGemmKcMax = 4096;
constexpr int64_t kGemmXStride = kGemmKcMax + 16;
// The most rows of op(A) the dot-product (decode) path handles when B is transposed (the scalar path's limit; the
// SIMD ISAs use it up to 8 rows, see dot_max_rows in gemm.cc).
constexpr int64_t kGemmDotMaxRows = 32;
// Weight rows per tile when the decode rows take several register blocks (a multiple of every ISA's weight
// rows per group, 3, 4, 6 and 8, so no tile ends in a partial group): 24 rows of k = 4096 f32 are 384 KB,
// which stays in L2 while the other blocks of rows re-read it.
constexpr int64_t kGemmDotTileRows = 24;

struct GemmPlan {
  int64_t P = 0, Q = 0, K = 0;
  // X element (p, k): x[p * ldx + k], or x[k * ldx + p] when x_trans (only for op(A) with trans_a).
  const void* x = nullptr;
  int64_t ldx = 0;
  DType x_dtype = DType::F32;
  bool x_trans = false;
  // Y: either prepacked panels (y_packed != null; see gemm_panel_stride) or Y(k, q) = y[k * ldy + q].
  const float* y_packed = nullptr;
  const void* y = nullptr;
  int64_t ldy = 0;
  DType y_dtype = DType::F32;
  // Z(p, q) is c[p * ldc + q], or c[q * ldc + p] when z_trans. bias is indexed by C's column: q, or p if z_trans.
  float* c = nullptr;
  int64_t ldc = 0;
  bool z_trans = false;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;
  // Blocking: kc <= kGemmKcMax; p_block is a multiple of the ISA's mr, q_block of its nr.
  int64_t kc = 0, p_block = 0, q_block = 0, p_blocks = 0, q_blocks = 0;  // tasks = p_blocks * q_blocks
  // Loop order inside a task: X tile outer and k blocks inner (only with y_packed), or k blocks outer.
  bool x_outer = false;
};

// The decode path: C[i, j] = alpha * dot(a_i, w_j) + beta * C[i, j] + bias[j] for i < m <= kGemmDotMaxRows.
struct GemmDotPlan {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;  // rows of op(A), contiguous in k
  int64_t lda = 0;
  // AVX-512 with bf16 weights: op(A) rows regrouped per 32 k as 16 even then 16 odd elements, zero padded,
  // 64-byte aligned (gemm_dot_pair_a_avx512).
  const float* a_pairs = nullptr;
  int64_t ld_pairs = 0;
  const void* w = nullptr;   // [n, k] rows
  int64_t ldw = 0;
  DType w_dtype = DType::F32;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;
  int64_t rows_per_task = 0;  // weight rows per task; tasks = ceil(n / rows_per_task)
};

// The bf16-compute path (GemmArgs::bf16_compute with bf16 weights [n, k] and trans_b, on AVX512-BF16): Z = C^T =
// W · op(A)^T with VDPBF16PS, each instruction summing two products of bf16 pairs into f32 lanes. X = W rows are
// read in place, one 32-bit broadcast per pair (k = 2i, 2i + 1); Y = op(A)^T is rounded to bf16 (round to nearest
// even) and packed once per call into panels of up to kBf16Nr rows of op(A): panel j holds, for every pair i,
// the words (a[q][2i] | a[q][2i + 1] << 16) of its rows q, padded with zeros to a multiple of 16 rows (the last
// panel only). Every output is a lane that sums the pairs of one k block in order, and the k blocks (kc_pairs each,
// a function of k alone) are added in order, so a row's result depends neither on m, on its batch mates nor on the
// thread count. Decode sizes (m <= 8) take the decode path on rounded activations instead (gemm.cc).
constexpr int kBf16Nr = 48;
// The longest k block, in pairs: every k up to 16,384 is one block. Long blocks keep each tile's 8 weight streams
// running (every block restarts them from DRAM, which the first panel waits for) and drop the partial-sum round trips
// through C: on Zen 4 a 4096 x 4096 tile pass went from 76 / 87 % of the VDPBF16PS peak (m = 32 / 128, blocks of 512
// pairs) to 95 / 98 % in one block. The tile's weight rows (8 x 32 KB at most) then live in L2, not L1.
constexpr int64_t kBf16KcMaxPairs = 8192;

struct GemmBf16Plan {
  int64_t n = 0, m = 0, k = 0, pairs = 0;  // pairs = ceil(k / 2)
  int64_t kc_pairs = 0;                    // pairs per k block: ceil(pairs / blocks), blocks = ceil(pairs / kBf16KcMaxPairs)
  const uint16_t* w = nullptr;             // [n, k] bf16 rows
  int64_t ldw = 0;
  const uint32_t* y = nullptr;             // packed panels (gemm_bf16_panel_offset / _width)
  GemmPlan out;                            // only c, ldc, z_trans (true), alpha, beta, bias are read
  int64_t p_block = 0, q_block = 0, p_blocks = 0, q_blocks = 0;  // q_block a multiple of kBf16Nr
};

void gemm_bf16_pack_avx512(const float* a, int64_t lda, bool trans_a, int64_t rows, int64_t k, uint32_t* panel);
void gemm_bf16_task_avx512(const GemmBf16Plan& plan, int64_t task);
// The same plan on AMX-BF16 tiles (p_block a multiple of 32): gemm_bf16_amx.cc, and its emulation for tests.
void gemm_bf16_task_amx(const GemmBf16Plan& plan, int64_t task);
void gemm_bf16_task_amx_emulated(const GemmBf16Plan& plan, int64_t task);

// Tile shape of one ISA's micro-kernel.
struct GemmShape {
  int mr;     // rows of X per tile (broadcast side)
  int nr;     // columns of Y per panel (vector side)
  int lanes;  // vector width in floats; panels narrower than nr are padded to a multiple of this
};

GemmShape gemm_shape_avx2();
GemmShape gemm_shape_avx512();
void gemm_prepack_at_avx2(const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst);
void gemm_prepack_at_avx512(const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst);
void gemm_task_avx2(const GemmPlan& plan, int64_t task);
void gemm_task_avx512(const GemmPlan& plan, int64_t task);
void gemm_dot_task_avx2(const GemmDotPlan& plan, int64_t task);
void gemm_dot_task_avx512(const GemmDotPlan& plan, int64_t task);
int64_t gemm_dot_pairs_ld_avx512(int64_t k);
void gemm_dot_pair_a_avx512(const float* a, int64_t lda, int64_t m, int64_t k, float* dst);

namespace gemm_detail {
// Internal linkage on purpose: each ISA file compiles its own copy of these helpers with its own target
// flags, so the linker can never merge an AVX-512 copy of an inline function into the scalar path.
namespace {
inline int64_t gemm_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t gemm_round_up(int64_t a, int64_t b) { return gemm_ceil_div(a, b) * b; }

// Prepacked Y for Q columns and K rows: panel j covers columns [j*nr, j*nr + width) and stores K rows of
// `stride` floats (nr, or the last panel's width rounded up to the vector width, zero padded) at j*nr*K.
inline int64_t gemm_panel_stride(int64_t Q, int64_t j, const GemmShape& s) {
  const int64_t width = std::min<int64_t>(s.nr, Q - j * s.nr);
  return width == s.nr ? s.nr : gemm_round_up(width, s.lanes);
}
inline int64_t gemm_prepacked_floats(int64_t Q, int64_t K, const GemmShape& s) {
  if (Q <= 0) return 0;
  const int64_t last = gemm_ceil_div(Q, s.nr) - 1;
  return (last * s.nr + gemm_panel_stride(Q, last, s)) * K;
}

// Words of the packed Y of the bf16 path before panel j, and the words per pair of panel j (its rows rounded up
// to a multiple of 16).
inline int64_t gemm_bf16_panel_offset(int64_t j, int64_t pairs) { return j * kBf16Nr * pairs; }
inline int64_t gemm_bf16_panel_width(int64_t m, int64_t j) {
  return gemm_round_up(std::min<int64_t>(kBf16Nr, m - j * kBf16Nr), 16);
}

// 64-byte aligned scratch that grows on demand and is kept for the next call (page faults on fresh
// allocations would cost as much as a small GEMM).
class GemmScratch {
 public:
  GemmScratch() = default;
  GemmScratch(const GemmScratch&) = delete;
  GemmScratch& operator=(const GemmScratch&) = delete;
  ~GemmScratch() { std::free(p_); }
  float* get(int64_t floats) {
    const size_t need = static_cast<size_t>(std::max<int64_t>(floats, 16)) * sizeof(float);
    if (need > bytes_) {
      std::free(p_);
      bytes_ = (need + 4095) & ~size_t(4095);
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes_));
      if (!p_) { bytes_ = 0; throw std::bad_alloc(); }
    }
    return p_;
  }
  // Drops a very large buffer after use so one huge GEMM does not pin memory for the process lifetime.
  void trim(int64_t keep_floats) {
    if (bytes_ > static_cast<size_t>(keep_floats) * sizeof(float)) { std::free(p_); p_ = nullptr; bytes_ = 0; }
  }

 private:
  float* p_ = nullptr;
  size_t bytes_ = 0;
};

// Runs one task of a packed plan. Kern provides kMr, kNr, kLanes and
//   pack_x(plan, p, rows, k0, kc, xt)         rows of X into xt[r * kGemmXStride + kk]
//   pack_y(plan, k0, kc, q, cols, dst, stride) Y rows k0.. into dst[kk * stride + j], zero padded to stride
//   micro(rows, cols, kc, x, xs, xdt, y, ystride, plan, p, q, first)   one register tile, including the C
//       update; X row r is x + r * xs elements of dtype xdt (f32, or bf16 where kDirectBf16)
//   micro_pack(rows, cols, kc, x, xs, plan, k0, ydst, ystride, p, q, first)   the same with f32 X, reading Y
//       from plan.y and packing it into ydst on the way (only where kPackInMicro)
template <class Kern>
void run_gemm_task(const GemmPlan& plan, int64_t task) {
  constexpr int MR = Kern::kMr, NR = Kern::kNr, VL = Kern::kLanes;
  const GemmShape shape{MR, NR, VL};
  const int64_t pb = task / plan.q_blocks, qb = task % plan.q_blocks;
  const int64_t p0 = pb * plan.p_block, p1 = std::min(plan.P, p0 + plan.p_block);
  const int64_t q0 = qb * plan.q_block, q1 = std::min(plan.Q, q0 + plan.q_block);
  if (p0 >= p1 || q0 >= q1) return;

  static thread_local GemmScratch x_scratch, y_scratch;
  float* xt = x_scratch.get(MR * kGemmXStride);
  const bool x_direct = !plan.x_trans && (plan.x_dtype == DType::F32 || (plan.x_dtype == DType::BF16 && Kern::kDirectBf16));

  // One register tile row: X rows [p, p + rows) over k block [k0, k0 + kc) against every Y panel of the task.
  // With pack_y set, the micro-kernel also packs Y's block from its source rows into yblk as it goes.
  auto tile_row = [&](int64_t p, int64_t k0, int64_t kc, float* yblk, bool pack_y) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, p1 - p));
    // X rows are read in place when the micro-kernel can consume their dtype directly (f32 always, bf16 on
    // AVX-512); otherwise they are converted into the packed tile xt first.
    const void* xr = xt;
    int64_t xs = kGemmXStride;
    DType xdt = DType::F32;
    if (x_direct) {
      xr = static_cast<const char*>(plan.x) + (p * plan.ldx + k0) * static_cast<int64_t>(dtype_size(plan.x_dtype));
      xs = plan.ldx;
      xdt = plan.x_dtype;
    } else {
      Kern::pack_x(plan, p, rows, k0, kc, xt);
    }
    for (int64_t q = q0; q < q1; q += NR) {
      const int cols = static_cast<int>(std::min<int64_t>(NR, q1 - q));
      if (plan.y_packed) {
        const int64_t j = q / NR;
        const int64_t stride = gemm_panel_stride(plan.Q, j, shape);
        Kern::micro(rows, cols, kc, xr, xs, xdt, plan.y_packed + j * NR * plan.K + k0 * stride, stride, plan, p, q, k0 == 0);
        continue;
      }
      const int64_t stride = cols == NR ? NR : gemm_round_up(cols, VL);
      float* y = yblk + (q - q0) * kc;
      if constexpr (Kern::kPackInMicro) {
        if (pack_y) {
          Kern::micro_pack(rows, cols, kc, static_cast<const float*>(xr), xs, plan, k0, y, stride, p, q, k0 == 0);
          continue;
        }
      }
      Kern::micro(rows, cols, kc, xr, xs, xdt, y, stride, plan, p, q, k0 == 0);
    }
  };

  if (plan.x_outer) {
    // Y is prepacked and small enough to stay in cache: walk each X tile along all of k, so the X rows (the
    // weights) stream from memory in long sequential runs the hardware prefetchers follow.
    for (int64_t p = p0; p < p1; p += MR)
      for (int64_t k0 = 0; k0 < plan.K; k0 += plan.kc) tile_row(p, k0, std::min(plan.kc, plan.K - k0), nullptr, false);
    return;
  }
  float* yblk = plan.y_packed ? nullptr : y_scratch.get(plan.kc * gemm_round_up(q1 - q0, NR));
  // Packing Y separately is a burst of loads with no arithmetic to hide their latency, so where the ISA can,
  // the first X tile of each k block packs Y inside its micro-kernel (X is f32 whenever Y is not prepacked).
  const bool pack_in_micro = Kern::kPackInMicro && !plan.y_packed;
  for (int64_t k0 = 0; k0 < plan.K; k0 += plan.kc) {
    const int64_t kc = std::min(plan.kc, plan.K - k0);
    if (!plan.y_packed && !pack_in_micro) {
      for (int64_t q = q0; q < q1; q += NR) {
        const int cols = static_cast<int>(std::min<int64_t>(NR, q1 - q));
        const int64_t stride = cols == NR ? NR : gemm_round_up(cols, VL);
        Kern::pack_y(plan, k0, kc, q, cols, yblk + (q - q0) * kc, stride);
      }
    }
    for (int64_t p = p0; p < p1; p += MR) tile_row(p, k0, kc, yblk, pack_in_micro && p == p0);
  }
}

// Writes one finished scalar result: the first k block applies beta, bias and alpha; later blocks add on.
inline void gemm_store_scalar(float* c, float acc, float alpha, float beta, const float* bias_elem, bool first) {
  if (first) {
    float v = alpha * acc;
    if (beta != 0.0f) v += beta * *c;
    if (bias_elem) v += *bias_elem;
    *c = v;
  } else {
    *c += alpha * acc;
  }
}

// Scalar epilogue for a tile held as acc[r * ld + j] (rows of X, columns of Y), for either orientation.
inline void gemm_store_tile_scalar(const float* acc, int ld, int rows, int cols, const GemmPlan& plan, int64_t p, int64_t q,
                                   bool first) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      float* c = plan.z_trans ? plan.c + (q + j) * plan.ldc + (p + r) : plan.c + (p + r) * plan.ldc + (q + j);
      const float* b = plan.bias ? plan.bias + (plan.z_trans ? p + r : q + j) : nullptr;
      gemm_store_scalar(c, acc[r * ld + j], plan.alpha, plan.beta, b, first);
    }
  }
}

}  // namespace
}  // namespace gemm_detail

}  // namespace tessera::cpu

// GEMM bodies compiled for AVX-512 (F/BW/VL/DQ + FMA + F16C); see gemm_simd.h for the plan they execute.
// Micro-kernel: kMr rows of X broadcast against up to 3 zmm of Y = an 8 x 48 tile in 24 zmm accumulators
// (Zen 4 and Skylake-X retire one 16-lane FMA per cycle per port group; 24 independent chains hide the
// 4-cycle FMA latency and leave registers for the 3 Y vectors).
// GCC 12's intrinsic headers build "undefined" vectors as self-initialised locals, which trips
// -W(maybe-)uninitialized hundreds of times once the intrinsics are inlined here; the warnings say nothing
// about this file's code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "gemm_simd.h"

namespace tessera::cpu {
namespace {

constexpr int kMr = 8;
constexpr int kNv = 3;
constexpr int kLanes = 16;
constexpr int kNr = kNv * kLanes;
// Decode register block: up to 8 rows of op(A) x 3 weight rows = 24 accumulators (more weight rows for fewer
// rows; see dot_rows), with the weight and activation vectors, in the 32 zmm registers.
constexpr int kDotRows = 8;

#include "gemm_tile_avx512.inl"

// Loads up to 16 elements of f32/f16/bf16 at base[i..] as f32 (lanes outside `mask` are zero).
template <DType DT>
inline __m512 load16(const void* base, int64_t i, __mmask16 mask) {
  if constexpr (DT == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(base) + i);
    if constexpr (DT == DType::F16) return _mm512_cvtph_ps(h);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
template <DType DT>
inline __m512 load16_full(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    if constexpr (DT == DType::F16) return _mm512_cvtph_ps(h);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// dst[0..n) = float(src[0..n))
template <DType DT>
void convert_row(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16_full<DT>(src, i));
  if (i < n) _mm512_mask_storeu_ps(dst + i, lane_mask(n - i), load16<DT>(src, i, lane_mask(n - i)));
}

// dst[0..stride) = float(src[0..n)) then zeros; stride is a multiple of 16.
template <DType DT>
void convert_row_padded(const void* src, int64_t n, float* dst, int64_t stride) {
  for (int64_t i = 0; i < stride; i += 16) _mm512_storeu_ps(dst + i, load16<DT>(src, i, lane_mask(n - i)));
}

#include "gemm_common.inl"

// ---------------------------------------------------------------- Kern (packing: gemm_common.inl)

struct Kern : KernPacking {
  static constexpr int kMr = tessera::cpu::kMr;
  static constexpr int kNr = tessera::cpu::kNr;
  static constexpr int kLanes = tessera::cpu::kLanes;
  static constexpr bool kDirectBf16 = true;
  static constexpr bool kPackInMicro = true;

  static void micro(int rows, int cols, int64_t kc, const void* x, int64_t xs, DType xdt, const float* y, int64_t ys,
                    const GemmPlan& plan, int64_t p, int64_t q, bool first);
  static void micro_pack(int rows, int cols, int64_t kc, const float* x, int64_t xs, const GemmPlan& plan, int64_t k0, float* ydst,
                         int64_t ys, int64_t p, int64_t q, bool first);
};

// ---------------------------------------------------------------- micro-kernel

// X row r starts at x + r * xs elements of XDT. bf16 rows are read in place: one 32-bit broadcast covers two
// consecutive k, and bf16 -> f32 is a shift (the even element) or a mask (the odd one).
template <int R, int NV, DType XDT>
void micro_tile(int cols, int64_t kc, const void* x, int64_t xs, const float* y, int64_t ys, const GemmPlan& plan, int64_t p,
                int64_t q, bool first) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();

  if constexpr (XDT == DType::F32) {
    const float* xt = static_cast<const float*>(x);
    for (int64_t kk = 0; kk < kc; ++kk) {
      __m512 yv[NV];
      for (int v = 0; v < NV; ++v) yv[v] = _mm512_loadu_ps(y + v * 16);
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_set1_ps(xt[r * xs + kk]);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xb, yv[v], acc[r][v]);
      }
      y += ys;
    }
  } else {
    const uint16_t* xh = static_cast<const uint16_t*>(x);
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    int64_t kk = 0;
    for (; kk + 2 <= kc; kk += 2) {
      __m512 y0[NV], y1[NV];
      for (int v = 0; v < NV; ++v) y0[v] = _mm512_loadu_ps(y + v * 16);
      for (int v = 0; v < NV; ++v) y1[v] = _mm512_loadu_ps(y + ys + v * 16);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, xh + r * xs + kk, sizeof(pair));
        const __m512i d = _mm512_set1_epi32(pair);
        const __m512 x0 = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
        const __m512 x1 = _mm512_castsi512_ps(_mm512_and_si512(d, hi_mask));
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x0, y0[v], acc[r][v]);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x1, y1[v], acc[r][v]);
      }
      y += 2 * ys;
    }
    if (kk < kc) {
      __m512 yv[NV];
      for (int v = 0; v < NV; ++v) yv[v] = _mm512_loadu_ps(y + v * 16);
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(uint32_t(xh[r * xs + kk]) << 16)));
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xb, yv[v], acc[r][v]);
      }
    }
  }

  store_tile<R, NV>(acc, cols, plan, p, q, first);
}

// As micro_tile (f32 X), but Y is read straight from its source rows (Y(k, q) = y[k * ldy + q], dtype YDT, the
// missing columns of a right-edge panel as zeros) and written to the packed block ydst as it is consumed: the
// first X tile of a block packs Y while it multiplies, so the loads overlap the arithmetic.
template <int R, int NV, DType YDT>
void micro_tile_pack(int cols, int64_t kc, const float* xt, int64_t xs, const void* ysrc, int64_t ldy, float* ydst, int64_t ys,
                     const GemmPlan& plan, int64_t p, int64_t q, bool first) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  // Two copies of the loop: plain loads for full panels, masked loads only for a right-edge panel (with
  // masked-load builtins in the loop, GCC keeps the accumulators on the stack).
  // Rows of Y lie a page or more apart, where hardware prefetchers stop, so fetch kPackAhead rows ahead.
  constexpr int64_t kPackAhead = 12;
  const int64_t esize = static_cast<int64_t>(dtype_size(YDT));
  const char* ybytes = static_cast<const char*>(ysrc);
#define TESSERA_PACK_LOOP(LOAD)                                                  \
  for (int64_t kk = 0; kk < kc; ++kk) {                                          \
    for (int64_t off = 0; off < NV * 16 * esize; off += 64)                      \
      _mm_prefetch(ybytes + ((kk + kPackAhead) * ldy) * esize + off, _MM_HINT_T0); \
    __m512 yv[NV];                                                               \
    for (int v = 0; v < NV; ++v) {                                               \
      yv[v] = LOAD;                                                              \
      _mm512_storeu_ps(ydst + kk * ys + v * 16, yv[v]);                          \
    }                                                                            \
    for (int r = 0; r < R; ++r) {                                                \
      const __m512 xb = _mm512_set1_ps(xt[r * xs + kk]);                         \
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(xb, yv[v], acc[r][v]); \
    }                                                                            \
  }
  if (cols == NV * 16) {
    TESSERA_PACK_LOOP(load16_full<YDT>(ysrc, kk * ldy + v * 16))
  } else {
    __mmask16 m[NV];
    for (int v = 0; v < NV; ++v) m[v] = lane_mask(cols - v * 16);
    TESSERA_PACK_LOOP(load16<YDT>(ysrc, kk * ldy + v * 16, m[v]))
  }
#undef TESSERA_PACK_LOOP
  store_tile<R, NV>(acc, cols, plan, p, q, first);
}

using MicroFn = void (*)(int, int64_t, const void*, int64_t, const float*, int64_t, const GemmPlan&, int64_t, int64_t, bool);

template <int R, DType XDT = DType::F32>
constexpr MicroFn micro_for(int nv) {
  return nv == 1 ? &micro_tile<R, 1, XDT> : nv == 2 ? &micro_tile<R, 2, XDT> : &micro_tile<R, 3, XDT>;
}
template <DType XDT>
struct MicroTable {
  static constexpr MicroFn fn[kMr][kNv] = {
      {micro_for<1, XDT>(1), micro_for<1, XDT>(2), micro_for<1, XDT>(3)},
      {micro_for<2, XDT>(1), micro_for<2, XDT>(2), micro_for<2, XDT>(3)},
      {micro_for<3, XDT>(1), micro_for<3, XDT>(2), micro_for<3, XDT>(3)},
      {micro_for<4, XDT>(1), micro_for<4, XDT>(2), micro_for<4, XDT>(3)},
      {micro_for<5, XDT>(1), micro_for<5, XDT>(2), micro_for<5, XDT>(3)},
      {micro_for<6, XDT>(1), micro_for<6, XDT>(2), micro_for<6, XDT>(3)},
      {micro_for<7, XDT>(1), micro_for<7, XDT>(2), micro_for<7, XDT>(3)},
      {micro_for<8, XDT>(1), micro_for<8, XDT>(2), micro_for<8, XDT>(3)},
  };
};

void Kern::micro(int rows, int cols, int64_t kc, const void* x, int64_t xs, DType xdt, const float* y, int64_t ys,
                 const GemmPlan& plan, int64_t p, int64_t q, bool first) {
  const int nv = (cols + 15) / 16;
  const MicroFn fn = xdt == DType::BF16 ? MicroTable<DType::BF16>::fn[rows - 1][nv - 1]
                                        : MicroTable<DType::F32>::fn[rows - 1][nv - 1];
  fn(cols, kc, x, xs, y, ys, plan, p, q, first);
}

using MicroPackFn = void (*)(int, int64_t, const float*, int64_t, const void*, int64_t, float*, int64_t, const GemmPlan&, int64_t,
                             int64_t, bool);

template <int R, DType YDT>
constexpr MicroPackFn micro_pack_for(int nv) {
  return nv == 1 ? &micro_tile_pack<R, 1, YDT> : nv == 2 ? &micro_tile_pack<R, 2, YDT> : &micro_tile_pack<R, 3, YDT>;
}
template <DType YDT>
struct MicroPackTable {
  static constexpr MicroPackFn fn[kMr][kNv] = {
      {micro_pack_for<1, YDT>(1), micro_pack_for<1, YDT>(2), micro_pack_for<1, YDT>(3)},
      {micro_pack_for<2, YDT>(1), micro_pack_for<2, YDT>(2), micro_pack_for<2, YDT>(3)},
      {micro_pack_for<3, YDT>(1), micro_pack_for<3, YDT>(2), micro_pack_for<3, YDT>(3)},
      {micro_pack_for<4, YDT>(1), micro_pack_for<4, YDT>(2), micro_pack_for<4, YDT>(3)},
      {micro_pack_for<5, YDT>(1), micro_pack_for<5, YDT>(2), micro_pack_for<5, YDT>(3)},
      {micro_pack_for<6, YDT>(1), micro_pack_for<6, YDT>(2), micro_pack_for<6, YDT>(3)},
      {micro_pack_for<7, YDT>(1), micro_pack_for<7, YDT>(2), micro_pack_for<7, YDT>(3)},
      {micro_pack_for<8, YDT>(1), micro_pack_for<8, YDT>(2), micro_pack_for<8, YDT>(3)},
  };
};

void Kern::micro_pack(int rows, int cols, int64_t kc, const float* x, int64_t xs, const GemmPlan& plan, int64_t k0, float* ydst,
                      int64_t ys, int64_t p, int64_t q, bool first) {
  const int nv = (cols + 15) / 16;
  const int64_t off = k0 * plan.ldy + q;
  MicroPackFn fn;
  const void* src;
  switch (plan.y_dtype) {
    case DType::F16:
      fn = MicroPackTable<DType::F16>::fn[rows - 1][nv - 1];
      src = offset_elems<DType::F16>(plan.y, off);
      break;
    case DType::BF16:
      fn = MicroPackTable<DType::BF16>::fn[rows - 1][nv - 1];
      src = offset_elems<DType::BF16>(plan.y, off);
      break;
    default:
      fn = MicroPackTable<DType::F32>::fn[rows - 1][nv - 1];
      src = offset_elems<DType::F32>(plan.y, off);
  }
  fn(cols, kc, x, xs, src, plan.ldy, ydst, ys, plan, p, q, first);
}

// ---------------------------------------------------------------- decode: dot products over k

// Horizontal sums of 16 vectors in one pass: lane i of the result is the sum of the lanes of v[i]. A tree of
// 128-bit-lane, then in-lane shuffles (45 operations instead of 16 separate reductions); the summation order
// inside each vector is fixed.
__attribute__((always_inline)) inline __m512 hsum16(const __m512 (&v)[16]) {
  // The tree leaves lane 4j + t holding the sum of its input j + 4t, so feed it v transposed as a 4 x 4 grid.
  __m512 u[16];
  for (int i = 0; i < 16; ++i) u[i] = v[(i % 4) * 4 + i / 4];
  __m512 s1[8];
  for (int i = 0; i < 8; ++i)
    s1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x44), _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xEE));
  __m512 s2[4];
  for (int i = 0; i < 4; ++i)
    s2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0x88), _mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0xDD));
  __m512 s3[2];
  for (int i = 0; i < 2; ++i)
    s3[i] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * i], s2[2 * i + 1], 0x44), _mm512_shuffle_ps(s2[2 * i], s2[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xDD));
}

// Reduces acc[r][w] and writes C[r][j + w] = alpha * sum + beta * C + bias[j + w] for r < M, w < NW.
// Always inlined into the group functions.
template <int M, int NW>
__attribute__((always_inline)) inline void dot_store(const __m512 (&acc)[M][NW], const GemmDotPlan& pl, int64_t j) {
  constexpr int N = M * NW;
  constexpr int NP = (N + 15) / 16 * 16;
  // The 16-vector groups are taken straight from acc (indices are compile-time constants once unrolled):
  // copying acc into a zero-padded array first made GCC clear it in memory with a rep stos on every call.
  alignas(64) float sums[NP];
#pragma GCC unroll 4
  for (int c = 0; c < NP / 16; ++c) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const int f = c * 16 + i;
      v[i] = f < N ? acc[f / NW][f % NW] : _mm512_setzero_ps();
    }
    _mm512_store_ps(sums + c * 16, hsum16(v));
  }
  const __mmask16 m = lane_mask(NW);
  const __m512 alpha = _mm512_set1_ps(pl.alpha);
  const __m512 bias = pl.bias ? _mm512_maskz_loadu_ps(m, pl.bias + j) : _mm512_setzero_ps();
  for (int r = 0; r < M; ++r) {
    float* c = pl.c + r * pl.ldc + j;
    __m512 out = _mm512_mul_ps(alpha, _mm512_maskz_loadu_ps(m, sums + r * NW));
    if (pl.beta != 0.0f) out = _mm512_fmadd_ps(_mm512_set1_ps(pl.beta), _mm512_maskz_loadu_ps(m, c), out);
    _mm512_mask_storeu_ps(c, m, _mm512_add_ps(out, bias));
  }
}

// Weight rows [j, j + NW) against all M rows of op(A): acc[r][w] accumulates a_r * w_{j+w} over 16-lane chunks.
template <int M, int NW, DType DT>
void dot_group(const GemmDotPlan& pl, int64_t j) {
  __m512 acc[M][NW];
  for (int r = 0; r < M; ++r)
    for (int w = 0; w < NW; ++w) acc[r][w] = _mm512_setzero_ps();
  const void* wrow[NW];
  for (int w = 0; w < NW; ++w) wrow[w] = offset_elems<DT>(pl.w, (j + w) * pl.ldw);
  const int64_t k = pl.k;
  const int64_t ahead = NW * pl.ldw;  // the next group's rows, as in dot_group_bf16
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    // One prefetch per 64-byte line: every 16 k for f32, every 32 k for f16.
    if (DT == DType::F32 || (kk & 31) == 0)
      for (int w = 0; w < NW; ++w) _mm_prefetch(static_cast<const char*>(offset_elems<DT>(wrow[w], kk + ahead)), _MM_HINT_T0);
    __m512 wv[NW];
    for (int w = 0; w < NW; ++w) wv[w] = load16_full<DT>(wrow[w], kk);
    for (int r = 0; r < M; ++r) {
      __m512 a = _mm512_loadu_ps(pl.a + r * pl.lda + kk);
      // Keep the activation chunk in a register: folded into each FMA as a memory operand it would be
      // reloaded NW times, and the loads (not the FMAs) would bound the loop.
      __asm__("" : "+v"(a));
      for (int w = 0; w < NW; ++w) acc[r][w] = _mm512_fmadd_ps(a, wv[w], acc[r][w]);
    }
  }
  if (kk < k) {
    const __mmask16 m = lane_mask(k - kk);
    __m512 wv[NW];
    for (int w = 0; w < NW; ++w) wv[w] = load16<DT>(wrow[w], kk, m);
    for (int r = 0; r < M; ++r) {
      const __m512 a = _mm512_maskz_loadu_ps(m, pl.a + r * pl.lda + kk);
      for (int w = 0; w < NW; ++w) acc[r][w] = _mm512_fmadd_ps(a, wv[w], acc[r][w]);
    }
  }
  dot_store<M, NW>(acc, pl, j);
}

// bf16 weights, 32 k at a time: one 64-byte load gives the even elements (shift left 16) and the odd ones
// (mask the high half) as f32, with no shuffles; op(A) comes pre-split into even/odd halves (a_pairs).
template <int M, int NW>
void dot_group_bf16(const GemmDotPlan& pl, int64_t j) {
  __m512 acc[M][NW];
  for (int r = 0; r < M; ++r)
    for (int w = 0; w < NW; ++w) acc[r][w] = _mm512_setzero_ps();
  const uint16_t* wrow[NW];
  for (int w = 0; w < NW; ++w) wrow[w] = static_cast<const uint16_t*>(pl.w) + (j + w) * pl.ldw;
  const float* arow[M];
  for (int r = 0; r < M; ++r) arow[r] = pl.a_pairs + r * pl.ld_pairs;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t k = pl.k;
  // One 32-k step; wm selects the weights that exist (the tail's missing ones load as zero, as does
  // a_pairs' padding). Written out twice below rather than as a helper: passing the accumulators by
  // reference makes GCC keep them on the stack inside the loop.
#define TESSERA_DOT_BF16_STEP(kk, LOAD)                                                                                  \
  {                                                                                                                     \
    for (int w = 0; w < NW; ++w) _mm_prefetch(reinterpret_cast<const char*>(wrow[w] + (kk) + ahead), _MM_HINT_T0);     \
    __m512 wv[NW];                                                                                                      \
    for (int w = 0; w < NW; ++w) wv[w] = _mm512_castsi512_ps(_mm512_slli_epi32(LOAD(wrow[w] + (kk)), 16));             \
    for (int r = 0; r < M; ++r) {                                                                                       \
      __m512 a = _mm512_load_ps(arow[r] + (kk));                                                                        \
      __asm__("" : "+v"(a));                                                                                            \
      for (int w = 0; w < NW; ++w) acc[r][w] = _mm512_fmadd_ps(a, wv[w], acc[r][w]);                                   \
    }                                                                                                                   \
    for (int w = 0; w < NW; ++w) wv[w] = _mm512_castsi512_ps(_mm512_and_si512(LOAD(wrow[w] + (kk)), hi_mask));         \
    for (int r = 0; r < M; ++r) {                                                                                       \
      __m512 a = _mm512_load_ps(arow[r] + (kk) + 16);                                                                   \
      __asm__("" : "+v"(a));                                                                                            \
      for (int w = 0; w < NW; ++w) acc[r][w] = _mm512_fmadd_ps(a, wv[w], acc[r][w]);                                   \
    }                                                                                                                   \
  }
  // Plain loads in the main loop: with masked-load builtins there, GCC stores every accumulator to the stack
  // on each iteration.
#define TESSERA_FULL_LOAD(p) _mm512_loadu_si512(p)
#define TESSERA_TAIL_LOAD(p) _mm512_maskz_loadu_epi16(tail, p)
  // Prefetch the next group's rows at the same k: one group ahead of the stream, and it bridges the jump to
  // new rows at the end of this group, which the hardware prefetchers only pick up after a few misses.
  const int64_t ahead = NW * pl.ldw;
  int64_t kk = 0;
  for (; kk + 32 <= k; kk += 32) TESSERA_DOT_BF16_STEP(kk, TESSERA_FULL_LOAD)
  if (kk < k) {
    const __mmask32 tail = static_cast<__mmask32>((uint64_t(1) << (k - kk)) - 1u);
    TESSERA_DOT_BF16_STEP(kk, TESSERA_TAIL_LOAD)
  }
#undef TESSERA_FULL_LOAD
#undef TESSERA_TAIL_LOAD
#undef TESSERA_DOT_BF16_STEP
  dot_store<M, NW>(acc, pl, j);
}

template <int M, DType DT>
void dot_rows(const GemmDotPlan& pl, int64_t j0, int64_t j1) {
  // Weight rows per group: enough independent accumulators to hide FMA latency, within 32 registers.
  constexpr int NW = M == 1 ? 8 : M == 2 ? 6 : M <= 4 ? 4 : 3;
  int64_t j = j0;
  if constexpr (DT == DType::BF16) {
    for (; j + NW <= j1; j += NW) dot_group_bf16<M, NW>(pl, j);
    for (; j < j1; ++j) dot_group_bf16<M, 1>(pl, j);
  } else {
    for (; j + NW <= j1; j += NW) dot_group<M, NW, DT>(pl, j);
    for (; j < j1; ++j) dot_group<M, 1, DT>(pl, j);
  }
}

// 16 rows x 16 k at a time through registers (groups past `width` are the zero padding).
void pack_panel_transposed(const float* a, int64_t lda, int64_t q0, int64_t width, int64_t k, int64_t stride, float* panel) {
  for (int64_t g = 0; g * 16 < stride; ++g) {
    const int64_t rows = std::min<int64_t>(16, width - g * 16);  // may be <= 0 for a padded group
    for (int64_t kk = 0; kk < k; kk += 16) {
      const __mmask16 km = lane_mask(k - kk);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(km, a + (q0 + g * 16 + i) * lda + kk) : _mm512_setzero_ps();
      transpose16(r);
      const int64_t kn = std::min<int64_t>(16, k - kk);
      for (int i = 0; i < kn; ++i) _mm512_storeu_ps(panel + (kk + i) * stride + g * 16, r[i]);
    }
  }
}

}  // namespace

GemmShape gemm_shape_avx512() { return GemmShape{kMr, kNr, kLanes}; }

void gemm_task_avx512(const GemmPlan& plan, int64_t task) { gemm_detail::run_gemm_task<Kern>(plan, task); }

void gemm_prepack_at_avx512(const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst) {
  prepack_at(a, lda, trans_a, m, k, dst);
}

// Padded by one cache line so that consecutive rows do not alias in L1 (see gemm_dot).
int64_t gemm_dot_pairs_ld_avx512(int64_t k) { return gemm_round_up(k, 32) + 16; }

void gemm_dot_pair_a_avx512(const float* a, int64_t lda, int64_t m, int64_t k, float* dst) {
  const int64_t ld = gemm_dot_pairs_ld_avx512(k);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t r = 0; r < m; ++r) {
    const float* src = a + r * lda;
    for (int64_t kk = 0; kk < k; kk += 32) {  // the last chunk is zero padded up to a multiple of 32
      const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(k - kk), src + kk);
      const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(k - kk - 16), src + kk + 16);
      _mm512_store_ps(dst + r * ld + kk, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_store_ps(dst + r * ld + kk + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
  }
}

void gemm_dot_task_avx512(const GemmDotPlan& pl, int64_t task) { dot_task(pl, task); }

}  // namespace tessera::cpu

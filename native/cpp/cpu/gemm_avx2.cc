// GEMM bodies compiled for AVX2 + FMA + F16C; see gemm_simd.h for the plan they execute.
// Micro-kernel: 6 rows of X broadcast against 2 ymm of Y = a 6 x 16 tile in 12 of the 16 ymm registers
// (two FMA ports with 4-5 cycle latency need at least 8-10 independent accumulators).
// GCC 12's intrinsic headers build "undefined" vectors as self-initialised locals, which trips
// -W(maybe-)uninitialized hundreds of times once the intrinsics are inlined here; the warnings say nothing
// about this file's code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>

#include "gemm_simd.h"

namespace tessera::cpu {
namespace {

constexpr int kMr = 6;
constexpr int kNv = 2;
constexpr int kLanes = 8;
constexpr int kNr = kNv * kLanes;
// Decode register block: 4 rows of op(A) x 3 weight rows = 12 accumulators, 3 weight vectors and one activation
// vector in the 16 ymm registers.
constexpr int kDotRows = 4;

inline __m256i lane_mask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), lanes);
}

template <DType DT>
inline __m256 load8(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    if constexpr (DT == DType::F16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Up to 8 elements (n < 8 reads only n; the rest are zero). Tails go through a zeroed copy of the raw
// elements so the same vector conversion applies.
template <DType DT>
inline __m256 load8_partial(const void* base, int64_t i, int64_t n) {
  if (n >= 8) return load8<DT>(base, i);
  using Raw = std::conditional_t<DT == DType::F32, float, uint16_t>;
  alignas(32) Raw tmp[8] = {};
  const Raw* src = static_cast<const Raw*>(base) + i;
  for (int64_t t = 0; t < n; ++t) tmp[t] = src[t];
  return load8<DT>(tmp, 0);
}

template <DType DT>
void convert_row(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<DT>(src, i));
  if (i < n) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, load8_partial<DT>(src, i, n - i));
    for (int64_t t = 0; i + t < n; ++t) dst[i + t] = tmp[t];
  }
}

template <DType DT>
void convert_row_padded(const void* src, int64_t n, float* dst, int64_t stride) {
  for (int64_t i = 0; i < stride; i += 8) _mm256_storeu_ps(dst + i, load8_partial<DT>(src, i, n - i));
}

#include "gemm_common.inl"

struct Kern : KernPacking {
  static constexpr int kMr = tessera::cpu::kMr;
  static constexpr int kNr = tessera::cpu::kNr;
  static constexpr int kLanes = tessera::cpu::kLanes;
  static constexpr bool kDirectBf16 = false;
  static constexpr bool kPackInMicro = false;

  static void micro(int rows, int cols, int64_t kc, const void* xt, int64_t xs, DType xdt, const float* y, int64_t ys,
                    const GemmPlan& plan, int64_t p, int64_t q, bool first);
};

template <int R, int NV>
void micro_tile(int cols, int64_t kc, const float* xt, int64_t xs, const float* y, int64_t ys, const GemmPlan& plan, int64_t p,
                int64_t q, bool first) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < kc; ++kk) {
    __m256 yv[NV];
    for (int v = 0; v < NV; ++v) yv[v] = _mm256_loadu_ps(y + v * 8);
    for (int r = 0; r < R; ++r) {
      // set1 of a plain load, not _mm256_broadcast_ss: GCC treats that builtin as a possible store and then
      // keeps every accumulator on the stack inside the loop.
      const __m256 xb = _mm256_set1_ps(xt[r * xs + kk]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(xb, yv[v], acc[r][v]);
    }
    y += ys;
  }
  if (plan.z_trans) {  // C^T: rare enough on AVX2 machines that a scalar transposed update is fine
    alignas(32) float tile[R][NV * 8];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) _mm256_store_ps(&tile[r][v * 8], acc[r][v]);
    gemm_store_tile_scalar(&tile[0][0], NV * 8, R, cols, plan, p, q, first);
    return;
  }
  const __m256 alpha = _mm256_set1_ps(plan.alpha);
  const __m256 beta = _mm256_set1_ps(plan.beta);
  const bool use_beta = first && plan.beta != 0.0f;
  for (int v = 0; v < NV; ++v) {
    const __m256i m = lane_mask(cols - v * 8);
    const __m256 bias = first && plan.bias ? _mm256_maskload_ps(plan.bias + q + v * 8, m) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      float* c = plan.c + (p + r) * plan.ldc + q + v * 8;
      __m256 out;
      if (first) {
        out = _mm256_mul_ps(alpha, acc[r][v]);
        if (use_beta) out = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c, m), out);
        out = _mm256_add_ps(out, bias);
      } else {
        out = _mm256_fmadd_ps(alpha, acc[r][v], _mm256_maskload_ps(c, m));
      }
      _mm256_maskstore_ps(c, m, out);
    }
  }
}

using MicroFn = void (*)(int, int64_t, const float*, int64_t, const float*, int64_t, const GemmPlan&, int64_t, int64_t, bool);

void Kern::micro(int rows, int cols, int64_t kc, const void* xt, int64_t xs, DType, const float* y, int64_t ys, const GemmPlan& plan,
                 int64_t p, int64_t q, bool first) {
  static constexpr MicroFn table[kMr][kNv] = {
      {&micro_tile<1, 1>, &micro_tile<1, 2>}, {&micro_tile<2, 1>, &micro_tile<2, 2>}, {&micro_tile<3, 1>, &micro_tile<3, 2>},
      {&micro_tile<4, 1>, &micro_tile<4, 2>}, {&micro_tile<5, 1>, &micro_tile<5, 2>}, {&micro_tile<6, 1>, &micro_tile<6, 2>},
  };
  table[rows - 1][(cols + 7) / 8 - 1](cols, kc, static_cast<const float*>(xt), xs, y, ys, plan, p, q, first);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int M, int NW, DType DT>
void dot_group(const GemmDotPlan& pl, int64_t j) {
  __m256 acc[M][NW];
  for (int r = 0; r < M; ++r)
    for (int w = 0; w < NW; ++w) acc[r][w] = _mm256_setzero_ps();
  const void* wrow[NW];
  for (int w = 0; w < NW; ++w) wrow[w] = offset_elems<DT>(pl.w, (j + w) * pl.ldw);
  const int64_t k = pl.k;
  // Prefetch the next group's rows at the same k, one line per 64 bytes: the hardware prefetchers follow a
  // row only after a few misses, and a group's rows are short runs (k elements) that end in a jump.
  const int64_t ahead = NW * pl.ldw;
  constexpr int64_t kLine = DT == DType::F32 ? 16 : 32;  // elements per 64-byte line
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    if ((kk & (kLine - 1)) == 0)
      for (int w = 0; w < NW; ++w) _mm_prefetch(static_cast<const char*>(offset_elems<DT>(wrow[w], kk + ahead)), _MM_HINT_T0);
    __m256 wv[NW];
    for (int w = 0; w < NW; ++w) wv[w] = load8<DT>(wrow[w], kk);
    for (int r = 0; r < M; ++r) {
      const __m256 a = _mm256_loadu_ps(pl.a + r * pl.lda + kk);
      for (int w = 0; w < NW; ++w) acc[r][w] = _mm256_fmadd_ps(a, wv[w], acc[r][w]);
    }
  }
  if (kk < k) {
    __m256 wv[NW];
    for (int w = 0; w < NW; ++w) wv[w] = load8_partial<DT>(wrow[w], kk, k - kk);
    for (int r = 0; r < M; ++r) {
      const __m256 a = load8_partial<DType::F32>(pl.a + r * pl.lda, kk, k - kk);
      for (int w = 0; w < NW; ++w) acc[r][w] = _mm256_fmadd_ps(a, wv[w], acc[r][w]);
    }
  }
  for (int r = 0; r < M; ++r)
    for (int w = 0; w < NW; ++w)
      gemm_store_scalar(pl.c + r * pl.ldc + j + w, hsum8(acc[r][w]), pl.alpha, pl.beta, pl.bias ? pl.bias + j + w : nullptr, true);
}

template <int M, DType DT>
void dot_rows(const GemmDotPlan& pl, int64_t j0, int64_t j1) {
  static_assert(M <= kDotRows, "one register block");
  constexpr int NW = M <= 2 ? 4 : 3;
  int64_t j = j0;
  for (; j + NW <= j1; j += NW) dot_group<M, NW, DT>(pl, j);
  for (; j < j1; ++j) dot_group<M, 1, DT>(pl, j);
}

// A scalar transpose: op(A) is small next to W here, so this is not the hot path.
void pack_panel_transposed(const float* a, int64_t lda, int64_t q0, int64_t width, int64_t k, int64_t stride, float* panel) {
  for (int64_t kk = 0; kk < k; ++kk) {
    float* dst_row = panel + kk * stride;
    int64_t i = 0;
    for (; i < width; ++i) dst_row[i] = a[(q0 + i) * lda + kk];
    for (; i < stride; ++i) dst_row[i] = 0.0f;
  }
}

}  // namespace

GemmShape gemm_shape_avx2() { return GemmShape{kMr, kNr, kLanes}; }

void gemm_task_avx2(const GemmPlan& plan, int64_t task) { gemm_detail::run_gemm_task<Kern>(plan, task); }

void gemm_prepack_at_avx2(const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst) {
  prepack_at(a, lda, trans_a, m, k, dst);
}

void gemm_dot_task_avx2(const GemmDotPlan& pl, int64_t task) { dot_task(pl, task); }

}  // namespace tessera::cpu

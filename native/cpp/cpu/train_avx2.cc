// Training kernel bodies compiled for AVX2+FMA; the loops are in train_body.inl.
#include <algorithm>
#include <cmath>

#include "train_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // vec_math.inl also defines the elementwise loops
#include "vec_math.inl"
#pragma GCC diagnostic pop

using VD = __m256d;
static inline VD vd_zero() { return _mm256_setzero_pd(); }
static inline VD vd_lo(V v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline VD vd_hi(V v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline VD vd_add(VD a, VD b) { return _mm256_add_pd(a, b); }
static inline VD vd_fmadd(VD a, VD b, VD c) { return _mm256_fmadd_pd(a, b, c); }
static inline double vd_hsum(VD v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
static inline V v_tail_or(V v, int64_t r, V fill) { return _mm256_blendv_ps(fill, v, _mm256_castsi256_ps(tail_mask(r))); }
static inline V v_sqrt(V v) { return _mm256_sqrt_ps(v); }
static inline V v_fmsub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }

#include "train_body.inl"

}  // namespace avx2

void layer_norm_bwd_rows_avx2(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                              NormRowStats* stats) {
  avx2::layer_norm_bwd_rows(x, dy, rows, dim, gamma, eps, dx, stats);
}
void rms_norm_bwd_rows_avx2(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                            NormRowStats* stats) {
  avx2::rms_norm_bwd_rows(x, dy, rows, dim, gamma, eps, dx, stats);
}
void softmax_bwd_rows_avx2(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  avx2::softmax_bwd_rows(y, dy, rows, dim, scale, dx);
}
void cross_entropy_rows_avx2(const CrossEntropyArgs& a, int64_t r0, int64_t r1) { avx2::cross_entropy_rows(a, r0, r1); }
void activation_bwd_avx2(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  avx2::activation_bwd_body(act, x, dy, n, dx);
}
void silu_mul_bwd_avx2(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  avx2::silu_mul_bwd_body(gate, up, dy, n, dgate, dup);
}
void adamw_avx2(const AdamWArgs& a, int64_t begin, int64_t end) { avx2::adamw_body(a, begin, end); }
double sum_squares_avx2(const float* x, int64_t n) { return avx2::sum_squares_body(x, n); }

}  // namespace tessera::cpu

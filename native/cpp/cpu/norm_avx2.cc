// LayerNorm, RMSNorm and softmax bodies compiled for AVX2+FMA; the loops are in norm_body.inl.
#include <cmath>

#include "norm_simd.h"
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

#include "norm_body.inl"

}  // namespace avx2

void layer_norm_rows_avx2(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  avx2::layer_norm_rows(x, rows, dim, gamma, beta, eps, out);
}
void rms_norm_rows_avx2(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  avx2::rms_norm_rows(x, rows, dim, gamma, eps, out);
}
void softmax_rows_avx2(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  avx2::softmax_rows(x, rows, dim, scale, out);
}

}  // namespace tessera::cpu

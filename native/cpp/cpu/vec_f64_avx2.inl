// f64 accumulation helpers for the AVX2 row kernels (norms, softmax, the training kernels): widen f32 lanes
// to f64, add and fuse in f64, and reduce in a fixed tree, so a row's sum has the same bits at any thread count.
// Included inside namespace tessera::cpu::avx2, after vec_avx2.h (which defines V and tail_mask).
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

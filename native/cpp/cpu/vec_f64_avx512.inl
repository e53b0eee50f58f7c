// f64 accumulation helpers for the AVX512 row kernels (norms, softmax, the training kernels): widen f32 lanes
// to f64, add and fuse in f64, and reduce in a fixed tree, so a row's sum has the same bits at any thread count.
// Included inside namespace tessera::cpu::avx512, after vec_avx512.h (which defines V and tail_mask).
using VD = __m512d;
static inline VD vd_zero() { return _mm512_setzero_pd(); }
static inline VD vd_lo(V v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline VD vd_hi(V v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }
static inline VD vd_add(VD a, VD b) { return _mm512_add_pd(a, b); }
static inline VD vd_fmadd(VD a, VD b, VD c) { return _mm512_fmadd_pd(a, b, c); }
static inline double vd_hsum(VD v) {
  // Fixed tree: 512 -> 256 -> 128 -> 64 bits.
  const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
static inline V v_tail_or(V v, int64_t r, V fill) { return _mm512_mask_blend_ps(tail_mask(r), fill, v); }

// AVX2+FMA primitives for vec_math.inl. Include only from *_avx2.cc files.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tessera::cpu::avx2 {

using V = __m256;
constexpr int64_t kLanes = 8;

static inline V v_set1(float x) { return _mm256_set1_ps(x); }
static inline V v_load(const float* p) { return _mm256_loadu_ps(p); }
static inline void v_store(float* p, V v) { _mm256_storeu_ps(p, v); }
static inline __m256i tail_mask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline V v_load_tail(const float* p, int64_t r) { return _mm256_maskload_ps(p, tail_mask(r)); }
static inline void v_store_tail(float* p, V v, int64_t r) { _mm256_maskstore_ps(p, tail_mask(r), v); }
static inline V v_add(V a, V b) { return _mm256_add_ps(a, b); }
static inline V v_sub(V a, V b) { return _mm256_sub_ps(a, b); }
static inline V v_mul(V a, V b) { return _mm256_mul_ps(a, b); }
static inline V v_div(V a, V b) { return _mm256_div_ps(a, b); }
static inline V v_max(V a, V b) { return _mm256_max_ps(a, b); }
static inline V v_min(V a, V b) { return _mm256_min_ps(a, b); }
static inline V v_fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
static inline V v_fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
static inline V v_round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline V v_abs(V x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
static inline V v_copysign(V mag, V sign) {
  const V sm = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(sm, mag), _mm256_and_ps(sm, sign));
}
static inline V v_pow2i(V n) {  // 2^n for integral n in [-127, 128]
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
// where(a < limit) ? small : big
static inline V v_blend_small(V a, V limit, V small, V big) {
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, limit, _CMP_LT_OQ));
}
static inline float v_hsum(V v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}
static inline float v_hmax(V v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_max_ps(lo, hi);
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

}  // namespace tessera::cpu::avx2

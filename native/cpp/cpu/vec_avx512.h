// AVX-512 primitives for vec_math.inl. Include only from *_avx512.cc files.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tessera::cpu::avx512 {

using V = __m512;
constexpr int64_t kLanes = 16;

static inline V v_set1(float x) { return _mm512_set1_ps(x); }
static inline V v_load(const float* p) { return _mm512_loadu_ps(p); }
static inline void v_store(float* p, V v) { _mm512_storeu_ps(p, v); }
static inline __mmask16 tail_mask(int64_t r) { return static_cast<__mmask16>((1u << r) - 1u); }
static inline V v_load_tail(const float* p, int64_t r) { return _mm512_maskz_loadu_ps(tail_mask(r), p); }
static inline void v_store_tail(float* p, V v, int64_t r) { _mm512_mask_storeu_ps(p, tail_mask(r), v); }
static inline V v_add(V a, V b) { return _mm512_add_ps(a, b); }
static inline V v_sub(V a, V b) { return _mm512_sub_ps(a, b); }
static inline V v_mul(V a, V b) { return _mm512_mul_ps(a, b); }
static inline V v_div(V a, V b) { return _mm512_div_ps(a, b); }
static inline V v_max(V a, V b) { return _mm512_max_ps(a, b); }
static inline V v_min(V a, V b) { return _mm512_min_ps(a, b); }
static inline V v_fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
static inline V v_fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
static inline V v_round(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline V v_abs(V x) { return _mm512_abs_ps(x); }
static inline V v_copysign(V mag, V sign) {
  const __m512i sm = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sm, _mm512_castps_si512(mag)),
                                              _mm512_and_si512(sm, _mm512_castps_si512(sign))));
}
static inline V v_pow2i(V n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
static inline V v_blend_small(V a, V limit, V small, V big) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, limit, _CMP_LT_OQ), big, small);
}
static inline float v_hsum(V v) { return _mm512_reduce_add_ps(v); }
static inline float v_hmax(V v) { return _mm512_reduce_max_ps(v); }

}  // namespace tessera::cpu::avx512

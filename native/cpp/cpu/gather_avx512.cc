// f32/f16/bf16 conversions compiled for AVX-512; the loops are in gather_body.inl. (vcvtneps2bf16 is not
// used: it flushes subnormals, and convert must round them to nearest even like the reference.)
#include <immintrin.h>

#include "gather_simd.h"

namespace tessera::cpu {
namespace avx512 {

using V = __m512;
constexpr int64_t kLanes = 16;

static inline __m256i load_u16x16(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

static inline V load_f32(const void* p) { return _mm512_loadu_ps(static_cast<const float*>(p)); }
// vcvtph2ps is exact and quiets signalling NaNs, which is what convert_ref specifies.
static inline V load_f16(const void* p) { return _mm512_cvtph_ps(load_u16x16(p)); }
static inline V load_bf16(const void* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load_u16x16(p)), 16));
}

static inline void store_f32(void* p, V v) { _mm512_storeu_ps(static_cast<float*>(p), v); }

// Round to nearest even in hardware; NaN lanes become sign | 0x7e00 as f32_to_f16 gives.
static inline void store_f16(void* p, V v) {
  const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i u = _mm512_castps_si512(v);
  const __m512i canon = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                                        _mm512_set1_epi32(0x7e00));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  _mm256_storeu_si256(static_cast<__m256i*>(p), _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(canon)));
}

// bf16 = top half of the f32 rounded to nearest even (u + 0x7fff + lsb); NaN keeps its payload, made quiet.
static inline void store_bf16(void* p, V v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i top = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i quiet = _mm512_or_si512(top, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet)));
}

#include "gather_body.inl"

}  // namespace avx512

void convert_avx512(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  avx512::convert_body(src, src_dtype, dst, dst_dtype, n);
}

}  // namespace tessera::cpu

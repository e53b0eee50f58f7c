// f32/f16/bf16 conversions compiled for AVX2 + F16C; the loops are in gather_body.inl.
#include <immintrin.h>

#include "gather_simd.h"

namespace tessera::cpu {
namespace avx2 {

using V = __m256;
constexpr int64_t kLanes = 8;

static inline __m128i load_u16x8(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// 8 x u32 holding values <= 0xffff -> 8 x u16, in order (the 128-bit pack keeps the halves in place).
static inline __m128i narrow_u32(__m256i v) {
  return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

static inline V load_f32(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
// vcvtph2ps is exact and quiets signalling NaNs, which is what convert_ref specifies.
static inline V load_f16(const void* p) { return _mm256_cvtph_ps(load_u16x8(p)); }
static inline V load_bf16(const void* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load_u16x8(p)), 16));
}

static inline void store_f32(void* p, V v) { _mm256_storeu_ps(static_cast<float*>(p), v); }

// vcvtps2ph rounds to nearest even with subnormals, overflow to inf; its NaN keeps a truncated payload, so NaN
// lanes are replaced by sign | 0x7e00 as f32_to_f16 gives.
static inline void store_f16(void* p, V v) {
  const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i u = _mm256_castps_si256(v);
  const __m256i canon = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                                        _mm256_set1_epi32(0x7e00));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));  // -1/0 stay -1/0
  _mm_storeu_si128(static_cast<__m128i*>(p), _mm_blendv_epi8(h, narrow_u32(canon), nan16));
}

// bf16 = top half of the f32 rounded to nearest even (u + 0x7fff + lsb); NaN keeps its payload, made quiet.
static inline void store_bf16(void* p, V v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i top = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  _mm_storeu_si128(static_cast<__m128i*>(p), narrow_u32(_mm256_blendv_epi8(rounded, quiet, nan)));
}

#include "gather_body.inl"

}  // namespace avx2

void convert_avx2(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  avx2::convert_body(src, src_dtype, dst, dst_dtype, n);
}

}  // namespace tessera::cpu

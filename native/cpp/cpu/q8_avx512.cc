// Q8_0 GEMM bodies compiled for AVX-512: 16 output columns per zmm (q8_cols512.inl), the canonical chain of
// q8_simd.h, so the bits equal the AVX2 and scalar paths'; and the AVX512-VNNI variant (vpdpbusd, compiled for it
// with a target pragma and called only when the CPU reports avx512vnni). The driver and the activation quantizer
// are q8_body.inl's.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-function"  // the VNNI variants reuse the plain activation quantizer
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "q8_simd.h"

namespace tessera::cpu {

namespace avx512 {
// 4 rows x 2 groups (32 columns): 8 int32 and 8 f32 accumulators of the 32 registers.
constexpr int kRowsMax = 4, kGroupsMax = 2;
constexpr bool kVnni = false;
// |w| (u8) times x with w's sign (s8): maddubs pairs stay within int16 (2 * 128 * 127 < 32767).
static inline __m512i dot(__m512i s, __m512i w, __m512i xb) {
  const __m512i xs = _mm512_mask_sub_epi8(xb, _mm512_movepi8_mask(w), _mm512_setzero_si512(), xb);
  return _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), xs), _mm512_set1_epi16(1)));
}
#include "q8_cols512.inl"
#include "q8_body.inl"
}  // namespace avx512

#pragma GCC push_options
#pragma GCC target("avx512vnni")
namespace avx512_vnni {
constexpr int kRowsMax = 4, kGroupsMax = 2;
constexpr bool kVnni = true;
static inline __m512i dot(__m512i s, __m512i w, __m512i xb) { return _mm512_dpbusd_epi32(s, w, xb); }  // w + 128 (u8) x x (s8)
#include "q8_cols512.inl"
#include "q8_body.inl"
}  // namespace avx512_vnni
#pragma GCC pop_options

void q8_gemm_cols_avx512(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx512::gemm_cols(a, c0, c1); }
void q8_gemm_cols_avx512_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx512_vnni::gemm_cols(a, c0, c1); }
void q8_quantize_act_avx512(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  avx512::quantize_act(x, nb, r0, r1, xq, xd);
}

}  // namespace tessera::cpu

// Q8_0 GEMM bodies compiled for AVX2 + FMA + F16C (16 vector registers): 8 output columns per ymm (q8_cols256.inl),
// and the AVX-VNNI variant (VEX vpdpbusd, compiled for it with a target pragma and called only when the CPU reports
// avxvnni). The driver and the activation quantizer are q8_body.inl's.
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

namespace avx2 {
// 2 rows x 2 groups (16 columns): 4 int32 and 4 f32 accumulators, the packed vectors and their |w|.
constexpr int kRowsMax = 2, kGroupsMax = 2;
constexpr bool kVnni = false;
// |w| (u8) times x with w's sign (s8, vpsignb; zero where w is, which changes nothing since |w| is zero there).
static inline __m256i dot(__m256i s, __m256i w, __m256i xb) {
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xb, w)), _mm256_set1_epi16(1)));
}
#include "q8_cols256.inl"
#include "q8_body.inl"
}  // namespace avx2

#pragma GCC push_options
#pragma GCC target("avxvnni")
namespace avx2_vnni {
constexpr int kRowsMax = 2, kGroupsMax = 2;
constexpr bool kVnni = true;
static inline __m256i dot(__m256i s, __m256i w, __m256i xb) { return _mm256_dpbusd_avx_epi32(s, w, xb); }  // w + 128 (u8) x x (s8)
#include "q8_cols256.inl"
#include "q8_body.inl"
}  // namespace avx2_vnni
#pragma GCC pop_options

void q8_gemm_cols_avx2(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx2::gemm_cols(a, c0, c1); }
void q8_gemm_cols_avx2_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx2_vnni::gemm_cols(a, c0, c1); }
void q8_quantize_act_avx2(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  avx2::quantize_act(x, nb, r0, r1, xq, xd);
}

}  // namespace tessera::cpu

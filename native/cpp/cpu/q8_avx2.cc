// Q8_0 GEMM bodies compiled for AVX2 + FMA + F16C (16 vector registers), and the AVX-VNNI variant (VEX vpdpbusd,
// compiled for it with a target pragma and called only when the CPU reports avxvnni); the loops are in q8_body.inl.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-function"  // the VNNI variants reuse the plain activation quantizer
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "q8_simd.h"

namespace tessera::cpu {

namespace avx2 {
// 2 rows x 2 columns (one row: 4 columns), two accumulators each (even and odd blocks): 8 of the 16 registers.
constexpr int kRowsMax = 2, kColsMax = 2, kCols1 = 3;
static inline __m256i dot_u8s8(__m256i xabs, __m256i sw) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(xabs, sw), _mm256_set1_epi16(1));
}
#include "q8_body.inl"
}  // namespace avx2

#pragma GCC push_options
#pragma GCC target("avxvnni")
namespace avx2_vnni {
constexpr int kRowsMax = 2, kColsMax = 2, kCols1 = 3;
static inline __m256i dot_u8s8(__m256i xabs, __m256i sw) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), xabs, sw); }
#include "q8_body.inl"
}  // namespace avx2_vnni
#pragma GCC pop_options

void q8_gemm_cols_avx2(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx2::gemm_cols(a, c0, c1); }
void q8_gemm_cols_avx2_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx2_vnni::gemm_cols(a, c0, c1); }
void q8_quantize_act_avx2(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  avx2::quantize_act(x, nb, r0, r1, xq, xd);
}

}  // namespace tessera::cpu

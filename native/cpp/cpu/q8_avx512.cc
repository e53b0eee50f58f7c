// Q8_0 GEMM bodies compiled for AVX-512 (32 vector registers, so bigger register tiles; the arithmetic is the same
// 256-bit sequence as AVX2, so the bits are too), and the AVX512-VNNI variant (EVEX vpdpbusd on ymm, compiled for it
// with a target pragma and called only when the CPU reports avx512vnni); the loops are in q8_body.inl.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-function"  // the VNNI variants reuse the plain activation quantizer
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "q8_simd.h"

namespace tessera::cpu {

namespace avx512 {
// 4 rows x 4 columns: 16 accumulators + 8 activation registers + temporaries, within 32 registers.
constexpr int kRowsMax = 4, kColsMax = 4;
static inline __m256i dot_u8s8(__m256i xabs, __m256i sw) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(xabs, sw), _mm256_set1_epi16(1));
}
#include "q8_body.inl"
}  // namespace avx512

#pragma GCC push_options
#pragma GCC target("avx512vnni")
namespace avx512_vnni {
constexpr int kRowsMax = 4, kColsMax = 4;
static inline __m256i dot_u8s8(__m256i xabs, __m256i sw) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), xabs, sw); }
#include "q8_body.inl"
}  // namespace avx512_vnni
#pragma GCC pop_options

void q8_gemm_cols_avx512(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx512::gemm_cols(a, c0, c1); }
void q8_gemm_cols_avx512_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx512_vnni::gemm_cols(a, c0, c1); }
void q8_quantize_act_avx512(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  avx512::quantize_act(x, nb, r0, r1, xq, xd);
}

}  // namespace tessera::cpu

// Q8_0 GEMM bodies compiled for AVX-512: 512-bit tiles, a block pair per register (q8_tile512.inl), the canonical
// lanes of q8_simd.h, so the bits equal the AVX2 and scalar paths'; and the AVX512-VNNI variant (vpdpbusd, compiled
// for it with a target pragma and called only when the CPU reports avx512vnni). Row and column loops and the
// activation quantizer are q8_body.inl's.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wunused-function"  // the VNNI variants reuse the plain activation quantizer
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "q8_simd.h"

namespace tessera::cpu {

// hsum8 and load_f16 (used by the 512-bit tile) come with q8_body.inl; declared here first.
namespace avx512 {
// 4 rows x 3 columns (one row: 4 columns) of 512-bit accumulators (a block pair each): 12 of the 32 registers, plus
// the rows' activations and scales.
constexpr int kRowsMax = 4, kColsMax = 3, kCols1 = 4;
constexpr bool kVnniOffset = false;  // maddubs sums pairs in int16, which (x + 128) * w would overflow
static inline __m512i dot512(__m512i wabs, __m512i xs) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(wabs, xs), _mm512_set1_epi16(1));
}
static inline __m512i dot512_from(__m512i, __m512i, __m512i) { return _mm512_setzero_si512(); }  // unused: no VNNI
static inline float hsum8(__m256 v);
static inline float load_f16(const uint8_t* p);
#define TESSERA_Q8_OWN_TILE
#include "q8_tile512.inl"
#include "q8_body.inl"
#undef TESSERA_Q8_OWN_TILE
}  // namespace avx512

#pragma GCC push_options
#pragma GCC target("avx512vnni")
namespace avx512_vnni {
constexpr int kRowsMax = 4, kColsMax = 3, kCols1 = 4;
constexpr bool kVnniOffset = true;
static inline __m512i dot512(__m512i wabs, __m512i xs) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs, xs); }
// start + the u8 x s8 dot of xu and w, lane by lane (exact int32).
static inline __m512i dot512_from(__m512i start, __m512i xu, __m512i w) { return _mm512_dpbusd_epi32(start, xu, w); }
static inline float hsum8(__m256 v);
static inline float load_f16(const uint8_t* p);
#define TESSERA_Q8_OWN_TILE
#include "q8_tile512.inl"
#include "q8_body.inl"
#undef TESSERA_Q8_OWN_TILE
}  // namespace avx512_vnni
#pragma GCC pop_options

void q8_gemm_cols_avx512(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx512::gemm_cols(a, c0, c1); }
void q8_gemm_cols_avx512_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1) { avx512_vnni::gemm_cols(a, c0, c1); }
void q8_quantize_act_avx512(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  avx512::quantize_act(x, nb, r0, r1, xq, xd);
}

}  // namespace tessera::cpu

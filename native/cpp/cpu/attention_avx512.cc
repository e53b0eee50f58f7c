// Attention's inner step compiled for AVX-512; the body is attention_kernel.inl.
#include <algorithm>
#include <cmath>

#include "attention_simd.h"
#include "vec_avx512.h"

namespace tessera::cpu {
namespace avx512 {
// Only v_exp is used from vec_math.inl; its other loops are unused in this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "vec_math.inl"
#pragma GCC diagnostic pop

// out[0..4) = horizontal sums of a0..a3: fold each to 256 bits, then three hadds and one add for all four.
static inline void v_hsum4(V a0, V a1, V a2, V a3, float* out) {
  const auto fold = [](V x) { return _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1)); };
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(fold(a0), fold(a1)), _mm256_hadd_ps(fold(a2), fold(a3)));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

// GCC 12 flags _mm512_reduce_add_ps's own `__Y = __Y` idiom (inside v_hsum) as maybe-uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "attention_kernel.inl"
#pragma GCC diagnostic pop
}  // namespace avx512

void attend_block_avx512(const AttendBlock& block) { avx512::attend_block_body(block); }

}  // namespace tessera::cpu

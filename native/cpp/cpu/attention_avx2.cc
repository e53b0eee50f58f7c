// Attention's inner step compiled for AVX2+FMA; the body is attention_kernel.inl.
#include <algorithm>
#include <cmath>

#include "attention_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {
// Only v_exp is used from vec_math.inl; its other loops are unused in this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "vec_math.inl"
#pragma GCC diagnostic pop

// out[0..4) = horizontal sums of a0..a3, sharing the shuffles (three hadds and one add for all four).
static inline void v_hsum4(V a0, V a1, V a2, V a3, float* out) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

#include "attention_kernel.inl"
}  // namespace avx2

void attend_block_avx2(const AttendBlock& block) { avx2::attend_block_body(block); }

}  // namespace tessera::cpu

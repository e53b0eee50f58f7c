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
// GCC 12 flags _mm512_reduce_add_ps's own `__Y = __Y` idiom (inside v_hsum) as maybe-uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "attention_kernel.inl"
#pragma GCC diagnostic pop
}  // namespace avx512

void attend_block_avx512(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t nk, int64_t d,
                         float scale, const uint8_t* key_mask, SoftmaxRow& row, float* acc) {
  avx512::attend_block_body(q, k, v, kv_stride, nk, d, scale, key_mask, row, acc);
}

}  // namespace tessera::cpu

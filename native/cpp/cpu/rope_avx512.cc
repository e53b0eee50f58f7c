// RoPE rotation compiled for AVX-512; the loop is in rope_body.inl.
#include "rope_simd.h"
#include "vec_avx512.h"

namespace tessera::cpu {
namespace avx512 {
#include "rope_body.inl"
}  // namespace avx512

void rope_rotate_avx512(float* x, int64_t heads, int64_t head_dim, int64_t half, const float* cos, const float* sin) {
  avx512::rope_rotate(x, heads, head_dim, half, cos, sin);
}

}  // namespace tessera::cpu

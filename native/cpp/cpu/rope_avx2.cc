// RoPE rotation compiled for AVX2+FMA; the loop is in rope_body.inl.
#include "rope_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {
#include "rope_body.inl"
}  // namespace avx2

void rope_rotate_avx2(float* x, int64_t heads, int64_t head_dim, int64_t half, const float* cos, const float* sin) {
  avx2::rope_rotate(x, heads, head_dim, half, cos, sin);
}

}  // namespace tessera::cpu

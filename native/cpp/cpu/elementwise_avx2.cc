// Elementwise bodies compiled for AVX2; see vec_math.inl.
#include "simd_dispatch.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {
#include "vec_math.inl"
}  // namespace avx2

void binary_avx2(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  avx2::binary_body(op, a, n, b, b_n, out);
}
void activation_avx2(Activation act, const float* x, int64_t n, float* out) { avx2::activation_body(act, x, n, out); }
void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out) { avx2::silu_mul_body(gate, up, n, out); }

}  // namespace tessera::cpu

// Elementwise bodies compiled for AVX512; see vec_math.inl.
#include "simd_dispatch.h"
#include "vec_avx512.h"

namespace tessera::cpu {
namespace avx512 {
#include "vec_math.inl"
}  // namespace avx512

void binary_avx512(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  avx512::binary_body(op, a, n, b, b_n, out);
}
void activation_avx512(Activation act, const float* x, int64_t n, float* out) { avx512::activation_body(act, x, n, out); }
void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out) { avx512::silu_mul_body(gate, up, n, out); }

}  // namespace tessera::cpu

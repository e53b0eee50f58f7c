// LayerNorm, RMSNorm and softmax bodies compiled for AVX2+FMA; the loops are in norm_body.inl.
#include <cmath>

#include "norm_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // vec_math.inl also defines the elementwise loops
#include "vec_math.inl"
#pragma GCC diagnostic pop

#include "vec_f64_avx2.inl"

#include "norm_body.inl"

}  // namespace avx2

void layer_norm_rows_avx2(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  avx2::layer_norm_rows(x, rows, dim, gamma, beta, eps, out);
}
void rms_norm_rows_avx2(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  avx2::rms_norm_rows(x, rows, dim, gamma, eps, out);
}
void softmax_rows_avx2(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  avx2::softmax_rows(x, rows, dim, scale, out);
}

}  // namespace tessera::cpu

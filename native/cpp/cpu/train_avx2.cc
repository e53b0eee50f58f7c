// Training kernel bodies compiled for AVX2+FMA; the loops are in train_body.inl.
#include <algorithm>
#include <cmath>

#include "train_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // vec_math.inl also defines the elementwise loops
#include "vec_math.inl"
#pragma GCC diagnostic pop

#include "vec_f64_avx2.inl"
static inline V v_sqrt(V v) { return _mm256_sqrt_ps(v); }
static inline V v_fmsub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }

#include "train_body.inl"

}  // namespace avx2

void layer_norm_bwd_rows_avx2(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                              NormRowStats* stats) {
  avx2::layer_norm_bwd_rows(x, dy, rows, dim, gamma, eps, dx, stats);
}
void rms_norm_bwd_rows_avx2(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                            NormRowStats* stats) {
  avx2::rms_norm_bwd_rows(x, dy, rows, dim, gamma, eps, dx, stats);
}
void softmax_bwd_rows_avx2(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  avx2::softmax_bwd_rows(y, dy, rows, dim, scale, dx);
}
void cross_entropy_rows_avx2(const CrossEntropyArgs& a, int64_t r0, int64_t r1) { avx2::cross_entropy_rows(a, r0, r1); }
void activation_bwd_avx2(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  avx2::activation_bwd_body(act, x, dy, n, dx);
}
void silu_mul_bwd_avx2(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  avx2::silu_mul_bwd_body(gate, up, dy, n, dgate, dup);
}
void adamw_avx2(const AdamWArgs& a, int64_t begin, int64_t end) { avx2::adamw_body(a, begin, end); }
double sum_squares_avx2(const float* x, int64_t n) { return avx2::sum_squares_body(x, n); }

}  // namespace tessera::cpu

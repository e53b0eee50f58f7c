// Training kernel bodies compiled for AVX-512; the loops are in train_body.inl.
#include <algorithm>
#include <cmath>

// GCC 12 reports its own _mm512_extractf64x4_pd (in vd_hsum) as reading an uninitialised value: a false positive
// inside the intrinsics header, silenced for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "train_simd.h"
#include "vec_avx512.h"

namespace tessera::cpu {
namespace avx512 {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // vec_math.inl also defines the elementwise loops
#include "vec_math.inl"
#pragma GCC diagnostic pop

#include "vec_f64_avx512.inl"
static inline V v_sqrt(V v) { return _mm512_sqrt_ps(v); }
static inline V v_fmsub(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }

#include "train_body.inl"

}  // namespace avx512

void layer_norm_bwd_rows_avx512(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                              NormRowStats* stats) {
  avx512::layer_norm_bwd_rows(x, dy, rows, dim, gamma, eps, dx, stats);
}
void rms_norm_bwd_rows_avx512(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                            NormRowStats* stats) {
  avx512::rms_norm_bwd_rows(x, dy, rows, dim, gamma, eps, dx, stats);
}
void softmax_bwd_rows_avx512(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  avx512::softmax_bwd_rows(y, dy, rows, dim, scale, dx);
}
void cross_entropy_rows_avx512(const CrossEntropyArgs& a, int64_t r0, int64_t r1) { avx512::cross_entropy_rows(a, r0, r1); }
void activation_bwd_avx512(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  avx512::activation_bwd_body(act, x, dy, n, dx);
}
void silu_mul_bwd_avx512(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  avx512::silu_mul_bwd_body(gate, up, dy, n, dgate, dup);
}
void adamw_avx512(const AdamWArgs& a, int64_t begin, int64_t end) { avx512::adamw_body(a, begin, end); }
double sum_squares_avx512(const float* x, int64_t n) { return avx512::sum_squares_body(x, n); }

}  // namespace tessera::cpu

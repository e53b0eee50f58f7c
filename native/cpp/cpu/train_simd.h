// Per-ISA bodies of the training kernels (train_avx2.cc / train_avx512.cc, compiled with those ISA flags; loops in
// train_body.inl) and their scalar twins in train.cc. Row kernels process rows [0, rows) of a contiguous block on
// one thread; the dispatching entries in train.cc split rows (or elements, or chunks) over the pool so every output
// is written by exactly one task.
#pragma once
#include <cstdint>

#include "../core/cpu_features.h"
#include "kernels.h"

namespace tessera::cpu {

// What the LayerNorm / RMSNorm row pass leaves for the column pass (dgamma, dbeta): per row the mean as a float pair
// (hi + lo; 0 for RMSNorm) and the f32 rstd, so both passes form xhat = ((x - hi) - lo) * rstd with the same bits.
struct NormRowStats {
  float hi = 0.0f, lo = 0.0f, rstd = 0.0f;
};

#define TESSERA_TRAIN_BODIES(SUFFIX)                                                                                        \
  void layer_norm_bwd_rows_##SUFFIX(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, \
                                    float* dx, NormRowStats* stats);                                                        \
  void rms_norm_bwd_rows_##SUFFIX(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps,   \
                                  float* dx, NormRowStats* stats);                                                          \
  void softmax_bwd_rows_##SUFFIX(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx);        \
  void cross_entropy_rows_##SUFFIX(const CrossEntropyArgs& a, int64_t r0, int64_t r1);                                     \
  void activation_bwd_##SUFFIX(Activation act, const float* x, const float* dy, int64_t n, float* dx);                     \
  void silu_mul_bwd_##SUFFIX(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup);     \
  void adamw_##SUFFIX(const AdamWArgs& a, int64_t begin, int64_t end);                                                     \
  double sum_squares_##SUFFIX(const float* x, int64_t n);

TESSERA_TRAIN_BODIES(scalar)
TESSERA_TRAIN_BODIES(avx2)
TESSERA_TRAIN_BODIES(avx512)

}  // namespace tessera::cpu

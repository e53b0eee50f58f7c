// Per-ISA bodies of the row-wise normalisation and softmax kernels (norm_avx2.cc / norm_avx512.cc, compiled
// with those ISA flags). Each processes rows [0, rows) of a contiguous [rows, dim] block; the dispatching
// entries in norm.cc split rows over the pool, so every row is computed by exactly one task.
#pragma once
#include <cstdint>

#include "../core/cpu_features.h"
#include "kernels.h"

namespace tessera::cpu {

void layer_norm_rows_avx2(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out);
void layer_norm_rows_avx512(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out);
void rms_norm_rows_avx2(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out);
void rms_norm_rows_avx512(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out);
void softmax_rows_avx2(const float* x, int64_t rows, int64_t dim, float scale, float* out);
void softmax_rows_avx512(const float* x, int64_t rows, int64_t dim, float scale, float* out);

// LayerNorm of rows [0, rows) of a contiguous block on one thread with `isa`'s body (defined in norm.cc): the
// row kernel of layerNorm, shared with the PET ops' task LayerNorm so both give the same bits.
void layer_norm_rows(Isa isa, const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out);

// The rare softmax row whose every x*scale is -inf or NaN (defined in norm.cc, baseline ISA): all NaN when
// any product is NaN, else all zeros. Shared so every path gives the same answer.
void softmax_degenerate_row(const float* x, int64_t dim, float scale, float* out);

}  // namespace tessera::cpu

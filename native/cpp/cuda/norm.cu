// Row-wise LayerNorm, RMSNorm and softmax over the last dimension (f32).
// Fast path: one block per row (grid-stride over rows); each thread accumulates a strided slice of the row in f32,
// then a fixed-order warp-shuffle + shared-memory reduction combines them, so results do not depend on timing.
// LayerNorm is two-pass (mean, then the centred sum of squares) to avoid cancellation. `out` may alias `x`: every
// element is read and written by the same thread, after the row's statistics are complete.
// Reference: one thread per row, accumulating in double (the CPU references' arithmetic).
#include <cmath>
#include <cstdint>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_common.cuh"

namespace tessera::gpu {

namespace {

using row_launch::kMaxRowBlocks;
using row_launch::kRefThreads;
using row_launch::ref_grid;
using row_launch::row_grid;
using row_launch::row_threads;

__global__ void layer_norm_kernel(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
    const float mean = block_sum(s, scratch) / static_cast<float>(dim);
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float d = xr[i] - mean;
      sq += d * d;
    }
    const float var = block_sum(sq, scratch) / static_cast<float>(dim);
    const float rstd = 1.0f / sqrtf(var + eps);  // not rsqrtf: that one is only accurate to 2 ulp
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float y = (xr[i] - mean) * rstd;
      if (gamma) y *= gamma[i];
      if (beta) y += beta[i];
      yr[i] = y;
    }
  }
}

__global__ void rms_norm_kernel(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sq += xr[i] * xr[i];
    const float ms = block_sum(sq, scratch) / static_cast<float>(dim);
    const float rinv = 1.0f / sqrtf(ms + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float y = xr[i] * rinv;
      if (gamma) y *= gamma[i];
      yr[i] = y;
    }
  }
}

__global__ void softmax_kernel(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) m = fmaxf(m, xr[i] * scale);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += expf(xr[i] * scale - m);
    s = block_sum(s, scratch);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = expf(xr[i] * scale - m) / s;
  }
}

// ---------------------------------------------------------------- references: one thread per row, double

__global__ void layer_norm_ref_kernel(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  float* yr = out + r * dim;
  double mean = 0;
  for (int64_t i = 0; i < dim; ++i) mean += xr[i];
  mean /= static_cast<double>(dim);
  double var = 0;
  for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
  var /= static_cast<double>(dim);
  const double rstd = 1.0 / sqrt(var + static_cast<double>(eps));
  for (int64_t i = 0; i < dim; ++i) {
    double y = (xr[i] - mean) * rstd;
    if (gamma) y *= gamma[i];
    if (beta) y += beta[i];
    yr[i] = static_cast<float>(y);
  }
}

__global__ void rms_norm_ref_kernel(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  float* yr = out + r * dim;
  double ms = 0;
  for (int64_t i = 0; i < dim; ++i) ms += static_cast<double>(xr[i]) * xr[i];
  ms /= static_cast<double>(dim);
  const double rinv = 1.0 / sqrt(ms + static_cast<double>(eps));
  for (int64_t i = 0; i < dim; ++i) {
    double y = xr[i] * rinv;
    if (gamma) y *= gamma[i];
    yr[i] = static_cast<float>(y);
  }
}

__global__ void softmax_ref_kernel(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  float* yr = out + r * dim;
  double m = -INFINITY;
  for (int64_t i = 0; i < dim; ++i) m = fmax(m, static_cast<double>(xr[i]) * scale);
  double s = 0;
  for (int64_t i = 0; i < dim; ++i) s += exp(static_cast<double>(xr[i]) * scale - m);
  for (int64_t i = 0; i < dim; ++i) yr[i] = static_cast<float>(exp(static_cast<double>(xr[i]) * scale - m) / s);
}


}  // namespace

void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out, bool reference) {
  if (rows == 0 || dim == 0) return;
  if (reference) {
    layer_norm_ref_kernel<<<ref_grid(rows), kRefThreads>>>(x, rows, dim, gamma, beta, eps, out);
    check_launch("layer_norm_ref_kernel");
  } else {
    layer_norm_kernel<<<row_grid(rows), row_threads(dim)>>>(x, rows, dim, gamma, beta, eps, out);
    check_launch("layer_norm_kernel");
  }
}

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out, bool reference) {
  if (rows == 0 || dim == 0) return;
  if (reference) {
    rms_norm_ref_kernel<<<ref_grid(rows), kRefThreads>>>(x, rows, dim, gamma, eps, out);
    check_launch("rms_norm_ref_kernel");
  } else {
    rms_norm_kernel<<<row_grid(rows), row_threads(dim)>>>(x, rows, dim, gamma, eps, out);
    check_launch("rms_norm_kernel");
  }
}

void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out, bool reference) {
  if (rows == 0 || dim == 0) return;
  if (reference) {
    softmax_ref_kernel<<<ref_grid(rows), kRefThreads>>>(x, rows, dim, scale, out);
    check_launch("softmax_ref_kernel");
  } else {
    softmax_kernel<<<row_grid(rows), row_threads(dim)>>>(x, rows, dim, scale, out);
    check_launch("softmax_kernel");
  }
}

}  // namespace tessera::gpu

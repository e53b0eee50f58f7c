// Training kernels (f32): LayerNorm / RMSNorm / softmax backward, activation and SwiGLU backward, the fused
// cross-entropy, column sums, embedding scatter-add, AdamW and the sum-of-squares partials (see cuda_kernels.h).
//
// Row-wise fast paths: one block per row (grid-stride over rows); f32 thread partials combined by block_sum's fixed
// tree. The norm backward runs three kernels in order: row statistics, the column pass for dgamma / dbeta (one thread
// per column, rows in order, in double), then dx (which may overwrite dy: the column pass has already read it).
// Elementwise ops are grid-stride loops. References: one thread per row or output, in double. Nothing depends on
// timing, so every kernel gives the same bits on every run.
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

// ---------------------------------------------------------------- norm backward

// Fast statistics: stats[2r] = mean (0 for RMSNorm), stats[2r + 1] = rstd, both f32 values stored as doubles.
template <bool kRms>
__global__ void norm_stats_kernel(const float* x, int64_t rows, int64_t dim, float eps, double* stats) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * dim;
    float mean = 0.0f;
    if (!kRms) {
      float s = 0.0f;
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
      mean = block_sum(s, scratch) / static_cast<float>(dim);
    }
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float d = xr[i] - mean;
      sq += d * d;
    }
    const float rstd = 1.0f / sqrtf(block_sum(sq, scratch) / static_cast<float>(dim) + eps);
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

// dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)) (LayerNorm) or rstd (g dy - xhat mean(g dy xhat)) (RMSNorm).
template <bool kRms>
__global__ void norm_dx_kernel(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, const double* stats, float* dx) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const float mean = static_cast<float>(stats[2 * r]), rstd = static_cast<float>(stats[2 * r + 1]);
    float a = 0.0f, b = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float g = gamma ? gamma[i] * dyr[i] : dyr[i];
      a += g;
      b += g * ((xr[i] - mean) * rstd);
    }
    const float ma = kRms ? 0.0f : block_sum(a, scratch) / static_cast<float>(dim);
    const float mb = block_sum(b, scratch) / static_cast<float>(dim);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float g = gamma ? gamma[i] * dyr[i] : dyr[i];
      dx[r * dim + i] = rstd * ((g - ma) - ((xr[i] - mean) * rstd) * mb);
    }
  }
}

// Reference statistics and dx: one thread per row, in double.
template <bool kRms>
__global__ void norm_bwd_ref_kernel(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, double* stats,
                                    float* dx, bool write_dx) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  const float* dyr = dy + r * dim;
  double mean = 0;
  if (!kRms) {
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= static_cast<double>(dim);
  }
  double var = 0;
  for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
  const double rstd = 1.0 / sqrt(var / static_cast<double>(dim) + static_cast<double>(eps));
  if (!write_dx) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
    return;
  }
  double a = 0, b = 0;
  for (int64_t i = 0; i < dim; ++i) {
    const double g = (gamma ? gamma[i] : 1.0) * dyr[i];
    a += g;
    b += g * (xr[i] - mean) * rstd;
  }
  a = kRms ? 0.0 : a / static_cast<double>(dim);
  b /= static_cast<double>(dim);
  for (int64_t i = 0; i < dim; ++i) {
    const double g = (gamma ? gamma[i] : 1.0) * dyr[i];
    dx[r * dim + i] = static_cast<float>(rstd * (g - a - (xr[i] - mean) * rstd * b));
  }
}

// dgamma[c] (+)= sum_r dy xhat, dbeta[c] (+)= sum_r dy: one thread per column, rows in order, in double. The fast
// path forms xhat in f32 as norm_dx_kernel does; the reference in double.
template <bool kRef>
__global__ void norm_param_kernel(const float* x, const float* dy, int64_t rows, int64_t dim, const double* stats, float* dgamma, float* dbeta,
                                  bool accumulate) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  double ag = 0, ab = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float xv = x[r * dim + c], d = dy[r * dim + c];
    double xhat;
    if (kRef) xhat = (xv - stats[2 * r]) * stats[2 * r + 1];
    else xhat = (xv - static_cast<float>(stats[2 * r])) * static_cast<float>(stats[2 * r + 1]);
    ag += static_cast<double>(d) * xhat;
    ab += d;
  }
  if (dgamma) dgamma[c] = static_cast<float>(accumulate ? dgamma[c] + ag : ag);
  if (dbeta) dbeta[c] = static_cast<float>(accumulate ? dbeta[c] + ab : ab);
}

template <bool kRms>
void norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma, float* dbeta,
              bool accumulate, double* stats, bool reference) {
  if (dim == 0) return;
  if (rows > 0) {
    if (reference) norm_bwd_ref_kernel<kRms><<<ref_grid(rows), kRefThreads>>>(x, dy, rows, dim, gamma, eps, stats, dx, false);
    else norm_stats_kernel<kRms><<<row_grid(rows), row_threads(dim)>>>(x, rows, dim, eps, stats);
    check_launch("norm_stats_kernel");
  }
  if (dgamma || dbeta) {
    if (reference) norm_param_kernel<true><<<ref_grid(dim), kRefThreads>>>(x, dy, rows, dim, stats, dgamma, dbeta, accumulate);
    else norm_param_kernel<false><<<ref_grid(dim), kRefThreads>>>(x, dy, rows, dim, stats, dgamma, dbeta, accumulate);
    check_launch("norm_param_kernel");
  }
  if (dx && rows > 0) {
    if (reference) norm_bwd_ref_kernel<kRms><<<ref_grid(rows), kRefThreads>>>(x, dy, rows, dim, gamma, eps, stats, dx, true);
    else norm_dx_kernel<kRms><<<row_grid(rows), row_threads(dim)>>>(x, dy, rows, dim, gamma, stats, dx);
    check_launch("norm_dx_kernel");
  }
}

// ---------------------------------------------------------------- softmax backward

__global__ void softmax_bwd_kernel(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * dim;
    const float* dyr = dy + r * dim;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += yr[i] * dyr[i];
    const float c = block_sum(s, scratch);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dx[r * dim + i] = (yr[i] * (dyr[i] - c)) * scale;
  }
}

__global__ void softmax_bwd_ref_kernel(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* yr = y + r * dim;
  const float* dyr = dy + r * dim;
  double c = 0;
  for (int64_t i = 0; i < dim; ++i) c += static_cast<double>(yr[i]) * dyr[i];
  for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] = static_cast<float>(static_cast<double>(scale) * yr[i] * (dyr[i] - c));
}

// ---------------------------------------------------------------- activations backward

template <typename T>
__device__ __forceinline__ T act_grad(Activation act, T x) {
  if (act == Activation::GeluErf) return T(0.5) * erfc(-x * T(0.70710678118654752)) + x * exp(T(-0.5) * x * x) * T(0.3989422804014327);
  if (act == Activation::GeluTanh) {
    const T c = T(0.7978845608028654), k = T(0.044715), x2 = x * x;
    const T sig = T(1) / (T(1) + exp(T(-2) * (c * (x + k * x * x2))));
    return sig + T(2) * x * (sig * (T(1) - sig)) * (c * (T(1) + T(3) * k * x2));
  }
  const T s = T(1) / (T(1) + exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

template <typename T>
__global__ void activation_bwd_kernel(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = static_cast<float>(static_cast<T>(dy[i]) * act_grad<T>(act, static_cast<T>(x[i])));
}

template <typename T>
__global__ void silu_mul_bwd_kernel(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T g = gate[i], u = up[i], d = dy[i];
    const T s = T(1) / (T(1) + exp(-g));
    const T dg = (d * u) * (s * (T(1) + g * (T(1) - s))), du = d * (g * s);
    dgate[i] = static_cast<float>(dg);
    dup[i] = static_cast<float>(du);
  }
}

// ---------------------------------------------------------------- cross-entropy

__global__ void cross_entropy_kernel(CrossEntropyArgs a) {
  __shared__ float scratch[32];
  __shared__ float xt_shared;
  const int64_t V = a.vocab;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float* xr = a.logits + r * V;
    float* dl = a.dlogits ? a.dlogits + r * V : nullptr;
    const int32_t t = a.targets[r];
    if (t == a.ignore_index) {
      if (threadIdx.x == 0) a.loss[r] = 0.0f;
      if (dl)
        for (int64_t i = threadIdx.x; i < V; i += blockDim.x) dl[i] = 0.0f;
      continue;
    }
    if (threadIdx.x == 0) xt_shared = xr[t];  // read before any dl write (dl may be the logits); block_max syncs
    float m = -INFINITY, sx = 0.0f;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      m = fmaxf(m, xr[i]);
      sx += xr[i];
    }
    m = block_max(m, scratch);
    const float sum_x = a.smoothing > 0.0f ? block_sum(sx, scratch) : 0.0f;
    float se = 0.0f;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) se += expf(xr[i] - m);
    const float sum_e = block_sum(se, scratch);
    const float xt = xt_shared;
    __syncthreads();  // every thread has read xt_shared before thread 0 rewrites it for its next row
    const float lse = m + logf(sum_e);
    const float s = a.smoothing;
    if (threadIdx.x == 0) a.loss[r] = (1.0f - s) * (lse - xt) + (s > 0.0f ? s * (lse - sum_x / static_cast<float>(V)) : 0.0f);
    if (!dl) continue;
    const float off = a.grad_scale * s / static_cast<float>(V), hit = a.grad_scale * (1.0f - s);
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
      const float p = expf(xr[i] - lse);
      dl[i] = a.grad_scale * p - off - (i == t ? hit : 0.0f);
    }
  }
}

__global__ void cross_entropy_ref_kernel(CrossEntropyArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) return;
  const int64_t V = a.vocab;
  const float* xr = a.logits + r * V;
  float* dl = a.dlogits ? a.dlogits + r * V : nullptr;
  const int32_t t = a.targets[r];
  if (t == a.ignore_index) {
    a.loss[r] = 0.0f;
    if (dl)
      for (int64_t i = 0; i < V; ++i) dl[i] = 0.0f;
    return;
  }
  const double s = a.smoothing, xt = xr[t];
  double m = -INFINITY, sum_x = 0;
  for (int64_t i = 0; i < V; ++i) {
    m = fmax(m, static_cast<double>(xr[i]));
    sum_x += xr[i];
  }
  double sum_e = 0;
  for (int64_t i = 0; i < V; ++i) sum_e += exp(xr[i] - m);
  const double lse = m + log(sum_e);
  a.loss[r] = static_cast<float>((1.0 - s) * (lse - xt) + (s > 0 ? s * (lse - sum_x / static_cast<double>(V)) : 0.0));
  if (!dl) return;
  for (int64_t i = 0; i < V; ++i) {
    const double p = exp(xr[i] - lse);  // x_i read before dl_i (the same element when in place) is written
    dl[i] = static_cast<float>(a.grad_scale * (p - s / static_cast<double>(V) - (i == t ? 1.0 - s : 0.0)));
  }
}

// ---------------------------------------------------------------- column sums, embedding backward

__global__ void column_sum_kernel(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double acc = 0;
  for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + c];
  out[c] = static_cast<float>(accumulate ? out[c] + acc : acc);
}

// Fast: one thread per column adds the token rows in token order in f32 (the CPU fast path's order).
__global__ void embedding_bwd_kernel(const float* dy, const int32_t* ids, int64_t n, int64_t dim, float* dtable) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int64_t i = 0; i < n; ++i) dtable[static_cast<int64_t>(ids[i]) * dim + c] += dy[i * dim + c];
}

// Reference: one thread per table element, summing its tokens in order in double.
__global__ void embedding_bwd_ref_kernel(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable,
                                         bool accumulate) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= vocab * dim) return;
  const int64_t row = e / dim, c = e % dim;
  double acc = accumulate ? dtable[e] : 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] == row) acc += dy[i * dim + c];
  dtable[e] = static_cast<float>(acc);
}

// ---------------------------------------------------------------- AdamW, sum of squares

__global__ void adamw_kernel(AdamWArgs a) {
  const float b1 = static_cast<float>(a.beta1), c1 = static_cast<float>(1.0 - a.beta1);
  const float b2 = static_cast<float>(a.beta2), c2 = static_cast<float>(1.0 - a.beta2);
  const float gs = static_cast<float>(a.grad_scale), eps = static_cast<float>(a.eps);
  const float decay = static_cast<float>(a.decay), step = static_cast<float>(a.step_size), ibc2 = static_cast<float>(a.inv_sqrt_bc2);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = a.grad[i] * gs;
    const float m = fmaf(b1, a.m[i], c1 * g);
    const float v = fmaf(b2, a.v[i], c2 * (g * g));
    const float denom = fmaf(sqrtf(v), ibc2, eps);
    a.m[i] = m;
    a.v[i] = v;
    a.param[i] = fmaf(-step, m / denom, a.param[i] * decay);
  }
}

__global__ void adamw_ref_kernel(AdamWArgs a) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double g = static_cast<double>(a.grad[i]) * a.grad_scale;
    const double m = a.beta1 * a.m[i] + (1.0 - a.beta1) * g;
    const double v = a.beta2 * a.v[i] + (1.0 - a.beta2) * g * g;
    a.m[i] = static_cast<float>(m);
    a.v[i] = static_cast<float>(v);
    a.param[i] = static_cast<float>(a.param[i] * a.decay - a.step_size * m / (sqrt(v) * a.inv_sqrt_bc2 + a.eps));
  }
}

constexpr int kSumThreads = 256;

// One block per chunk: strided double partials, then a fixed shared-memory tree.
__global__ void sum_squares_kernel(const float* x, int64_t n, double* partials) {
  __shared__ double part[kSumThreads];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kSumSquaresChunk;
  const int64_t c1 = c0 + kSumSquaresChunk < n ? c0 + kSumSquaresChunk : n;
  double s = 0;
  for (int64_t i = c0 + threadIdx.x; i < c1; i += kSumThreads) s += static_cast<double>(x[i]) * x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}

__global__ void sum_squares_ref_kernel(const float* x, int64_t n, double* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  *out = s;
}

}  // namespace

void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                    float* dbeta, bool accumulate, double* stats, bool reference) {
  norm_bwd<false>(x, dy, rows, dim, gamma, eps, dx, dgamma, dbeta, accumulate, stats, reference);
}

void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                  bool accumulate, double* stats, bool reference) {
  norm_bwd<true>(x, dy, rows, dim, gamma, eps, dx, dgamma, nullptr, accumulate, stats, reference);
}

void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx, bool reference) {
  if (rows == 0 || dim == 0) return;
  if (reference) softmax_bwd_ref_kernel<<<ref_grid(rows), kRefThreads>>>(y, dy, rows, dim, scale, dx);
  else softmax_bwd_kernel<<<row_grid(rows), row_threads(dim)>>>(y, dy, rows, dim, scale, dx);
  check_launch("softmax_bwd_kernel");
}

void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx, bool reference) {
  if (n == 0) return;
  if (reference) activation_bwd_kernel<double><<<grid_for(n, 256), 256>>>(act, x, dy, n, dx);
  else activation_bwd_kernel<float><<<grid_for(n, 256), 256>>>(act, x, dy, n, dx);
  check_launch("activation_bwd_kernel");
}

void silu_mul_bwd(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup, bool reference) {
  if (n == 0) return;
  if (reference) silu_mul_bwd_kernel<double><<<grid_for(n, 256), 256>>>(gate, up, dy, n, dgate, dup);
  else silu_mul_bwd_kernel<float><<<grid_for(n, 256), 256>>>(gate, up, dy, n, dgate, dup);
  check_launch("silu_mul_bwd_kernel");
}

void cross_entropy(const CrossEntropyArgs& a, bool reference) {
  if (a.rows == 0) return;
  // vocab == 0: every target is the ignore index (the binding checks), so both kernels write zero losses.
  if (reference) cross_entropy_ref_kernel<<<ref_grid(a.rows), kRefThreads>>>(a);
  else cross_entropy_kernel<<<row_grid(a.rows), row_threads(a.vocab)>>>(a);
  check_launch("cross_entropy_kernel");
}

void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate, bool /*reference: the same kernel*/) {
  if (cols == 0) return;
  column_sum_kernel<<<ref_grid(cols), kRefThreads>>>(x, rows, cols, out, accumulate);
  check_launch("column_sum_kernel");
}

void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate,
                   bool reference) {
  if (dim == 0 || vocab == 0) return;
  if (reference) {
    embedding_bwd_ref_kernel<<<ref_grid(vocab * dim), kRefThreads>>>(dy, ids, n, dim, vocab, dtable, accumulate);
    check_launch("embedding_bwd_ref_kernel");
    return;
  }
  if (!accumulate) check_cuda(cudaMemsetAsync(dtable, 0, static_cast<size_t>(vocab * dim) * sizeof(float)), "cudaMemsetAsync");
  if (n == 0) return;
  embedding_bwd_kernel<<<ref_grid(dim), kRefThreads>>>(dy, ids, n, dim, dtable);
  check_launch("embedding_bwd_kernel");
}

void adamw(const AdamWArgs& a, bool reference) {
  if (a.n == 0) return;
  if (reference) adamw_ref_kernel<<<grid_for(a.n, 256), 256>>>(a);
  else adamw_kernel<<<grid_for(a.n, 256), 256>>>(a);
  check_launch("adamw_kernel");
}

int64_t sum_squares_partials_count(int64_t n, bool reference) {
  if (n == 0) return 0;
  return reference ? 1 : (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
}

void sum_squares_partials(const float* x, int64_t n, double* partials, bool reference) {
  if (n == 0) return;
  if (reference) sum_squares_ref_kernel<<<1, 1>>>(x, n, partials);
  else sum_squares_kernel<<<static_cast<unsigned>(sum_squares_partials_count(n, false)), kSumThreads>>>(x, n, partials);
  check_launch("sum_squares_kernel");
}

}  // namespace tessera::gpu

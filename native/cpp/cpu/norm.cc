// Row-wise normalisation and softmax (f32): references, scalar paths and dispatch. SIMD bodies are in
// norm_avx2.cc / norm_avx512.cc (loops in norm_body.inl).
//
// Numerics, shared by every path:
//  - One task per block of whole rows, and a fixed reduction order inside a row, so results are bitwise
//    identical for any thread count.
//  - Reductions (sum, sum of squares, softmax denominator) accumulate in double; LayerNorm is two-pass (mean,
//    then variance of x - mean) with the mean kept as a float pair, so a large |mean| / std costs no accuracy.
//  - softmax: max-subtracted. A row whose every x*scale is -inf (fully masked) gives all zeros, not NaN; any
//    NaN in a row, or a +inf, makes the whole row NaN.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "norm_simd.h"

namespace tessera::cpu {

namespace {

// Rows per task: about 8k elements, so small rows are batched and every long row is its own task.
int64_t row_grain(int64_t dim) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(dim, 1)); }

// Splits rows over the pool (chunking depends only on rows and dim) and runs the active ISA's row kernel on
// each chunk: kernel(isa, x_block, n_rows, y_block).
template <typename RowKernel>
void parallel_rows(const float* x, int64_t rows, int64_t dim, float* out, RowKernel&& kernel) {
  if (rows <= 0 || dim <= 0) return;
  const Isa isa = active_isa();
  global_pool().parallel_range(rows, row_grain(dim), [&](int64_t r0, int64_t r1) {
    kernel(isa, x + r0 * dim, r1 - r0, out + r0 * dim);
  });
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- scalar paths (baseline ISA): the same algorithms as the SIMD bodies, with sequential double sums.

void layer_norm_rows_scalar(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(dim);
    const float hi = static_cast<float>(mean), lo = static_cast<float>(mean - static_cast<double>(hi));
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const double d = (xr[i] - hi) - lo;
      sq += d * d;
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(dim) + static_cast<double>(eps)));
    for (int64_t i = 0; i < dim; ++i) {
      const float scale = gamma ? rstd * gamma[i] : rstd;
      const float y = ((xr[i] - hi) - lo) * scale;
      yr[i] = beta ? y + beta[i] : y;
    }
  }
}

void rms_norm_rows_scalar(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const float rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(dim) + static_cast<double>(eps)));
    for (int64_t i = 0; i < dim; ++i) yr[i] = gamma ? (xr[i] * rstd) * gamma[i] : xr[i] * rstd;
  }
}

void softmax_rows_scalar(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    float m = -INFINITY;
    for (int64_t i = 0; i < dim; ++i) {
      const float p = xr[i] * scale;
      if (p > m) m = p;  // false for NaN: skipped here, NaN again below
    }
    if (m == -INFINITY) {
      softmax_degenerate_row(xr, dim, scale, yr);
      continue;
    }
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) {
      // x*scale is exact in double, so the argument is rounded once (like the SIMD fma).
      const float e = std::exp(static_cast<float>(static_cast<double>(xr[i]) * scale - m));
      yr[i] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < dim; ++i) yr[i] *= inv;
  }
}

}  // namespace

void softmax_degenerate_row(const float* x, int64_t dim, float scale, float* out) {
  bool nan = false;
  for (int64_t i = 0; i < dim; ++i) nan = nan || std::isnan(x[i] * scale);
  std::fill(out, out + dim, nan ? kNaN : 0.0f);
}

// ---------------------------------------------------------------- LayerNorm

void layer_norm_ref(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    double mean = 0;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= static_cast<double>(dim);
    double var = 0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(dim);
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (int64_t i = 0; i < dim; ++i) {
      const double y = (xr[i] - mean) * rstd * (gamma ? gamma[i] : 1.0) + (beta ? beta[i] : 0.0);
      out[row * dim + i] = static_cast<float>(y);
    }
  }
}

void layer_norm_rows(Isa isa, const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  switch (isa) {
    case Isa::Avx512: layer_norm_rows_avx512(x, rows, dim, gamma, beta, eps, out); break;
    case Isa::Avx2: layer_norm_rows_avx2(x, rows, dim, gamma, beta, eps, out); break;
    default: layer_norm_rows_scalar(x, rows, dim, gamma, beta, eps, out);
  }
}

void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  parallel_rows(x, rows, dim, out, [&](Isa isa, const float* xb, int64_t n, float* yb) { layer_norm_rows(isa, xb, n, dim, gamma, beta, eps, yb); });
}

// ---------------------------------------------------------------- RMSNorm

void rms_norm_ref(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(dim) + static_cast<double>(eps));
    for (int64_t i = 0; i < dim; ++i) out[row * dim + i] = static_cast<float>(xr[i] * rstd * (gamma ? gamma[i] : 1.0));
  }
}

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  parallel_rows(x, rows, dim, out, [&](Isa isa, const float* xb, int64_t n, float* yb) {
    switch (isa) {
      case Isa::Avx512: rms_norm_rows_avx512(xb, n, dim, gamma, eps, yb); break;
      case Isa::Avx2: rms_norm_rows_avx2(xb, n, dim, gamma, eps, yb); break;
      default: rms_norm_rows_scalar(xb, n, dim, gamma, eps, yb);
    }
  });
}

// ---------------------------------------------------------------- softmax

void softmax_ref(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    bool nan = false;
    double m = -INFINITY;
    for (int64_t i = 0; i < dim; ++i) {
      const double p = static_cast<double>(xr[i]) * scale;
      nan = nan || std::isnan(p);
      m = std::max(m, p);
    }
    if (nan || m == -INFINITY) {
      std::fill(yr, yr + dim, nan ? kNaN : 0.0f);
      continue;
    }
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += std::exp(static_cast<double>(xr[i]) * scale - m);
    for (int64_t i = 0; i < dim; ++i) yr[i] = static_cast<float>(std::exp(static_cast<double>(xr[i]) * scale - m) / sum);
  }
}

void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  parallel_rows(x, rows, dim, out, [&](Isa isa, const float* xb, int64_t n, float* yb) {
    switch (isa) {
      case Isa::Avx512: softmax_rows_avx512(xb, n, dim, scale, yb); break;
      case Isa::Avx2: softmax_rows_avx2(xb, n, dim, scale, yb); break;
      default: softmax_rows_scalar(xb, n, dim, scale, yb);
    }
  });
}

}  // namespace tessera::cpu

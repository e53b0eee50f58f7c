// Training kernels (f32): backward of the row-wise and elementwise forwards, fused cross-entropy, column sums
// (bias gradients), embedding scatter-add, AdamW and the sum of squares behind the global gradient norm. References,
// scalar paths and dispatch; SIMD bodies are in train_avx2.cc / train_avx512.cc (loops in train_body.inl).
//
// Determinism (every path): row-wise work is one task per block of whole rows with a fixed order inside a row;
// column reductions over rows (dgamma, dbeta, column sums, embedding rows) give each task a block of columns and
// add rows sequentially; sum_squares sums fixed chunks and then the chunk partials in order. Task boundaries depend
// only on the shapes, so results are bitwise identical for any thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "train_simd.h"

namespace tessera::cpu {

namespace {

int64_t row_grain(int64_t dim) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(dim, 1)); }
constexpr int64_t kElemGrain = 16384;  // elements per task of the elementwise kernels
constexpr int64_t kColBlock = 256;     // columns per task of the column reductions

// Column pass of the norm backward: dgamma[c] (+)= sum_r dy[r, c] * xhat[r, c] and dbeta[c] (+)= sum_r dy[r, c], in
// double, rows in order; xhat from the row pass's statistics with the row pass's f32 arithmetic.
void norm_param_grads(const float* x, const float* dy, int64_t rows, int64_t dim, const NormRowStats* stats, float* dgamma,
                      float* dbeta, bool accumulate) {
  if (!dgamma && !dbeta) return;
  const int64_t blocks = (dim + kColBlock - 1) / kColBlock;
  global_pool().parallel_for_or_inline(blocks, rows * dim < 32768, [&](int64_t blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(dim, c0 + kColBlock), w = c1 - c0;
    double ag[kColBlock] = {}, ab[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim + c0;
      const float* dyr = dy + r * dim + c0;
      const NormRowStats st = stats[r];
      for (int64_t c = 0; c < w; ++c) {
        const float xhat = ((xr[c] - st.hi) - st.lo) * st.rstd;
        ag[c] += static_cast<double>(dyr[c]) * static_cast<double>(xhat);
        ab[c] += static_cast<double>(dyr[c]);
      }
    }
    for (int64_t c = 0; c < w; ++c) {
      if (dgamma) dgamma[c0 + c] = static_cast<float>(accumulate ? static_cast<double>(dgamma[c0 + c]) + ag[c] : ag[c]);
      if (dbeta) dbeta[c0 + c] = static_cast<float>(accumulate ? static_cast<double>(dbeta[c0 + c]) + ab[c] : ab[c]);
    }
  });
}

void write_param(float* out, const std::vector<double>& acc, bool accumulate) {
  for (size_t c = 0; c < acc.size(); ++c) out[c] = static_cast<float>(accumulate ? static_cast<double>(out[c]) + acc[c] : acc[c]);
}

// ---- derivatives in double (references) and float (scalar fast path)

double gelu_erf_grad_d(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752) + x * std::exp(-0.5 * x * x) * 0.3989422804014327; }
double gelu_tanh_grad_d(double x) {
  const double c = 0.7978845608028654, k = 0.044715;
  const double u = c * (x + k * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * k * x * x);
}
double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu_grad_d(double x) {
  const double s = sigmoid_d(x);
  return s * (1.0 + x * (1.0 - s));
}
double act_grad_d(Activation act, double x) {
  switch (act) {
    case Activation::GeluErf: return gelu_erf_grad_d(x);
    case Activation::GeluTanh: return gelu_tanh_grad_d(x);
    default: return silu_grad_d(x);
  }
}

float sigmoid_f(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float act_grad_f(Activation act, float x) {
  switch (act) {
    case Activation::GeluErf:
      return 0.5f * std::erfc(-x * 0.70710678118654752f) + x * (std::exp(-0.5f * x * x) * 0.3989422804014327f);
    case Activation::GeluTanh: {
      const float c = 0.7978845608028654f, k = 0.044715f, x2 = x * x;
      const float sig = 1.0f / (1.0f + std::exp(-2.0f * (c * (x + k * x * x2))));
      return sig + 2.0f * x * (sig * (1.0f - sig)) * (c * (1.0f + 3.0f * k * x2));
    }
    default: {
      const float s = sigmoid_f(x);
      return s * (1.0f + x * (1.0f - s));
    }
  }
}

Isa isa_now() { return active_isa(); }

}  // namespace

// ---------------------------------------------------------------- scalar bodies (baseline ISA)

void layer_norm_bwd_rows_scalar(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                                NormRowStats* stats) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum * inv_dim;
    const float hi = static_cast<float>(mean), lo = static_cast<float>(mean - static_cast<double>(hi));
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const double c = (xr[i] - hi) - lo;
      sq += c * c;
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(sq * inv_dim + static_cast<double>(eps)));
    stats[row] = {hi, lo, rstd};
    if (!dx) continue;
    double a = 0, b = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const float g = gamma ? gamma[i] * dyr[i] : dyr[i];
      const float xhat = ((xr[i] - hi) - lo) * rstd;
      a += g;
      b += static_cast<double>(g) * xhat;
    }
    const float fa = static_cast<float>(a * inv_dim), fb = static_cast<float>(b * inv_dim);
    float* dxr = dx + row * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float g = gamma ? gamma[i] * dyr[i] : dyr[i];
      const float xhat = ((xr[i] - hi) - lo) * rstd;
      dxr[i] = rstd * ((g - fa) - xhat * fb);
    }
  }
}

void rms_norm_bwd_rows_scalar(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                              NormRowStats* stats) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const float rstd = static_cast<float>(1.0 / std::sqrt(sq * inv_dim + static_cast<double>(eps)));
    stats[row] = {0.0f, 0.0f, rstd};
    if (!dx) continue;
    double b = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const float g = gamma ? gamma[i] * dyr[i] : dyr[i];
      b += static_cast<double>(g) * (xr[i] * rstd);
    }
    const float fb = static_cast<float>(b * inv_dim);
    float* dxr = dx + row * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float g = gamma ? gamma[i] * dyr[i] : dyr[i];
      dxr[i] = rstd * (g - (xr[i] * rstd) * fb);
    }
  }
}

void softmax_bwd_rows_scalar(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* yr = y + row * dim;
    const float* dyr = dy + row * dim;
    double dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += static_cast<double>(yr[i]) * dyr[i];
    const float c = static_cast<float>(dot);
    float* dxr = dx + row * dim;
    for (int64_t i = 0; i < dim; ++i) dxr[i] = (yr[i] * (dyr[i] - c)) * scale;
  }
}

void cross_entropy_rows_scalar(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  const int64_t V = a.vocab;
  const double s = a.smoothing;
  for (int64_t row = r0; row < r1; ++row) {
    const float* xr = a.logits + row * V;
    float* dl = a.dlogits ? a.dlogits + row * V : nullptr;
    const int32_t t = a.targets[row];
    if (t == a.ignore_index) {
      a.loss[row] = 0.0f;
      if (dl) std::fill(dl, dl + V, 0.0f);
      continue;
    }
    float m = -INFINITY;
    double sum_x = 0;
    for (int64_t i = 0; i < V; ++i) {
      m = std::max(m, xr[i]);
      sum_x += xr[i];
    }
    const double xt = xr[t];
    double sum_e = 0;
    for (int64_t i = 0; i < V; ++i) {
      const float arg = xr[i] - m;
      const float e = std::isnan(arg) ? arg : arg < -87.3365447505f ? 0.0f : std::exp(arg);
      if (dl) dl[i] = e;
      sum_e += e;
    }
    const double lse = static_cast<double>(m) + std::log(sum_e);
    a.loss[row] = static_cast<float>((1.0 - s) * (lse - xt) + (s > 0 ? s * (lse - sum_x / static_cast<double>(V)) : 0.0));
    if (!dl) continue;
    const float inv = static_cast<float>(a.grad_scale / sum_e), off = static_cast<float>(a.grad_scale * s / static_cast<double>(V));
    for (int64_t i = 0; i < V; ++i) dl[i] = std::fma(dl[i], inv, -off);
    dl[t] -= static_cast<float>(a.grad_scale * (1.0 - s));
  }
}

void activation_bwd_scalar(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * act_grad_f(act, x[i]);
}

void silu_mul_bwd_scalar(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dy[i];
    const float s = sigmoid_f(g);
    const float dg = (d * u) * (s * (1.0f + g * (1.0f - s))), du = d * (g * s);
    dgate[i] = dg;
    dup[i] = du;
  }
}

void adamw_scalar(const AdamWArgs& a, int64_t begin, int64_t end) {
  const float b1 = static_cast<float>(a.beta1), c1 = static_cast<float>(1.0 - a.beta1);
  const float b2 = static_cast<float>(a.beta2), c2 = static_cast<float>(1.0 - a.beta2);
  const float gs = static_cast<float>(a.grad_scale), eps = static_cast<float>(a.eps);
  const float decay = static_cast<float>(a.decay), step = static_cast<float>(a.step_size), ibc2 = static_cast<float>(a.inv_sqrt_bc2);
  for (int64_t i = begin; i < end; ++i) {
    const float g = a.grad[i] * gs;
    const float m = std::fma(b1, a.m[i], c1 * g);
    const float v = std::fma(b2, a.v[i], c2 * (g * g));
    const float denom = std::fma(std::sqrt(v), ibc2, eps);
    a.m[i] = m;
    a.v[i] = v;
    a.param[i] = std::fma(-step, m / denom, a.param[i] * decay);
  }
}

double sum_squares_scalar(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// Picks the active ISA's body: TRAIN_DISPATCH(name)(args...).
#define TRAIN_DISPATCH(name) (isa == Isa::Avx512 ? name##_avx512 : isa == Isa::Avx2 ? name##_avx2 : name##_scalar)

// ---------------------------------------------------------------- LayerNorm / RMSNorm backward

void layer_norm_bwd_ref(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                        float* dgamma, float* dbeta, bool accumulate) {
  if (dim <= 0) return;
  std::vector<double> dg(static_cast<size_t>(dim), 0.0), db(static_cast<size_t>(dim), 0.0), xhat(static_cast<size_t>(dim));
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    double mean = 0;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= static_cast<double>(dim);
    double var = 0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(dim) + static_cast<double>(eps));
    double a = 0, b = 0;
    for (int64_t i = 0; i < dim; ++i) {
      xhat[i] = (xr[i] - mean) * rstd;
      const double g = (gamma ? gamma[i] : 1.0) * dyr[i];
      a += g;
      b += g * xhat[i];
      dg[i] += static_cast<double>(dyr[i]) * xhat[i];
      db[i] += dyr[i];
    }
    a /= static_cast<double>(dim);
    b /= static_cast<double>(dim);
    if (dx) {
      for (int64_t i = 0; i < dim; ++i) dx[row * dim + i] = static_cast<float>(rstd * ((gamma ? gamma[i] : 1.0) * dyr[i] - a - xhat[i] * b));
    }
  }
  if (dgamma) write_param(dgamma, dg, accumulate);
  if (dbeta) write_param(dbeta, db, accumulate);
}

void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                    float* dgamma, float* dbeta, bool accumulate) {
  if (dim <= 0) return;
  const Isa isa = isa_now();
  std::vector<NormRowStats> stats(static_cast<size_t>(rows));
  const auto body = TRAIN_DISPATCH(layer_norm_bwd_rows);
  const auto row_pass = [&](float* out) {
    global_pool().parallel_range(rows, row_grain(dim), [&](int64_t r0, int64_t r1) {
      body(x + r0 * dim, dy + r0 * dim, r1 - r0, dim, gamma, eps, out ? out + r0 * dim : nullptr, stats.data() + r0);
    });
  };
  // The column pass reads dy: with dx in place over dy it runs between a statistics-only pass and the dx pass.
  const bool in_place = dx == dy && (dgamma || dbeta);
  row_pass(in_place ? nullptr : dx);
  norm_param_grads(x, dy, rows, dim, stats.data(), dgamma, dbeta, accumulate);
  if (in_place) row_pass(dx);
}

void rms_norm_bwd_ref(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                      float* dgamma, bool accumulate) {
  if (dim <= 0) return;
  std::vector<double> dg(static_cast<size_t>(dim), 0.0);
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(dim) + static_cast<double>(eps));
    double b = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = xr[i] * rstd;
      b += (gamma ? gamma[i] : 1.0) * dyr[i] * xhat;
      dg[i] += static_cast<double>(dyr[i]) * xhat;
    }
    b /= static_cast<double>(dim);
    if (dx) {
      for (int64_t i = 0; i < dim; ++i) dx[row * dim + i] = static_cast<float>(rstd * ((gamma ? gamma[i] : 1.0) * dyr[i] - xr[i] * rstd * b));
    }
  }
  if (dgamma) write_param(dgamma, dg, accumulate);
}

void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                  float* dgamma, bool accumulate) {
  if (dim <= 0) return;
  const Isa isa = isa_now();
  std::vector<NormRowStats> stats(static_cast<size_t>(rows));
  const auto body = TRAIN_DISPATCH(rms_norm_bwd_rows);
  const auto row_pass = [&](float* out) {
    global_pool().parallel_range(rows, row_grain(dim), [&](int64_t r0, int64_t r1) {
      body(x + r0 * dim, dy + r0 * dim, r1 - r0, dim, gamma, eps, out ? out + r0 * dim : nullptr, stats.data() + r0);
    });
  };
  const bool in_place = dx == dy && dgamma;
  row_pass(in_place ? nullptr : dx);
  norm_param_grads(x, dy, rows, dim, stats.data(), dgamma, nullptr, accumulate);
  if (in_place) row_pass(dx);
}

// ---------------------------------------------------------------- softmax backward

void softmax_bwd_ref(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* yr = y + row * dim;
    const float* dyr = dy + row * dim;
    double dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += static_cast<double>(yr[i]) * dyr[i];
    for (int64_t i = 0; i < dim; ++i) dx[row * dim + i] = static_cast<float>(static_cast<double>(scale) * yr[i] * (dyr[i] - dot));
  }
}

void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  if (rows <= 0 || dim <= 0) return;
  const Isa isa = isa_now();
  const auto body = TRAIN_DISPATCH(softmax_bwd_rows);
  global_pool().parallel_range(rows, row_grain(dim), [&](int64_t r0, int64_t r1) {
    body(y + r0 * dim, dy + r0 * dim, r1 - r0, dim, scale, dx + r0 * dim);
  });
}

// ---------------------------------------------------------------- activations backward

void activation_bwd_ref(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<float>(static_cast<double>(dy[i]) * act_grad_d(act, x[i]));
}

void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  if (n <= 0) return;
  const Isa isa = isa_now();
  const auto body = TRAIN_DISPATCH(activation_bwd);
  global_pool().parallel_range(n, kElemGrain, [&](int64_t i0, int64_t i1) { body(act, x + i0, dy + i0, i1 - i0, dx + i0); });
}

void silu_mul_bwd_ref(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i], d = dy[i];
    const double dg = d * u * silu_grad_d(g), du = d * g * sigmoid_d(g);
    dgate[i] = static_cast<float>(dg);
    dup[i] = static_cast<float>(du);
  }
}

void silu_mul_bwd(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  if (n <= 0) return;
  const Isa isa = isa_now();
  const auto body = TRAIN_DISPATCH(silu_mul_bwd);
  global_pool().parallel_range(n, kElemGrain,
                               [&](int64_t i0, int64_t i1) { body(gate + i0, up + i0, dy + i0, i1 - i0, dgate + i0, dup + i0); });
}

// ---------------------------------------------------------------- cross-entropy

void cross_entropy_ref(const CrossEntropyArgs& a) {
  const int64_t V = a.vocab;
  const double s = a.smoothing;
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t row = 0; row < a.rows; ++row) {
    const float* xr = a.logits + row * V;
    float* dl = a.dlogits ? a.dlogits + row * V : nullptr;
    const int32_t t = a.targets[row];
    if (t == a.ignore_index || V == 0) {
      a.loss[row] = 0.0f;
      if (dl) std::fill(dl, dl + V, 0.0f);
      continue;
    }
    double m = -INFINITY, sum_x = 0;
    for (int64_t i = 0; i < V; ++i) {
      m = std::max(m, static_cast<double>(xr[i]));
      sum_x += xr[i];
    }
    double sum_e = 0;
    for (int64_t i = 0; i < V; ++i) sum_e += std::exp(xr[i] - m);
    const double lse = m + std::log(sum_e);
    const double xt = xr[t];
    for (int64_t i = 0; i < V; ++i) p[i] = std::exp(xr[i] - lse);  // before dl (which may be the logits) is written
    a.loss[row] = static_cast<float>((1.0 - s) * (lse - xt) + (s > 0 ? s * (lse - sum_x / static_cast<double>(V)) : 0.0));
    if (!dl) continue;
    for (int64_t i = 0; i < V; ++i) {
      dl[i] = static_cast<float>(a.grad_scale * (p[i] - s / static_cast<double>(V) - (i == t ? 1.0 - s : 0.0)));
    }
  }
}

void cross_entropy(const CrossEntropyArgs& a) {
  if (a.rows <= 0) return;
  if (a.vocab <= 0) {  // the binding rejects a non-ignored target when vocab is 0, so every row is ignored
    std::fill(a.loss, a.loss + a.rows, 0.0f);
    return;
  }
  const Isa isa = isa_now();
  const auto body = TRAIN_DISPATCH(cross_entropy_rows);
  global_pool().parallel_range(a.rows, row_grain(a.vocab), [&](int64_t r0, int64_t r1) { body(a, r0, r1); });
}

// ---------------------------------------------------------------- column sums (bias gradients)

void column_sum_ref(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate) {
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) acc[c] += x[r * cols + c];
  write_param(out, acc, accumulate);
}

// One task per block of kColBlock columns, rows added in order in double (vectorised across columns).
void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate) {
  if (cols <= 0) return;
  const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
  global_pool().parallel_for_or_inline(blocks, rows * cols < 32768, [&](int64_t blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(cols, c0 + kColBlock) - c0;
    double acc[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols + c0;
      for (int64_t c = 0; c < w; ++c) acc[c] += static_cast<double>(xr[c]);
    }
    for (int64_t c = 0; c < w; ++c) out[c0 + c] = static_cast<float>(accumulate ? static_cast<double>(out[c0 + c]) + acc[c] : acc[c]);
  });
}

// ---------------------------------------------------------------- embedding backward

void embedding_bwd_ref(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate) {
  std::vector<double> acc(static_cast<size_t>(vocab * dim), 0.0);
  if (accumulate)
    for (int64_t i = 0; i < vocab * dim; ++i) acc[i] = dtable[i];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) acc[ids[i] * dim + c] += dy[i * dim + c];
  for (int64_t i = 0; i < vocab * dim; ++i) dtable[i] = static_cast<float>(acc[i]);
}

// Zero the table (unless accumulating) by row ranges, then one task per block of 64 columns adds the token rows in
// token order in f32: the same sums in the same order for any thread count.
void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate) {
  if (dim <= 0) return;
  if (!accumulate && vocab > 0) {
    global_pool().parallel_range(vocab, row_grain(dim) * 8, [&](int64_t r0, int64_t r1) {
      std::memset(dtable + r0 * dim, 0, static_cast<size_t>((r1 - r0) * dim) * sizeof(float));
    });
  }
  if (n <= 0) return;
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  global_pool().parallel_for_or_inline(blocks, n * dim < 32768, [&](int64_t blk) {
    const int64_t c0 = blk * kBlock, w = std::min(dim, c0 + kBlock) - c0;
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dtable + ids[i] * dim + c0;
      const float* src = dy + i * dim + c0;
      for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
    }
  });
}

// ---------------------------------------------------------------- AdamW

void adamw_ref(const AdamWArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    const double g = static_cast<double>(a.grad[i]) * a.grad_scale;
    const double m = a.beta1 * a.m[i] + (1.0 - a.beta1) * g;
    const double v = a.beta2 * a.v[i] + (1.0 - a.beta2) * g * g;
    const double p = a.param[i] * a.decay - a.step_size * m / (std::sqrt(v) * a.inv_sqrt_bc2 + a.eps);
    a.m[i] = static_cast<float>(m);
    a.v[i] = static_cast<float>(v);
    a.param[i] = static_cast<float>(p);
  }
}

void adamw(const AdamWArgs& a) {
  if (a.n <= 0) return;
  const Isa isa = isa_now();
  const auto body = TRAIN_DISPATCH(adamw);
  global_pool().parallel_range(a.n, kElemGrain, [&](int64_t i0, int64_t i1) { body(a, i0, i1); });
}

// ---------------------------------------------------------------- sum of squares

double sum_squares_ref(const float* x, int64_t n) { return sum_squares_scalar(x, n); }

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const Isa isa = isa_now();
  const auto body = TRAIN_DISPATCH(sum_squares);
  const int64_t chunks = (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  global_pool().parallel_for_or_inline(chunks, chunks == 1, [&](int64_t c) {
    const int64_t i0 = c * kSumSquaresChunk;
    partial[c] = body(x + i0, std::min(n, i0 + kSumSquaresChunk) - i0);
  });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

}  // namespace tessera::cpu

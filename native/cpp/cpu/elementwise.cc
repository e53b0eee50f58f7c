// Elementwise f32 kernels: references, dispatch, and the scalar paths. SIMD bodies live in
// elementwise_avx2.cc / elementwise_avx512.cc (compiled with their ISA flags, called only when supported).
#include <cmath>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "simd_dispatch.h"

namespace tessera::cpu {

namespace {
constexpr int64_t kGrain = 1 << 14;  // elements per task: big enough to amortise scheduling

inline float gelu_erf_scalar(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
inline float gelu_tanh_scalar(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);  // sqrt(2/pi) (x + 0.044715 x^3)
  return x / (1.0f + std::exp(-2.0f * u));                           // == 0.5 x (1 + tanh u), stable for x < 0
}
inline float silu_scalar(float x) { return x / (1.0f + std::exp(-x)); }

double gelu_erf_d(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); }
double gelu_tanh_d(double x) { return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))); }
double silu_d(double x) { return x / (1.0 + std::exp(-x)); }
}  // namespace

// ---------------------------------------------------------------- binary

void binary_ref(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float y = b[b_n == n ? i : i % b_n];
    out[i] = op == BinaryOp::Add ? a[i] + y : a[i] * y;
  }
}

void binary_scalar(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  binary_ref(op, a, n, b, b_n, out);
}

void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  const Isa isa = active_isa();
  // Split on whole rows of b so each task sees aligned broadcast rows.
  const int64_t row = b_n == n || b_n == 0 ? 1 : b_n;
  const int64_t rows = n / row;
  const int64_t grain_rows = std::max<int64_t>(1, kGrain / row);
  global_pool().parallel_range(rows, grain_rows, [&](int64_t r0, int64_t r1) {
    const int64_t off = r0 * row;
    const int64_t len = (r1 - r0) * row;
    const float* bb = b_n == n ? b + off : b;
    const int64_t bn = b_n == n ? len : b_n;
    switch (isa) {
      case Isa::Avx512: binary_avx512(op, a + off, len, bb, bn, out + off); break;
      case Isa::Avx2: binary_avx2(op, a + off, len, bb, bn, out + off); break;
      default: binary_scalar(op, a + off, len, bb, bn, out + off);
    }
  });
}

// ---------------------------------------------------------------- scale

void scale_ref(const float* x, int64_t n, float s, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}

void scale(const float* x, int64_t n, float s, float* out) {
  // Memory bound and trivially vectorised by the compiler at the baseline ISA; threads are what help.
  global_pool().parallel_range(n, kGrain, [&](int64_t b, int64_t e) { scale_ref(x + b, e - b, s, out + b); });
}

// ---------------------------------------------------------------- activations

void activation_ref(Activation act, const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    out[i] = static_cast<float>(act == Activation::GeluErf ? gelu_erf_d(v) : act == Activation::GeluTanh ? gelu_tanh_d(v) : silu_d(v));
  }
}

void activation_scalar(Activation act, const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = act == Activation::GeluErf ? gelu_erf_scalar(x[i]) : act == Activation::GeluTanh ? gelu_tanh_scalar(x[i]) : silu_scalar(x[i]);
  }
}

void activation(Activation act, const float* x, int64_t n, float* out) {
  const Isa isa = active_isa();
  global_pool().parallel_range(n, kGrain / 4, [&](int64_t b, int64_t e) {
    switch (isa) {
      case Isa::Avx512: activation_avx512(act, x + b, e - b, out + b); break;
      case Isa::Avx2: activation_avx2(act, x + b, e - b, out + b); break;
      default: activation_scalar(act, x + b, e - b, out + b);
    }
  });
}

void silu_mul_ref(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(silu_d(gate[i]) * static_cast<double>(up[i]));
}

void silu_mul_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_scalar(gate[i]) * up[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const Isa isa = active_isa();
  global_pool().parallel_range(n, kGrain / 4, [&](int64_t b, int64_t e) {
    switch (isa) {
      case Isa::Avx512: silu_mul_avx512(gate + b, up + b, e - b, out + b); break;
      case Isa::Avx2: silu_mul_avx2(gate + b, up + b, e - b, out + b); break;
      default: silu_mul_scalar(gate + b, up + b, e - b, out + b);
    }
  });
}

}  // namespace tessera::cpu

// Elementwise f32 kernels: add/mul with row broadcast, scale, GELU (erf, tanh), SiLU, SwiGLU.
// Fast path: grid-stride loops over float4 when every pointer is 16-byte aligned (rowsView offsets may break that),
// scalar otherwise. The float formulas are the CPU scalar ones (cpu/elementwise.cc), so add/mul/scale are bitwise
// equal to the CPU backend and the activations agree to a few ulp (CUDA's erff/expf are within 2 ulp).
// Reference: one thread per element, activations evaluated in double like the CPU references.
#include <cstdint>

#include "cuda_check.h"
#include "cuda_kernels.h"

namespace tessera::gpu {

namespace {

constexpr int kThreads = 256;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__device__ __forceinline__ int64_t global_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float apply_binary(int op, float a, float b) { return op == 0 ? a + b : a * b; }

__device__ __forceinline__ float gelu_erf_f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_tanh_f(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));  // == 0.5 x (1 + tanh u), stable for x < 0
}
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float activate_f(int act, float x) {
  return act == 0 ? gelu_erf_f(x) : act == 1 ? gelu_tanh_f(x) : silu_f(x);
}

__device__ __forceinline__ double gelu_erf_d(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }
__device__ __forceinline__ double gelu_tanh_d(double x) {
  return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}
__device__ __forceinline__ double silu_d(double x) { return x / (1.0 + exp(-x)); }
__device__ __forceinline__ double activate_d(int act, double x) {
  return act == 0 ? gelu_erf_d(x) : act == 1 ? gelu_tanh_d(x) : silu_d(x);
}

// ---------------------------------------------------------------- binary

// b_n == n: same shape; otherwise b is one row of length b_n repeated over a's rows.
__global__ void binary_scalar_kernel(int op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = apply_binary(op, a[i], b[b_n == n ? i : i % b_n]);
}

// Vectorised: n and b_n are multiples of 4 (or b_n == n), so a float4 never straddles a broadcast row.
__global__ void binary_vec4_kernel(int op, const float4* a, int64_t n4, const float4* b, int64_t b_n4, float4* out) {
  for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
    const float4 x = a[i];
    const float4 y = b[b_n4 == n4 ? i : i % b_n4];
    out[i] = make_float4(apply_binary(op, x.x, y.x), apply_binary(op, x.y, y.y), apply_binary(op, x.z, y.z), apply_binary(op, x.w, y.w));
  }
}

// ---------------------------------------------------------------- scale

__global__ void scale_scalar_kernel(const float* x, int64_t n, float s, float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = x[i] * s;
}

__global__ void scale_vec4_kernel(const float4* x, int64_t n4, float s, float4* out) {
  for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
    const float4 v = x[i];
    out[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
  }
}

// ---------------------------------------------------------------- activations

__global__ void activation_kernel(int act, const float* x, int64_t n, float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = activate_f(act, x[i]);
}

__global__ void activation_vec4_kernel(int act, const float4* x, int64_t n4, float4* out) {
  for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
    const float4 v = x[i];
    out[i] = make_float4(activate_f(act, v.x), activate_f(act, v.y), activate_f(act, v.z), activate_f(act, v.w));
  }
}

__global__ void activation_ref_kernel(int act, const float* x, int64_t n, float* out) {
  const int64_t i = global_thread();
  if (i < n) out[i] = static_cast<float>(activate_d(act, static_cast<double>(x[i])));
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = silu_f(gate[i]) * up[i];
}

__global__ void silu_mul_vec4_kernel(const float4* gate, const float4* up, int64_t n4, float4* out) {
  for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
    const float4 g = gate[i], u = up[i];
    out[i] = make_float4(silu_f(g.x) * u.x, silu_f(g.y) * u.y, silu_f(g.z) * u.z, silu_f(g.w) * u.w);
  }
}

__global__ void silu_mul_ref_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = global_thread();
  if (i < n) out[i] = static_cast<float>(silu_d(static_cast<double>(gate[i])) * static_cast<double>(up[i]));
}

// One thread per element for the references: no grid-stride, so the grid must cover n.
unsigned ref_grid(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "reference kernel: too many elements for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out, bool reference) {
  if (n == 0) return;
  const int o = static_cast<int>(op);
  const bool vec = !reference && n % 4 == 0 && b_n % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(out);
  if (vec) {
    binary_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads>>>(o, reinterpret_cast<const float4*>(a), n / 4,
                                                               reinterpret_cast<const float4*>(b), b_n / 4, reinterpret_cast<float4*>(out));
    check_launch("binary_vec4_kernel");
  } else {
    // The reference and the scalar path are the same one-thread-per-element kernel (IEEE add/mul are exact
    // roundings, so there is nothing to vectorise away); the reference simply never takes the float4 path.
    binary_scalar_kernel<<<reference ? ref_grid(n) : grid_for(n, kThreads), kThreads>>>(o, a, n, b, b_n, out);
    check_launch("binary_scalar_kernel");
  }
}

void scale(const float* x, int64_t n, float s, float* out, bool reference) {
  if (n == 0) return;
  if (!reference && n % 4 == 0 && aligned16(x) && aligned16(out)) {
    scale_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads>>>(reinterpret_cast<const float4*>(x), n / 4, s, reinterpret_cast<float4*>(out));
    check_launch("scale_vec4_kernel");
  } else {
    scale_scalar_kernel<<<reference ? ref_grid(n) : grid_for(n, kThreads), kThreads>>>(x, n, s, out);
    check_launch("scale_scalar_kernel");
  }
}

void activation(Activation act, const float* x, int64_t n, float* out, bool reference) {
  if (n == 0) return;
  const int a = static_cast<int>(act);
  if (reference) {
    activation_ref_kernel<<<ref_grid(n), kThreads>>>(a, x, n, out);
    check_launch("activation_ref_kernel");
  } else if (n % 4 == 0 && aligned16(x) && aligned16(out)) {
    activation_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads>>>(a, reinterpret_cast<const float4*>(x), n / 4, reinterpret_cast<float4*>(out));
    check_launch("activation_vec4_kernel");
  } else {
    activation_kernel<<<grid_for(n, kThreads), kThreads>>>(a, x, n, out);
    check_launch("activation_kernel");
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, bool reference) {
  if (n == 0) return;
  if (reference) {
    silu_mul_ref_kernel<<<ref_grid(n), kThreads>>>(gate, up, n, out);
    check_launch("silu_mul_ref_kernel");
  } else if (n % 4 == 0 && aligned16(gate) && aligned16(up) && aligned16(out)) {
    silu_mul_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads>>>(reinterpret_cast<const float4*>(gate), reinterpret_cast<const float4*>(up),
                                                                 n / 4, reinterpret_cast<float4*>(out));
    check_launch("silu_mul_vec4_kernel");
  } else {
    silu_mul_kernel<<<grid_for(n, kThreads), kThreads>>>(gate, up, n, out);
    check_launch("silu_mul_kernel");
  }
}

}  // namespace tessera::gpu

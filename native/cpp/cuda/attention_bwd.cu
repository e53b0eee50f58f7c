// Attention prefill backward (f32), the CPU algorithm (cpu/attention_bwd.cc) in two kernels with no shared writes:
//   1. one thread per query row (sequence, position, head): the row's max, log-sum-exp and D = sum_j P_ij (dO_i·v_j)
//      over its visible keys, then dq_i = scale sum_j P_ij (dO_i·v_j - D) k_j with keys in order;
//   2. one thread per key row (sequence, position, kv head): dk_j and dv_j summed over query positions in order and
//      the GQA group's heads in order, P_ij recomputed from the stored log-sum-exp.
// Each output row is owned by one thread and summed in a fixed order: the same bits on every run. T is the
// arithmetic type: float for the fast path, double for the reference (whose scratch then holds doubles).
// O(seq^2 d) work per head, SIMT; a tiled tensor-core version is future work.
#include <cmath>
#include <cstdint>

#include "cuda_check.h"
#include "cuda_kernels.h"

namespace tessera::gpu {

namespace {

constexpr int kThreads = 128;

template <typename T>
__device__ __forceinline__ T dot(const float* a, const float* b, int64_t d) {
  T s = 0;
  for (int64_t c = 0; c < d; ++c) s += static_cast<T>(a[c]) * static_cast<T>(b[c]);
  return s;
}

template <typename T>
__global__ void attention_bwd_rows_kernel(PrefillAttentionBwdArgs a, T* lse, T* delta) {
  const int64_t S = a.seq, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim, group = H / KVH;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= a.batch * S * H) return;
  const int64_t h = row % H, i = (row / H) % S, b = row / (H * S), g = h / group;
  const float* q = a.q + row * D;
  const float* dout = a.dout + row * D;
  float* dq = a.dq + row * D;
  const int64_t nk = a.causal ? i + 1 : S;
  const T scale = a.scale;
  auto visible = [&](int64_t j) { return a.key_mask == nullptr || a.key_mask[b * S + j] != 0; };
  auto krow = [&](int64_t j) { return a.k + ((b * S + j) * KVH + g) * D; };
  auto vrow = [&](int64_t j) { return a.v + ((b * S + j) * KVH + g) * D; };
  T m = -INFINITY;
  bool any = false;
  for (int64_t j = 0; j < nk; ++j) {
    if (!visible(j)) continue;
    const T s = dot<T>(q, krow(j), D) * scale;
    m = any ? (s > m ? s : m) : s;
    any = true;
  }
  for (int64_t c = 0; c < D; ++c) dq[c] = 0.0f;
  if (!any) {
    lse[row] = -INFINITY;
    delta[row] = 0;
    return;
  }
  T sum = 0;
  for (int64_t j = 0; j < nk; ++j)
    if (visible(j)) sum += exp(dot<T>(q, krow(j), D) * scale - m);
  const T l = m + log(sum);
  T dsum = 0;
  for (int64_t j = 0; j < nk; ++j)
    if (visible(j)) dsum += exp(dot<T>(q, krow(j), D) * scale - l) * dot<T>(dout, vrow(j), D);
  lse[row] = l;
  delta[row] = dsum;
  if constexpr (sizeof(T) == sizeof(float)) {
    // Fast: accumulate straight into dq (f32).
    for (int64_t j = 0; j < nk; ++j) {
      if (!visible(j)) continue;
      const T p = exp(dot<T>(q, krow(j), D) * scale - l);
      const float ds = static_cast<float>(p * (dot<T>(dout, vrow(j), D) - dsum) * scale);
      const float* kj = krow(j);
      for (int64_t c = 0; c < D; ++c) dq[c] += ds * kj[c];
    }
  } else {
    // Reference: one output at a time, in double.
    for (int64_t c = 0; c < D; ++c) {
      T acc = 0;
      for (int64_t j = 0; j < nk; ++j) {
        if (!visible(j)) continue;
        const T p = exp(dot<T>(q, krow(j), D) * scale - l);
        acc += p * (dot<T>(dout, vrow(j), D) - dsum) * scale * static_cast<T>(krow(j)[c]);
      }
      dq[c] = static_cast<float>(acc);
    }
  }
}

template <typename T>
__global__ void attention_bwd_keys_kernel(PrefillAttentionBwdArgs a, const T* lse, const T* delta) {
  const int64_t S = a.seq, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim, group = H / KVH;
  const int64_t kr = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kr >= a.batch * S * KVH) return;
  const int64_t g = kr % KVH, j = (kr / KVH) % S, b = kr / (KVH * S);
  const float* kj = a.k + kr * D;
  const float* vj = a.v + kr * D;
  float* dk = a.dk + kr * D;
  float* dv = a.dv + kr * D;
  for (int64_t c = 0; c < D; ++c) dk[c] = dv[c] = 0.0f;
  if (a.key_mask != nullptr && a.key_mask[b * S + j] == 0) return;
  const T scale = a.scale;
  if constexpr (sizeof(T) == sizeof(float)) {
    for (int64_t i = a.causal ? j : 0; i < S; ++i) {
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t row = (b * S + i) * H + h;
        const float* q = a.q + row * D;
        const float* dout = a.dout + row * D;
        const T p = exp(dot<T>(q, kj, D) * scale - lse[row]);
        const float ds = static_cast<float>(p * (dot<T>(dout, vj, D) - delta[row]) * scale);
        const float pf = static_cast<float>(p);
        for (int64_t c = 0; c < D; ++c) {
          dv[c] += pf * dout[c];
          dk[c] += ds * q[c];
        }
      }
    }
  } else {
    for (int64_t c = 0; c < D; ++c) {
      T ak = 0, av = 0;
      for (int64_t i = a.causal ? j : 0; i < S; ++i) {
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const int64_t row = (b * S + i) * H + h;
          const float* q = a.q + row * D;
          const float* dout = a.dout + row * D;
          const T p = exp(dot<T>(q, kj, D) * scale - lse[row]);
          av += p * static_cast<T>(dout[c]);
          ak += p * (dot<T>(dout, vj, D) - delta[row]) * scale * static_cast<T>(q[c]);
        }
      }
      dk[c] = static_cast<float>(ak);
      dv[c] = static_cast<float>(av);
    }
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "attention_prefill_bwd: too many rows for one launch");
  return static_cast<unsigned>(blocks);
}

template <typename T>
void run(const PrefillAttentionBwdArgs& a) {
  T* lse = reinterpret_cast<T*>(a.row_lse);
  T* delta = reinterpret_cast<T*>(a.row_delta);
  attention_bwd_rows_kernel<T><<<blocks_for(a.batch * a.seq * a.n_heads), kThreads>>>(a, lse, delta);
  check_launch("attention_bwd_rows_kernel");
  attention_bwd_keys_kernel<T><<<blocks_for(a.batch * a.seq * a.n_kv_heads), kThreads>>>(a, lse, delta);
  check_launch("attention_bwd_keys_kernel");
}

}  // namespace

void attention_prefill_bwd(const PrefillAttentionBwdArgs& a, bool reference) {
  if (a.batch == 0 || a.seq == 0 || a.head_dim == 0) return;
  if (a.n_heads == 0) {  // kv heads that no query head reads get zero gradients
    const size_t bytes = static_cast<size_t>(a.batch * a.seq * a.n_kv_heads * a.head_dim) * sizeof(float);
    check_cuda(cudaMemsetAsync(a.dk, 0, bytes), "cudaMemsetAsync");
    check_cuda(cudaMemsetAsync(a.dv, 0, bytes), "cudaMemsetAsync");
    return;
  }
  if (reference) run<double>(a);
  else run<float>(a);
}

}  // namespace tessera::gpu

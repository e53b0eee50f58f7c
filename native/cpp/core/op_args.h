// Op arguments shared by every layer that names them: the CPU kernels (cpu/kernels.h), the CUDA launchers
// (cuda/cuda_kernels.h, also read by nvcc), the backend interface (binding/backend_ops.h) and the bindings that fill
// them. Defined once here so the two backends cannot drift apart in meaning.
#pragma once
#include <cstdint>

#include "dtype.h"

namespace tessera {

// ---------------------------------------------------------------- elementwise (f32)
// Binary ops broadcast b over rows when b_n < n (b_n must divide n: b is a row of length b_n).
enum class BinaryOp : int { Add = 0, Mul = 1 };
enum class Activation : int { GeluErf = 0, GeluTanh = 1, Silu = 2 };

// ---------------------------------------------------------------- GEMM
// C[m,n] = alpha * op(A) @ op(B) + beta * C + bias[n]
//   A is f32: op(A) = A [m,k] (lda >= k) or, with trans_a, A^T where A is stored [k,m] (lda >= m).
//   B is f32, f16 or bf16: op(B) = B [k,n] (ldb >= n) or, with trans_b, B^T where B is stored [n,k] (ldb >= k).
//     (A Hugging Face Linear weight is stored [out,in] = [n,k], so projections use trans_b = true.)
//   beta == 0 means C is write-only (never read, so uninitialised or NaN memory is fine).
//   bias may be null. Reduction over k is in a fixed order.
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const void* b = nullptr;
  DType b_dtype = DType::F32;
  int64_t ldb = 0;
  bool trans_b = false;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;
};

// ---------------------------------------------------------------- attention (f32)
// Prefill: q [batch, seq, n_heads, d], k/v [batch, seq, n_kv_heads, d] -> out [batch, seq, n_heads, d].
// n_heads % n_kv_heads == 0 (GQA: head h reads kv head h / (n_heads / n_kv_heads)).
// key_mask (u8 [batch, seq], may be null): 0 marks padding keys, which get no weight. causal: key j <= query i.
// A query with no visible key writes zeros.
struct PrefillAttentionArgs {
  const float* q = nullptr; const float* k = nullptr; const float* v = nullptr; float* out = nullptr;
  int64_t batch = 0, seq = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const uint8_t* key_mask = nullptr;
  bool causal = false;
  float scale = 1.0f;
};

// Decode over a paged KV cache: q [batch, n_heads, d]; k_cache/v_cache [num_pages, page_size, n_kv_heads, d];
// block_table i32 [batch, max_pages] (page ids); context_lens i32 [batch] (tokens in cache, incl. the current
// one) -> out [batch, n_heads, d]. A sequence with context_len 0 writes zeros.
constexpr int64_t kPageSize = 16;
struct DecodeAttentionArgs {
  const float* q = nullptr; const float* k_cache = nullptr; const float* v_cache = nullptr; float* out = nullptr;
  const int32_t* block_table = nullptr; const int32_t* context_lens = nullptr;
  int64_t batch = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, num_pages = 0, max_pages = 0;
  int64_t page_size = kPageSize;
  float scale = 1.0f;
};

}  // namespace tessera

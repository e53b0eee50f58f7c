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

// ---------------------------------------------------------------- SGMV / BGMV (f32, fp32 accumulation)
// One group of rows that share one weight slice W = W_i[layer]: f32, contiguous, row-major [r, h] with h = h_in
// (shrink) or h_out (expand), so both kernels read rows of W contiguously. The group's activation rows are
// row_ids[row_begin + j] for j < rows when the call has a row list (BGMV), else row_begin + j (an SGMV segment).
// Groups of one call cover disjoint rows (the bindings guarantee it), so they can be written in parallel.
struct SgmvSegment {
  const float* w = nullptr;
  int64_t r = 0;
  int64_t row_begin = 0, rows = 0;
  float scale = 1.0f;  // expand only: y += scale * (v W)
};

// Shrink: y[row, 0:r] += x[row, :] · Wᵀ   x [total_rows, h] (h = h_in), y [total_rows, r_max].
// Expand: y[row, :] += scale · x[row, 0:r] · W   x [total_rows, r_max] (the LoRA op's v), y [total_rows, h] (h_out).
// segments and row_ids are host memory; a backend moves them to where its kernels read them.
// The fast paths fix the order of every sum, so a row's result depends neither on the thread count nor on which
// other rows share its group (BGMV and SGMV over the same rows agree bit for bit):
//   shrink: K is cut into chunks of kSgmvChunk; each chunk's dot product is an f32 partial, and
//           y += ((p_0 + p_1) + p_2) + ... in chunk order;
//   expand: acc = f32 multiply-add chain over k = 0..r-1, then y += scale * acc.
constexpr int64_t kSgmvChunk = 256;
struct SgmvArgs {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t total_rows = 0, h = 0, r_max = 0;
  const SgmvSegment* segments = nullptr;
  int64_t n_segments = 0;
  const int32_t* row_ids = nullptr;  // null: every group is a contiguous row range
};

}  // namespace tessera

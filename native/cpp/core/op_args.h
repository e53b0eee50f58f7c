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
// Relu is only an adapter activation (HMI's adapters: hmi.md §1.6); the elementwise and training ops take the others.
enum class Activation : int { GeluErf = 0, GeluTanh = 1, Silu = 2, Relu = 3 };

// ---------------------------------------------------------------- GEMM
// C[m,n] = alpha * op(A) @ op(B) + beta * C + bias[n]
//   A is f32: op(A) = A [m,k] (lda >= k) or, with trans_a, A^T where A is stored [k,m] (lda >= m).
//   B is f32, f16 or bf16: op(B) = B [k,n] (ldb >= n) or, with trans_b, B^T where B is stored [n,k] (ldb >= k).
//     (A Hugging Face Linear weight is stored [out,in] = [n,k], so projections use trans_b = true.)
//   beta == 0 means C is write-only (never read, so uninitialised or NaN memory is fine).
//   bias may be null. Reduction over k is in a fixed order.
//   bf16_compute (CPU only): op(A) and op(B) are rounded to bf16 (round to nearest even) and their products summed
//   in f32; with bf16 weights and trans_b this runs on AMX-BF16 tiles (cpu/gemm_bf16_amx.cc) or VDPBF16PS
//   (cpu/gemm_bf16_avx512.cc) where the CPU has them; bf16_kernel names one of those paths (tests and benches).
enum class Bf16Kernel : int { Auto = 0, Rounded = 1, Avx512Bf16 = 2, Amx = 3, AmxEmulated = 4 };
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
  bool bf16_compute = false;
  Bf16Kernel bf16_kernel = Bf16Kernel::Auto;  // CPU only, with bf16_compute
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

// ---------------------------------------------------------------- training (f32; cpu/train.cc, cuda/train.cu)
// Prefill attention backward over the forward's layout (PrefillAttentionArgs): given dout = dL/d(out), writes dq
// [batch, seq, n_heads, d] and dk, dv [batch, seq, n_kv_heads, d] (overwritten, not accumulated). The softmax
// probabilities are recomputed from q and k. A padding key (key_mask 0) gets dk = dv = 0; a query with no visible
// key gets dq = 0. dk / dv of a kv head sum over the query heads of its GQA group and the queries in an order fixed
// by the shapes alone, so the result does not depend on the thread count.
// row_lse / row_delta: scratch of batch * seq * n_heads floats each, used by the CUDA fast kernel (device memory);
// the CPU allocates its own and ignores them.
struct PrefillAttentionBwdArgs {
  const float* q = nullptr; const float* k = nullptr; const float* v = nullptr; const float* dout = nullptr;
  float* dq = nullptr; float* dk = nullptr; float* dv = nullptr;
  int64_t batch = 0, seq = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const uint8_t* key_mask = nullptr;
  bool causal = false;
  float scale = 1.0f;
  float* row_lse = nullptr; float* row_delta = nullptr;
};

// Fused AdamW step, in place over n elements (PyTorch's torch.optim.AdamW, decoupled weight decay):
//   g = grad * grad_scale;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   param = param * decay - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// with decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t),
// computed once on the host in double (the binding) so every backend uses the same constants.
struct AdamWArgs {
  float* param = nullptr; const float* grad = nullptr; float* m = nullptr; float* v = nullptr;
  int64_t n = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, grad_scale = 1.0;
  double decay = 1.0, step_size = 0.0, inv_sqrt_bc2 = 1.0;
};

// Fused cross-entropy over [rows, vocab] logits with i32 targets (in [0, vocab) or ignore_index):
//   loss[r] = (1 - s) (lse - x[t]) + s (lse - mean(x))          (s = label smoothing, lse = log sum exp x)
//   dlogits[r, j] = grad_scale (softmax(x)[j] - s / vocab - (1 - s) [j == t])
// An ignored row gets loss 0 and dlogits 0. dlogits may be null (loss only) or logits itself (in place).
struct CrossEntropyArgs {
  const float* logits = nullptr; const int32_t* targets = nullptr;
  float* loss = nullptr; float* dlogits = nullptr;
  int64_t rows = 0, vocab = 0;
  int32_t ignore_index = -100;
  float smoothing = 0.0f, grad_scale = 1.0f;
};

// Elements per partial of sum_squares: each chunk is summed in double, then the partials in chunk order.
constexpr int64_t kSumSquaresChunk = 16384;

}  // namespace tessera

// CPU kernel entry points. Plain functions over raw pointers and sizes, as in ggml. Each kernel has:
//   <name>_ref   a plain scalar reference (the oracle; accumulates in double where it reduces), and
//   <name>       the dispatching entry: picks the AVX-512 / AVX2+FMA / scalar path by active_isa() and
//                splits work over global_pool() so that results are bitwise identical for any thread count.
// Shapes are validated by the binding before these are called; kernels may assume valid, contiguous input.
// Every kernel must handle zero-sized dimensions (do nothing, write nothing beyond empty outputs).
// The argument types (GemmArgs, BinaryOp, Activation, the attention args, kPageSize) are in core/op_args.h, shared
// with the CUDA launchers.
#pragma once
#include <cstdint>

#include "../core/dtype.h"
#include "../core/op_args.h"
#include "pet_args.h"

namespace tessera::cpu {

// ---------------------------------------------------------------- GEMM (GemmArgs: see core/op_args.h)
void gemm_ref(const GemmArgs& args);
void gemm(const GemmArgs& args);

// batch independent GEMMs; element pointers advance by the strides (in elements) per batch entry.
// A stride of 0 broadcasts (e.g. one shared weight).
void gemm_batched_ref(const GemmArgs& args, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c);
void gemm_batched(const GemmArgs& args, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c);

// The bf16-compute kernels (GemmArgs::bf16_kernel) by name ("auto", "rounded", "avx512bf16", "amx",
// "amx-emulated"), which of them this CPU runs, and what Auto picks at the active ISA. A kernel applies to bf16
// weights with trans_b above the decode sizes; other shapes, and a named kernel the CPU lacks, run rounded.
const char* bf16_kernel_name(Bf16Kernel k);
bool bf16_kernel_from_name(const char* name, Bf16Kernel* out);
bool bf16_kernel_available(Bf16Kernel k);
Bf16Kernel bf16_auto_kernel();

// ---------------------------------------------------------------- gathers, copies
// out[i, :] = float(table[ids[i], :]) for a [vocab, dim] table of f32/f16/bf16. ids are pre-validated.
void embedding_ref(const void* table, DType table_dtype, int64_t dim, const int32_t* ids, int64_t n, float* out);
void embedding(const void* table, DType table_dtype, int64_t dim, const int32_t* ids, int64_t n, float* out);

// Row gather/scatter over byte rows (any dtype): dst[i] = src[idx[i]] / dst[idx[i]] = src[i].
void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst);
void scatter_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst);

// Element copy with conversion between f32, f16 and bf16 (same-dtype copies of any dtype are memcpy).
void convert_ref(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

// ---------------------------------------------------------------- elementwise (f32)
// Binary ops broadcast b over rows when b_n < n (b_n must divide n: b is a row of length b_n).
void binary_ref(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out);
void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out);
// out = x * s (+ 0); out may alias x.
void scale_ref(const float* x, int64_t n, float s, float* out);
void scale(const float* x, int64_t n, float s, float* out);

void activation_ref(Activation act, const float* x, int64_t n, float* out);
void activation(Activation act, const float* x, int64_t n, float* out);
// SwiGLU: out = silu(gate) * up
void silu_mul_ref(const float* gate, const float* up, int64_t n, float* out);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// ---------------------------------------------------------------- normalisation, softmax (row-wise, f32)
// y = (x - mean) / sqrt(var + eps) * gamma + beta   (gamma/beta may be null: 1 and 0)
void layer_norm_ref(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out);
void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out);
// y = x / sqrt(mean(x^2) + eps) * gamma   (gamma may be null)
void rms_norm_ref(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out);
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out);
// y = softmax(x * scale) over each row
void softmax_ref(const float* x, int64_t rows, int64_t dim, float scale, float* out);
void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out);

// ---------------------------------------------------------------- RoPE (in place)
// x is [tokens, heads, head_dim]; positions[tokens]. Rotates the first rot_dim dims of each head in the
// "rotate_half" (GPT-NeoX / HF Llama) layout: pairs (i, i + rot_dim/2), inv_freq_i = base^(-2i/rot_dim).
// inverse: rotate by -angle instead (the backward of rope: the rotation is orthogonal, so dx = R(-angle) dy).
void rope_ref(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base,
              bool inverse = false);
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base,
          bool inverse = false);

// ---------------------------------------------------------------- attention (f32; the args: core/op_args.h)
void attention_prefill_ref(const PrefillAttentionArgs& a);
void attention_prefill(const PrefillAttentionArgs& a);

void attention_decode_ref(const DecodeAttentionArgs& a);
void attention_decode(const DecodeAttentionArgs& a);

// ---------------------------------------------------------------- SGMV / BGMV (SgmvArgs: see core/op_args.h)
// Shrink: y[row, 0:r] += x[row, :] · Wᵀ and expand: y[row, :] += scale · v[row, 0:r] · W, per group of rows.
// In place; the groups cover disjoint rows. The references accumulate each output in double and round once.
void sgmv_shrink_ref(const SgmvArgs& args);
void sgmv_shrink(const SgmvArgs& args);
void sgmv_expand_ref(const SgmvArgs& args);
void sgmv_expand(const SgmvArgs& args);

// ---------------------------------------------------------------- PET operators (PetS; PetSiteArgs: pet_args.h)
// One linear site's op list: CSR SpMM, bias add, bottleneck adapter, LayerNorm, each over its rows. pet_site runs the
// streams as worker groups of global_pool() (see pet.cc) with the same bits for any thread and stream count;
// pet_site_ref runs every op in list order, accumulating in double.
void pet_site_ref(const PetSiteArgs& args);
void pet_site(const PetSiteArgs& args);

// ---------------------------------------------------------------- training: backward kernels, loss, optimiser
// train.cc (row-wise, elementwise, reductions; SIMD bodies in train_avx2.cc / train_avx512.cc) and
// attention_bwd.cc. Every `_ref` accumulates in double and rounds each output once. Parameter gradients
// (dgamma, dbeta, column sums, embedding rows) are column reductions over rows: the fast paths give each task a
// block of columns and sum rows sequentially, so the result does not depend on the thread count. With
// `accumulate` they add to the existing gradient (out = out + sum), otherwise they overwrite it.

// LayerNorm backward over [rows, dim] (statistics recomputed from x as in layer_norm). dx, dgamma, dbeta may each be
// null (not wanted); gamma may be null (1). dx may alias dy.
void layer_norm_bwd_ref(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                        float* dgamma, float* dbeta, bool accumulate);
void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                    float* dgamma, float* dbeta, bool accumulate);
// RMSNorm backward; as above.
void rms_norm_bwd_ref(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                      float* dgamma, bool accumulate);
void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                  float* dgamma, bool accumulate);
// softmax(x * scale) backward from its output y: dx = scale * y * (dy - sum(y * dy)). dx may alias dy.
void softmax_bwd_ref(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx);
void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx);
// dx = dy * act'(x). dx may alias dy or x.
void activation_bwd_ref(Activation act, const float* x, const float* dy, int64_t n, float* dx);
void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx);
// SwiGLU backward (out = silu(gate) * up): dgate = dy * up * silu'(gate), dup = dy * silu(gate).
void silu_mul_bwd_ref(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup);
void silu_mul_bwd(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup);
// Fused log-softmax + NLL (CrossEntropyArgs: core/op_args.h).
void cross_entropy_ref(const CrossEntropyArgs& a);
void cross_entropy(const CrossEntropyArgs& a);
// out[c] (+)= sum over rows of x[r, c] (a Linear's bias gradient).
void column_sum_ref(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate);
void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate);
// Embedding backward: dtable[ids[i], :] += dy[i, :] for i in token order (dtable [vocab, dim] zeroed first unless
// accumulate). The fast path sums in f32 in token order, one task per block of columns.
void embedding_bwd_ref(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate);
void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate);
// AdamW step in place (AdamWArgs: core/op_args.h).
void adamw_ref(const AdamWArgs& a);
void adamw(const AdamWArgs& a);
// Sum of squares of n floats: the fast path sums chunks of kSumSquaresChunk in double, then the chunk partials in
// order (same value for any thread count); the reference sums sequentially in double.
double sum_squares_ref(const float* x, int64_t n);
double sum_squares(const float* x, int64_t n);
// Attention prefill backward (PrefillAttentionBwdArgs: core/op_args.h).
void attention_prefill_bwd_ref(const PrefillAttentionBwdArgs& a);
void attention_prefill_bwd(const PrefillAttentionBwdArgs& a);

// ---------------------------------------------------------------- machine probes (bench roofline)
// STREAM triad a[i] = b[i] + s * c[i] over n floats, parallel; returns nothing (caller times it).
void stream_triad(float* a, const float* b, const float* c, float s, int64_t n);
// Peak FMA probe: runs `iters` dependent-chain-free FMA blocks per thread; returns flops performed.
double fma_peak_probe(int64_t iters);
// Read-bandwidth probe (decode GEMV is read-bound): sums n floats in parallel and returns the sum; fixed
// chunking, so any thread count gives the same value.
double read_sum_probe(const float* x, int64_t n);

}  // namespace tessera::cpu

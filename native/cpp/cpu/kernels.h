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
void rope_ref(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base);
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base);

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

// ---------------------------------------------------------------- machine probes (bench roofline)
// STREAM triad a[i] = b[i] + s * c[i] over n floats, parallel; returns nothing (caller times it).
void stream_triad(float* a, const float* b, const float* c, float s, int64_t n);
// Peak FMA probe: runs `iters` dependent-chain-free FMA blocks per thread; returns flops performed.
double fma_peak_probe(int64_t iters);
// Read-bandwidth probe (decode GEMV is read-bound): sums n floats in parallel and returns the sum; fixed
// chunking, so any thread count gives the same value.
double read_sum_probe(const float* x, int64_t n);

}  // namespace tessera::cpu

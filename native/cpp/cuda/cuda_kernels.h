// CUDA kernel launchers: plain C++ over device pointers and sizes, the GPU twin of cpu/kernels.h (same
// semantics; the argument types are the shared ones of core/op_args.h). The shared bindings (binding/ops/) validate
// shapes, dtypes and indices, then backend_ops_cuda.cc (host compiler) calls these; the .cu files hold the kernels.
// Every launcher:
//   - enqueues on the legacy default stream and returns without waiting (read() / synchronize() wait);
//   - returns at once, launching nothing, when there is no work (any zero dimension);
//   - throws tessera::Error(ErrorCode::Device) when a launch fails.
// `reference` selects a plain one-thread-per-output kernel that accumulates in double, the GPU-side oracle the
// tests compare the fast kernels against (and against the CPU references).
#pragma once
#include <cstdint>

#include "../core/dtype.h"
#include "../core/op_args.h"
#include "../cpu/pet_args.h"

namespace tessera::gpu {

// ---------------------------------------------------------------- GEMM
// GemmArgs (core/op_args.h): C[m,n] = alpha * op(A) @ op(B) + beta * C + bias[n].

// Which kernel runs. Auto picks by shape (see gemm.cu); the others force one path so tests can check each.
//   Reference  one thread per output, double accumulation, exact B conversion.
//   Simt       64x64-tiled f32 FMA kernel (full f32 precision); the path for small or odd shapes.
//   Skinny     m <= 8 only: one warp per output column, f32; the memory-bound decode (GEMV-like) path.
//   Tensor     WMMA tensor cores, f32 accumulate. Precision: with f32 B both A and B are rounded to TF32
//              (10-bit mantissa); with f16 B, A is rounded to f16; with bf16 B, A is rounded to bf16 (8 bits).
enum class GemmKernel : int { Auto = 0, Reference = 1, Simt = 2, Skinny = 3, Tensor = 4 };
constexpr int64_t kSkinnyMaxRows = 8;

// batch GEMMs; element pointers advance by the strides per batch entry (0 broadcasts one operand).
void gemm(const GemmArgs& args, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c, GemmKernel kernel);
// The kernel Auto would pick for these sizes (reported to tests so they know which path they exercised).
GemmKernel gemm_auto_kernel(int64_t m, int64_t n, int64_t k);

// ---------------------------------------------------------------- gathers, copies
// Indices are validated on the host by the bindings before these run (read_indices in binding/backend_ops.h).
void embedding(const void* table, DType table_dtype, int64_t dim, const int32_t* ids, int64_t n, float* out, bool reference);
void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst);
// dst[dst_rows[i]] = src[src_rows ? src_rows[i] : i]; the caller removes duplicate destinations first (last wins),
// so no two threads write one row.
void scatter_rows(const void* src, int64_t row_bytes, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, void* dst);
// f32/f16/bf16 conversion with the same rounding (nearest even) and NaN encoding as core/dtype.h.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, bool reference);

// ---------------------------------------------------------------- elementwise (f32)
void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out, bool reference);
void scale(const float* x, int64_t n, float s, float* out, bool reference);
void activation(Activation act, const float* x, int64_t n, float* out, bool reference);
void silu_mul(const float* gate, const float* up, int64_t n, float* out, bool reference);

// ---------------------------------------------------------------- row-wise normalisation, softmax (f32)
void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out, bool reference);
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out, bool reference);
void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out, bool reference);

// ---------------------------------------------------------------- RoPE (in place, rotate_half layout)
// inverse: rotate by -angle (the backward of rope).
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base, bool inverse,
          bool reference);

// ---------------------------------------------------------------- attention (f32; the args: core/op_args.h)
void attention_prefill(const PrefillAttentionArgs& a, bool reference);

void attention_decode(const DecodeAttentionArgs& a, bool reference);
// The fast attention kernels keep one query row in registers: head_dim up to this; larger runs the reference.
constexpr int64_t kAttentionMaxFastHeadDim = 256;

// ---------------------------------------------------------------- training (f32; train.cu, attention_bwd.cu)
// Same semantics as the cpu:: training kernels (cpu/kernels.h). Deterministic: every output is written by one
// thread or one block, with sums in a fixed order. Fast paths: block-per-row kernels for the row-wise ops (f32
// partials, fixed warp-shuffle trees), one thread per column for column reductions (rows in order, in double),
// grid-stride loops for elementwise ops. References: one thread per row / output, accumulating in double.
// Scratch buffers are device memory allocated by backend_ops_cuda.cc:
//   norm backward: `stats`, 2 doubles per row (mean, rstd);
//   sum_squares:   `partials`, one double per chunk of kSumSquaresChunk (one in all for the reference), which the
//                  host then sums in order;
//   attention:     args.row_lse / args.row_delta, batch * seq * n_heads values of 4 (fast) or 8 (reference) bytes.
void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                    float* dbeta, bool accumulate, double* stats, bool reference);
void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                  bool accumulate, double* stats, bool reference);
void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx, bool reference);
void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx, bool reference);
void silu_mul_bwd(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup, bool reference);
void cross_entropy(const CrossEntropyArgs& a, bool reference);
void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate, bool reference);
void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate,
                   bool reference);
void adamw(const AdamWArgs& a, bool reference);
// Writes sum_squares_partials_count(n, reference) doubles to `partials`.
int64_t sum_squares_partials_count(int64_t n, bool reference);
void sum_squares_partials(const float* x, int64_t n, double* partials, bool reference);
void attention_prefill_bwd(const PrefillAttentionBwdArgs& a, bool reference);

// ---------------------------------------------------------------- SGMV / BGMV (f32; SgmvArgs: core/op_args.h)
// One row group as the kernels read it from device memory: SgmvSegment plus where its shrink partials live.
struct SgmvGpuGroup {
  const float* w = nullptr;  // W [r, h], the layer slice
  int64_t r = 0, row_begin = 0, rows = 0;
  int64_t part_offset = 0;  // shrink: partials [chunk][row][k] of this group start here in `partials`
  float scale = 1.0f;
};
// groups / row_ids / partials are device memory (backend_ops_cuda.cc uploads the tables the binding built).
//   shrink: grid (K-chunks of kSgmvChunk, groups); each block writes f32 partials for its chunk, then a second kernel
//           sums each output's partials in chunk order into y (no grid-wide sync). partials holds
//           sum over groups of rows * r * ceil(h / kSgmvChunk) floats (unused by the reference).
//   expand: grid (output-column tiles, groups); each block owns a disjoint tile of y, rows in register blocks.
// max_rows / max_r: the largest group's rows and rank (they size the grids).
struct SgmvLaunch {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t h = 0, r_max = 0;
  const SgmvGpuGroup* groups = nullptr;
  int64_t n_groups = 0, max_rows = 0, max_r = 0;
  const int32_t* row_ids = nullptr;
  float* partials = nullptr;
};
void sgmv_shrink(const SgmvLaunch& l, bool reference);
void sgmv_expand(const SgmvLaunch& l, bool reference);

// ---------------------------------------------------------------- PET operators (f32; PetSiteArgs: cpu/pet_args.h)
// One linear site (pet.cu): one kernel per op kind, each op enqueued on its stream. With num_streams > 1 the streams are
// non-blocking cudaStreams from a small pool kept for the process (stream s runs on pool[s % kPetCudaStreams], so a
// stream's ops stay in order); they first wait on an event recorded on the default stream (the prolog barrier, after
// the shared GEMM queued before the call), and the default stream then waits on an event recorded on each used stream
// (the epilogue barrier), so everything queued after the call sees the site finished. With one stream every op runs
// on the default stream. args.ops is host memory; the pointers in it are device memory.
//   fast       CSR: one thread per output column for a block of kPetCudaCsrRows rows, the fmaf chain over the row's
//              nonzeros then y = fmaf(scale, acc, y) (the CPU SIMD paths' arithmetic); bias: one add; adapter: one block
//              per row, h in shared memory (warp-sum dot products); LayerNorm: one block per row (as layer_norm).
//   reference  double accumulation, one thread per output (adapter: one block per row, h in double).
constexpr int kPetCudaStreams = 16;
constexpr int kPetCudaCsrRows = 4;
void pet_site(const PetSiteArgs& args, bool reference);

}  // namespace tessera::gpu

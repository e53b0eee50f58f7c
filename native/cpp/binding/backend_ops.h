// The backend half of every op. The shared bindings (binding/ops/bind_*.cc) parse the JS arguments and run every
// check (dtypes, shapes, broadcast rules, index ranges, aliasing), then call one of these. Each addon links exactly
// one implementation: cpu/backend_ops_cpu.cc (the cpu:: kernels, `_ref` when `reference` is set) or
// cuda/backend_ops_cuda.cc (the CUDA launchers, asynchronous on the default stream). Arguments arrive validated, so
// an implementation only takes pointers and sizes and runs its kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/op_args.h"
#include "../core/tensor.h"
#include "../cpu/pet_args.h"

namespace tessera::backend {

// ---------------------------------------------------------------- shared by the bindings and the backends
// Host copy of an i32 index tensor (ids, row indices, block tables, context lengths) so the binding can check every
// index before a kernel dereferences it. Defined once (binding/backend_ops.cc) over Device::download: a memcpy on
// the CPU, a device-to-host cudaMemcpy on CUDA (which waits for queued work: the price of a bad index throwing
// instead of faulting the GPU).
std::vector<int32_t> read_indices(const Tensor& t);

// Elements of one row along dim 0 (the product of dims 1..), also right for tensors with zero rows.
inline int64_t row_elements(const Tensor& t) {
  int64_t n = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) n *= t.shape[i];
  return n;
}
inline int64_t row_bytes(const Tensor& t) { return row_elements(t) * static_cast<int64_t>(dtype_size(t.dtype)); }

// A row-wise op's view of x: [rows, dim] with dim its last dimension.
struct RowSplit {
  int64_t rows = 0, dim = 0;
};
inline RowSplit row_split(const Tensor& x) {
  const int64_t dim = x.last_dim();
  return {dim == 0 ? 0 : x.numel() / dim, dim};
}

// ---------------------------------------------------------------- elementwise (f32)
// b has a's element count, or is one row of it broadcast over a's rows; out has a's element count.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, bool reference);
void scale(const Tensor& x, float s, Tensor& out, bool reference);
void activation(Activation act, const Tensor& x, Tensor& out, bool reference);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, bool reference);

// ---------------------------------------------------------------- row-wise over the last dimension (f32)
// gamma / beta: null or f32 [dim]. out has x's shape and may be x itself.
void layer_norm(const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps, Tensor& out, bool reference);
void rms_norm(const Tensor& x, const Tensor* gamma, float eps, Tensor& out, bool reference);
void softmax(const Tensor& x, float scale, Tensor& out, bool reference);

// ---------------------------------------------------------------- RoPE (in place): x f32 [tokens, heads, head_dim]
// inverse: rotate by -angle instead (ropeBackward: the rotation is orthogonal, its transpose is its inverse).
void rope(Tensor& x, const Tensor& positions, int64_t rot_dim, float base, bool inverse, bool reference);

// ---------------------------------------------------------------- gathers, copies
// table [vocab, dim] f32/f16/bf16, ids i32 (in range), out f32 [...ids.shape, dim].
void embedding(const Tensor& table, const Tensor& ids, Tensor& out, bool reference);
// out[i] = src[idx[i]] over rows of any dtype (idx i32 [n], in range).
void gather_rows(const Tensor& src, const Tensor& idx, Tensor& out);
// dst[idx[i]] = src[i]; with repeated indices the last one wins. host_idx is read_indices(idx), already checked.
void scatter_rows(const Tensor& src, const Tensor& idx, const std::vector<int32_t>& host_idx, Tensor& dst);
// Same shape; f32/f16/bf16 to each other, or any dtype to itself (a copy).
void convert(const Tensor& src, Tensor& dst, bool reference);

// ---------------------------------------------------------------- GEMM
struct GemmCall {
  GemmArgs args;  // one GEMM: sizes, pointers, transposes, alpha, beta, bias
  // gemmBatched: `batch` GEMMs whose element pointers advance by the strides (a stride of 0 broadcasts).
  bool batched = false;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  bool reference = false;
  // The `kernel` option as given: nullopt when absent or null, "" when not a string. A backend-specific choice of
  // kernel: CUDA honours it (cuda/backend_ops_cuda.cc); the CPU has one dispatching path and ignores it.
  std::optional<std::string> kernel;
};
void gemm(const GemmCall& call);

// ---------------------------------------------------------------- attention (f32)
// The args are filled and checked (shapes, GQA split, page ids, context lengths) by binding/ops/bind_attention.cc.
void attention_prefill(const PrefillAttentionArgs& args, bool reference);
void attention_decode(const DecodeAttentionArgs& args, bool reference);

// ---------------------------------------------------------------- SGMV / BGMV (f32; SgmvArgs: core/op_args.h)
// Filled and checked by binding/ops/bind_sgmv.cc: one group per non-empty segment (SGMV) or per adapter's rows
// (BGMV) with a non-null weight whose layer slice is already selected; groups cover disjoint rows. args.segments and
// args.row_ids are host memory (a backend copies what its kernels need).
void sgmv_shrink(const SgmvArgs& args, bool reference);
void sgmv_expand(const SgmvArgs& args, bool reference);

// ---------------------------------------------------------------- training (f32; bind_train.cc)
// Backward kernels, the fused cross-entropy, column sums, embedding scatter-add, AdamW and the sum of squares. Filled
// and checked by binding/ops/bind_train.cc (shapes, dtypes, aliasing, target and id ranges). Optional outputs are
// null when not wanted; `accumulate` adds parameter gradients to the existing values instead of overwriting them.
void layer_norm_bwd(const Tensor& x, const Tensor* gamma, const Tensor& dy, float eps, Tensor* dx, Tensor* dgamma, Tensor* dbeta,
                    bool accumulate, bool reference);
void rms_norm_bwd(const Tensor& x, const Tensor* gamma, const Tensor& dy, float eps, Tensor* dx, Tensor* dgamma, bool accumulate,
                  bool reference);
void softmax_bwd(const Tensor& y, const Tensor& dy, float scale, Tensor& dx, bool reference);
void activation_bwd(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx, bool reference);
void silu_mul_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, Tensor& dgate, Tensor& dup, bool reference);
// args.rows / vocab / pointers filled; targets already checked against [0, vocab) and the ignore index.
void cross_entropy(const CrossEntropyArgs& args, bool reference);
// out [cols] (+)= sum over the rows of x [rows, cols].
void column_sum(const Tensor& x, Tensor& out, bool accumulate, bool reference);
// dtable [vocab, dim] (+)= scatter of dy [n, dim] rows by ids (checked against vocab).
void embedding_bwd(const Tensor& dy, const Tensor& ids, Tensor& dtable, bool accumulate, bool reference);
void attention_prefill_bwd(const PrefillAttentionBwdArgs& args, bool reference);
void adamw(const AdamWArgs& args, bool reference);
// Sum of squares of x's elements (double): fixed chunks of kSumSquaresChunk summed in double, then in chunk order.
double sum_squares(const Tensor& x, bool reference);

// ---------------------------------------------------------------- PET operators (f32; PetSiteArgs: cpu/pet_args.h)
// Filled and checked by binding/ops/bind_pet.cc: shapes, rows within the tensors, CSR index contents, aliasing, and
// that ops of different streams never touch memory another stream writes. args.ops is host memory. The CPU runs the
// streams as worker groups of its pool; CUDA enqueues each stream's ops on its own cudaStream between a prolog and an
// epilogue barrier with the default stream.
void pet_site(const PetSiteArgs& args, bool reference);
// The elements of an i32 tensor, readable on the host: the tensor's own memory on the CPU (no copy), a copy into
// `scratch` on CUDA (a device-to-host copy, which waits for queued work).
const int32_t* host_i32(const Tensor& t, std::vector<int32_t>& scratch);

}  // namespace tessera::backend

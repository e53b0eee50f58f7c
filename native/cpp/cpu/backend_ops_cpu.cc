// The CPU backend of the shared op bindings (binding/backend_ops.h): each op runs its cpu:: kernel, or the scalar
// `_ref` oracle when `reference` is set. Kernels run synchronously on the calling thread and global_pool().
#include "../binding/backend_ops.h"
#include "kernels.h"

namespace tessera::backend {

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, bool reference) {
  (reference ? cpu::binary_ref : cpu::binary)(op, a.data<float>(), a.numel(), b.data<float>(), b.numel(), out.data<float>());
}

void scale(const Tensor& x, float s, Tensor& out, bool reference) {
  (reference ? cpu::scale_ref : cpu::scale)(x.data<float>(), x.numel(), s, out.data<float>());
}

void activation(Activation act, const Tensor& x, Tensor& out, bool reference) {
  (reference ? cpu::activation_ref : cpu::activation)(act, x.data<float>(), x.numel(), out.data<float>());
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, bool reference) {
  (reference ? cpu::silu_mul_ref : cpu::silu_mul)(gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>());
}

namespace {
const float* f32_or_null(const Tensor* t) { return t ? t->data<float>() : nullptr; }
}  // namespace

void layer_norm(const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps, Tensor& out, bool reference) {
  const RowSplit r = row_split(x);
  (reference ? cpu::layer_norm_ref : cpu::layer_norm)(x.data<float>(), r.rows, r.dim, f32_or_null(gamma), f32_or_null(beta), eps,
                                                      out.data<float>());
}

void rms_norm(const Tensor& x, const Tensor* gamma, float eps, Tensor& out, bool reference) {
  const RowSplit r = row_split(x);
  (reference ? cpu::rms_norm_ref : cpu::rms_norm)(x.data<float>(), r.rows, r.dim, f32_or_null(gamma), eps, out.data<float>());
}

void softmax(const Tensor& x, float scale, Tensor& out, bool reference) {
  const RowSplit r = row_split(x);
  (reference ? cpu::softmax_ref : cpu::softmax)(x.data<float>(), r.rows, r.dim, scale, out.data<float>());
}

void rope(Tensor& x, const Tensor& positions, int64_t rot_dim, float base, bool inverse, bool reference) {
  (reference ? cpu::rope_ref : cpu::rope)(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), rot_dim, positions.data<int32_t>(), base, inverse);
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, bool reference) {
  (reference ? cpu::embedding_ref : cpu::embedding)(table.raw(), table.dtype, table.dim(1), ids.data<int32_t>(), ids.numel(),
                                                    out.data<float>());
}

void gather_rows(const Tensor& src, const Tensor& idx, Tensor& out) {
  cpu::gather_rows(src.raw(), row_bytes(src), idx.data<int32_t>(), idx.numel(), out.raw());
}

// Sequential in index order, so with repeated indices the last write wins; host_idx is not needed (idx is host memory).
void scatter_rows(const Tensor& src, const Tensor& idx, const std::vector<int32_t>& /*host_idx*/, Tensor& dst) {
  cpu::scatter_rows(src.raw(), row_bytes(src), idx.data<int32_t>(), idx.numel(), dst.raw());
}

void convert(const Tensor& src, Tensor& dst, bool reference) {
  (reference ? cpu::convert_ref : cpu::convert)(src.raw(), src.dtype, dst.raw(), dst.dtype, src.numel());
}

// The `kernel` option names a bf16-compute kernel here (auto | rounded | avx512bf16 | amx | amx-emulated; it applies
// with compute 'bf16'); the f32 path has one dispatching kernel.
void gemm(const GemmCall& call) {
  GemmArgs args = call.args;
  if (call.kernel) {
    Bf16Kernel k;
    if (!cpu::bf16_kernel_from_name(call.kernel->c_str(), &k))
      fail(ErrorCode::InvalidArgument,
           "gemm: option kernel must be auto, rounded, avx512bf16, amx or amx-emulated on the CPU, got \"" + *call.kernel + "\"");
    if (!cpu::bf16_kernel_available(k))
      fail(ErrorCode::Unsupported, "gemm: kernel " + *call.kernel + " needs a CPU feature this machine lacks (deviceInfo().features)");
    args.bf16_kernel = k;
  }
  if (!call.batched) {
    (call.reference ? cpu::gemm_ref : cpu::gemm)(args);
    return;
  }
  (call.reference ? cpu::gemm_batched_ref : cpu::gemm_batched)(args, call.batch, call.stride_a, call.stride_b, call.stride_c);
}

void attention_prefill(const PrefillAttentionArgs& args, bool reference) {
  (reference ? cpu::attention_prefill_ref : cpu::attention_prefill)(args);
}

void attention_decode(const DecodeAttentionArgs& args, bool reference) {
  (reference ? cpu::attention_decode_ref : cpu::attention_decode)(args);
}

void sgmv_shrink(const SgmvArgs& args, bool reference) { (reference ? cpu::sgmv_shrink_ref : cpu::sgmv_shrink)(args); }

void sgmv_expand(const SgmvArgs& args, bool reference) { (reference ? cpu::sgmv_expand_ref : cpu::sgmv_expand)(args); }

void pet_site(const PetSiteArgs& args, bool reference) { (reference ? cpu::pet_site_ref : cpu::pet_site)(args); }

// ---------------------------------------------------------------- training

namespace {
float* f32_mut_or_null(Tensor* t) { return t ? t->data<float>() : nullptr; }
}  // namespace

void layer_norm_bwd(const Tensor& x, const Tensor* gamma, const Tensor& dy, float eps, Tensor* dx, Tensor* dgamma, Tensor* dbeta,
                    bool accumulate, bool reference) {
  const RowSplit r = row_split(x);
  (reference ? cpu::layer_norm_bwd_ref : cpu::layer_norm_bwd)(x.data<float>(), dy.data<float>(), r.rows, r.dim, f32_or_null(gamma), eps,
                                                              f32_mut_or_null(dx), f32_mut_or_null(dgamma), f32_mut_or_null(dbeta),
                                                              accumulate);
}

void rms_norm_bwd(const Tensor& x, const Tensor* gamma, const Tensor& dy, float eps, Tensor* dx, Tensor* dgamma, bool accumulate,
                  bool reference) {
  const RowSplit r = row_split(x);
  (reference ? cpu::rms_norm_bwd_ref : cpu::rms_norm_bwd)(x.data<float>(), dy.data<float>(), r.rows, r.dim, f32_or_null(gamma), eps,
                                                          f32_mut_or_null(dx), f32_mut_or_null(dgamma), accumulate);
}

void softmax_bwd(const Tensor& y, const Tensor& dy, float scale, Tensor& dx, bool reference) {
  const RowSplit r = row_split(y);
  (reference ? cpu::softmax_bwd_ref : cpu::softmax_bwd)(y.data<float>(), dy.data<float>(), r.rows, r.dim, scale, dx.data<float>());
}

void activation_bwd(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx, bool reference) {
  (reference ? cpu::activation_bwd_ref : cpu::activation_bwd)(act, x.data<float>(), dy.data<float>(), x.numel(), dx.data<float>());
}

void silu_mul_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, Tensor& dgate, Tensor& dup, bool reference) {
  (reference ? cpu::silu_mul_bwd_ref : cpu::silu_mul_bwd)(gate.data<float>(), up.data<float>(), dy.data<float>(), gate.numel(),
                                                          dgate.data<float>(), dup.data<float>());
}

void cross_entropy(const CrossEntropyArgs& args, bool reference) { (reference ? cpu::cross_entropy_ref : cpu::cross_entropy)(args); }

void column_sum(const Tensor& x, Tensor& out, bool accumulate, bool reference) {
  const RowSplit r = row_split(x);
  (reference ? cpu::column_sum_ref : cpu::column_sum)(x.data<float>(), r.rows, out.numel(), out.data<float>(), accumulate);
}

void embedding_bwd(const Tensor& dy, const Tensor& ids, Tensor& dtable, bool accumulate, bool reference) {
  (reference ? cpu::embedding_bwd_ref : cpu::embedding_bwd)(dy.data<float>(), ids.data<int32_t>(), ids.numel(), dtable.dim(1),
                                                            dtable.dim(0), dtable.data<float>(), accumulate);
}

void attention_prefill_bwd(const PrefillAttentionBwdArgs& args, bool reference) {
  (reference ? cpu::attention_prefill_bwd_ref : cpu::attention_prefill_bwd)(args);
}

void adamw(const AdamWArgs& args, bool reference) { (reference ? cpu::adamw_ref : cpu::adamw)(args); }

double sum_squares(const Tensor& x, bool reference) {
  return (reference ? cpu::sum_squares_ref : cpu::sum_squares)(x.data<float>(), x.numel());
}

// CPU tensors are host memory: the binding reads index tensors in place.
const int32_t* host_i32(const Tensor& t, std::vector<int32_t>& /*scratch*/) { return t.data<int32_t>(); }

}  // namespace tessera::backend

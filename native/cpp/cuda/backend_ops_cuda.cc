// The CUDA backend of the shared op bindings (binding/backend_ops.h): each op makes the backend's device current on
// this thread and enqueues its launcher (cuda_kernels.h) on the legacy default stream; `reference` selects the
// double-accumulating oracle kernels. Also the CUDA-only GEMM controls: the `kernel` option and cudaGemmKernel().
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "../binding/backend_ops.h"
#include "../binding/device.h"
#include "../binding/napi_util.h"
#include "cuda_kernels.h"
#include "device_cuda.h"

namespace tessera::gpu {
namespace {

// Makes this thread's current device the backend's (and initialises it); every launch goes through this first.
void ready() { ensure_current_device(); }

const float* f32_or_null(const Tensor* t) { return t ? t->data<float>() : nullptr; }

// The GEMM `kernel` option: auto (default) | reference | simt | skinny | tensor; `reference: true` wins over it.
GemmKernel gemm_kernel(const backend::GemmCall& call) {
  if (call.reference) return GemmKernel::Reference;
  if (!call.kernel) return GemmKernel::Auto;
  const std::string& s = *call.kernel;
  if (s == "auto") return GemmKernel::Auto;
  if (s == "reference") return GemmKernel::Reference;
  if (s == "simt") return GemmKernel::Simt;
  if (s == "skinny") return GemmKernel::Skinny;
  if (s == "tensor") return GemmKernel::Tensor;
  fail(ErrorCode::InvalidArgument, "gemm: option kernel must be auto, reference, simt, skinny or tensor, got \"" + s + "\"");
}

const char* gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::Reference: return "reference";
    case GemmKernel::Simt: return "simt";
    case GemmKernel::Skinny: return "skinny";
    case GemmKernel::Tensor: return "tensor";
    default: return "auto";
  }
}

// SGMV / BGMV: uploads the binding's group table (plus each group's partials offset) and row list, allocates the
// shrink partials, and launches. The temporaries are charged to the budget and freed on return; frees are
// stream-ordered (or synchronising), so the kernels queued before them still read valid memory.
void run_sgmv(const SgmvArgs& a, bool reference, bool expand) {
  ready();
  binding::Device& device = binding::device();
  const int64_t chunks = (a.h + kSgmvChunk - 1) / kSgmvChunk;
  std::vector<SgmvGpuGroup> groups(static_cast<size_t>(a.n_segments));
  int64_t parts = 0, max_rows = 0, max_r = 0, ids = 0;
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    groups[static_cast<size_t>(g)] = {s.w, s.r, s.row_begin, s.rows, parts, s.scale};
    if (!expand && !reference) parts += s.rows * s.r * chunks;
    max_rows = std::max(max_rows, s.rows);
    max_r = std::max(max_r, s.r);
    ids = std::max(ids, s.row_begin + s.rows);
  }
  if (groups.empty()) return;
  const int64_t table_bytes = static_cast<int64_t>(groups.size() * sizeof(SgmvGpuGroup));
  Tensor table = Tensor::empty(device.allocator(), DType::U8, {table_bytes});
  device.upload(table.raw(), groups.data(), table.nbytes());
  Tensor row_ids, partials;
  if (a.row_ids) {
    row_ids = Tensor::empty(device.allocator(), DType::I32, {ids});
    device.upload(row_ids.raw(), a.row_ids, row_ids.nbytes());
  }
  if (parts > 0) partials = Tensor::empty(device.allocator(), DType::F32, {parts});
  SgmvLaunch l;
  l.x = a.x;
  l.y = a.y;
  l.h = a.h;
  l.r_max = a.r_max;
  l.groups = table.data<SgmvGpuGroup>();
  l.n_groups = static_cast<int64_t>(groups.size());
  l.max_rows = max_rows;
  l.max_r = max_r;
  l.row_ids = a.row_ids ? row_ids.data<int32_t>() : nullptr;
  l.partials = parts > 0 ? partials.data<float>() : nullptr;
  if (expand) sgmv_expand(l, reference);
  else sgmv_shrink(l, reference);
}

}  // namespace
}  // namespace tessera::gpu

namespace tessera::backend {

using gpu::ready;

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, bool reference) {
  ready();
  gpu::binary(op, a.data<float>(), a.numel(), b.data<float>(), b.numel(), out.data<float>(), reference);
}

void scale(const Tensor& x, float s, Tensor& out, bool reference) {
  ready();
  gpu::scale(x.data<float>(), x.numel(), s, out.data<float>(), reference);
}

void activation(Activation act, const Tensor& x, Tensor& out, bool reference) {
  ready();
  gpu::activation(act, x.data<float>(), x.numel(), out.data<float>(), reference);
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, bool reference) {
  ready();
  gpu::silu_mul(gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>(), reference);
}

void layer_norm(const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps, Tensor& out, bool reference) {
  const RowSplit r = row_split(x);
  ready();
  gpu::layer_norm(x.data<float>(), r.rows, r.dim, gpu::f32_or_null(gamma), gpu::f32_or_null(beta), eps, out.data<float>(), reference);
}

void rms_norm(const Tensor& x, const Tensor* gamma, float eps, Tensor& out, bool reference) {
  const RowSplit r = row_split(x);
  ready();
  gpu::rms_norm(x.data<float>(), r.rows, r.dim, gpu::f32_or_null(gamma), eps, out.data<float>(), reference);
}

void softmax(const Tensor& x, float scale, Tensor& out, bool reference) {
  const RowSplit r = row_split(x);
  ready();
  gpu::softmax(x.data<float>(), r.rows, r.dim, scale, out.data<float>(), reference);
}

void rope(Tensor& x, const Tensor& positions, int64_t rot_dim, float base, bool inverse, bool reference) {
  ready();
  gpu::rope(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), rot_dim, positions.data<int32_t>(), base, inverse, reference);
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, bool reference) {
  ready();
  gpu::embedding(table.raw(), table.dtype, table.dim(1), ids.data<int32_t>(), ids.numel(), out.data<float>(), reference);
}

void gather_rows(const Tensor& src, const Tensor& idx, Tensor& out) {
  ready();
  gpu::gather_rows(src.raw(), row_bytes(src), idx.data<int32_t>(), idx.numel(), out.raw());
}

void scatter_rows(const Tensor& src, const Tensor& idx, const std::vector<int32_t>& host_idx, Tensor& dst) {
  ready();
  // Parallel writes to one row would race, so repeated destinations are reduced to their last source first.
  std::unordered_map<int32_t, int32_t> last;  // destination row -> last source row
  last.reserve(host_idx.size());
  for (size_t i = 0; i < host_idx.size(); ++i) last[host_idx[i]] = static_cast<int32_t>(i);
  if (last.size() == host_idx.size()) {
    gpu::scatter_rows(src.raw(), row_bytes(src), nullptr, idx.data<int32_t>(), idx.numel(), dst.raw());
    return;
  }
  std::vector<int32_t> pairs;  // [src rows..., dst rows...], in source order
  pairs.reserve(last.size() * 2);
  for (size_t i = 0; i < host_idx.size(); ++i)
    if (last[host_idx[i]] == static_cast<int32_t>(i)) pairs.push_back(static_cast<int32_t>(i));
  const int64_t kept = static_cast<int64_t>(pairs.size());
  for (int64_t i = 0; i < kept; ++i) pairs.push_back(host_idx[static_cast<size_t>(pairs[static_cast<size_t>(i)])]);
  // The scratch list is charged to the budget like any allocation.
  binding::Device& device = binding::device();
  Tensor list = Tensor::empty(device.allocator(), DType::I32, {2 * kept});
  device.upload(list.raw(), pairs.data(), list.nbytes());
  gpu::scatter_rows(src.raw(), row_bytes(src), list.data<int32_t>(), list.data<int32_t>() + kept, kept, dst.raw());
  device.synchronize();  // the kernel reads `list`, which is freed on return
}

void convert(const Tensor& src, Tensor& dst, bool reference) {
  ready();
  gpu::convert(src.raw(), src.dtype, dst.raw(), dst.dtype, src.numel(), reference);
}

void gemm(const GemmCall& call) {
  if (call.args.bf16_compute) fail(ErrorCode::Unsupported, "gemm: compute 'bf16' is a CPU mode (the CUDA backend computes in f32)");
  const gpu::GemmKernel kernel = gpu::gemm_kernel(call);
  ready();
  if (call.batched) gpu::gemm(call.args, call.batch, call.stride_a, call.stride_b, call.stride_c, kernel);
  else gpu::gemm(call.args, 1, 0, 0, 0, kernel);
}

void attention_prefill(const PrefillAttentionArgs& args, bool reference) {
  ready();
  gpu::attention_prefill(args, reference);
}

void attention_decode(const DecodeAttentionArgs& args, bool reference) {
  ready();
  gpu::attention_decode(args, reference);
}

void sgmv_shrink(const SgmvArgs& args, bool reference) { gpu::run_sgmv(args, reference, false); }

void sgmv_expand(const SgmvArgs& args, bool reference) { gpu::run_sgmv(args, reference, true); }

void pet_site(const PetSiteArgs& args, bool reference) {
  ready();
  gpu::pet_site(args, reference);
}

// ---------------------------------------------------------------- training
// Scratch (norm statistics, attention row statistics, sum-of-squares partials) is charged to the budget and freed on
// return; frees are stream-ordered (or synchronising), so the kernels queued before them still read valid memory.

namespace {
float* f32_mut_or_null(Tensor* t) { return t ? t->data<float>() : nullptr; }
Tensor scratch_bytes(int64_t bytes) { return Tensor::empty(binding::device().allocator(), DType::U8, {bytes}); }
}  // namespace

void layer_norm_bwd(const Tensor& x, const Tensor* gamma, const Tensor& dy, float eps, Tensor* dx, Tensor* dgamma, Tensor* dbeta,
                    bool accumulate, bool reference) {
  const RowSplit r = row_split(x);
  ready();
  Tensor stats = scratch_bytes(std::max<int64_t>(1, r.rows) * 2 * static_cast<int64_t>(sizeof(double)));
  gpu::layer_norm_bwd(x.data<float>(), dy.data<float>(), r.rows, x.last_dim(), gpu::f32_or_null(gamma), eps, f32_mut_or_null(dx),
                      f32_mut_or_null(dgamma), f32_mut_or_null(dbeta), accumulate, stats.data<double>(), reference);
}

void rms_norm_bwd(const Tensor& x, const Tensor* gamma, const Tensor& dy, float eps, Tensor* dx, Tensor* dgamma, bool accumulate,
                  bool reference) {
  const RowSplit r = row_split(x);
  ready();
  Tensor stats = scratch_bytes(std::max<int64_t>(1, r.rows) * 2 * static_cast<int64_t>(sizeof(double)));
  gpu::rms_norm_bwd(x.data<float>(), dy.data<float>(), r.rows, x.last_dim(), gpu::f32_or_null(gamma), eps, f32_mut_or_null(dx),
                    f32_mut_or_null(dgamma), accumulate, stats.data<double>(), reference);
}

void softmax_bwd(const Tensor& y, const Tensor& dy, float scale, Tensor& dx, bool reference) {
  const RowSplit r = row_split(y);
  ready();
  gpu::softmax_bwd(y.data<float>(), dy.data<float>(), r.rows, r.dim, scale, dx.data<float>(), reference);
}

void activation_bwd(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx, bool reference) {
  ready();
  gpu::activation_bwd(act, x.data<float>(), dy.data<float>(), x.numel(), dx.data<float>(), reference);
}

void silu_mul_bwd(const Tensor& gate, const Tensor& up, const Tensor& dy, Tensor& dgate, Tensor& dup, bool reference) {
  ready();
  gpu::silu_mul_bwd(gate.data<float>(), up.data<float>(), dy.data<float>(), gate.numel(), dgate.data<float>(), dup.data<float>(), reference);
}

void cross_entropy(const CrossEntropyArgs& args, bool reference) {
  ready();
  gpu::cross_entropy(args, reference);
}

void column_sum(const Tensor& x, Tensor& out, bool accumulate, bool reference) {
  const RowSplit r = row_split(x);
  ready();
  gpu::column_sum(x.data<float>(), r.rows, out.numel(), out.data<float>(), accumulate, reference);
}

void embedding_bwd(const Tensor& dy, const Tensor& ids, Tensor& dtable, bool accumulate, bool reference) {
  ready();
  gpu::embedding_bwd(dy.data<float>(), ids.data<int32_t>(), ids.numel(), dtable.dim(1), dtable.dim(0), dtable.data<float>(), accumulate,
                     reference);
}

void attention_prefill_bwd(const PrefillAttentionBwdArgs& args, bool reference) {
  ready();
  const int64_t rows = args.batch * args.seq * args.n_heads;
  const int64_t width = reference ? static_cast<int64_t>(sizeof(double)) : static_cast<int64_t>(sizeof(float));
  Tensor lse = scratch_bytes(std::max<int64_t>(1, rows) * width), delta = scratch_bytes(std::max<int64_t>(1, rows) * width);
  PrefillAttentionBwdArgs a = args;
  a.row_lse = static_cast<float*>(lse.raw());
  a.row_delta = static_cast<float*>(delta.raw());
  gpu::attention_prefill_bwd(a, reference);
}

void adamw(const AdamWArgs& args, bool reference) {
  ready();
  gpu::adamw(args, reference);
}

// The chunk partials come back to the host and are summed there in chunk order (a device-to-host copy: waits).
double sum_squares(const Tensor& x, bool reference) {
  const int64_t count = gpu::sum_squares_partials_count(x.numel(), reference);
  if (count == 0) return 0.0;
  ready();
  binding::Device& device = binding::device();
  Tensor partials = scratch_bytes(count * static_cast<int64_t>(sizeof(double)));
  gpu::sum_squares_partials(x.data<float>(), x.numel(), partials.data<double>(), reference);
  std::vector<double> host(static_cast<size_t>(count));
  device.download(host.data(), partials.raw(), static_cast<uint64_t>(partials.nbytes()));
  double s = 0;
  for (double p : host) s += p;
  return s;
}

// Index tensors live in device memory: copied to the host for the binding's checks (waits for queued work).
const int32_t* host_i32(const Tensor& t, std::vector<int32_t>& scratch) {
  scratch = read_indices(t);
  return scratch.data();
}

}  // namespace tessera::backend

using namespace tessera;
using namespace tessera::binding;

TESSERA_REGISTER_OPS(cuda_gemm_kernel) {
  // cudaGemmKernel(m, n, k) -> the kernel `auto` runs for these sizes (tests use it to know which path they hit).
  export_fn(env, exports, "cudaGemmKernel", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const int64_t m = info[0].As<Napi::Number>().Int64Value(), n = info[1].As<Napi::Number>().Int64Value(),
                  k = info[2].As<Napi::Number>().Int64Value();
    return Napi::String::New(info.Env(), gpu::gemm_kernel_name(gpu::gemm_auto_kernel(m, n, k)));
  });
}

// N-API bindings for the CUDA GEMM: gemm(a, b, c, opts) and gemmBatched(a, b, c, opts), the same contract as the
// CPU addon (binding.ts). CUDA-only extra option `kernel`: "auto" (default) | "tensor" | "simt" | "skinny" |
// "reference" forces one kernel so tests can check each path; `reference: true` is the same as "reference".
#include <string>

#include "../binding/napi_util.h"
#include "bind_common.h"
#include "cuda_kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

gpu::GemmKernel kernel_opt(const Napi::Object& opts) {
  if (bool_opt(opts, "reference", false)) return gpu::GemmKernel::Reference;
  Napi::Value v = opts.Get("kernel");
  if (v.IsUndefined() || v.IsNull()) return gpu::GemmKernel::Auto;
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "auto") return gpu::GemmKernel::Auto;
  if (s == "reference") return gpu::GemmKernel::Reference;
  if (s == "simt") return gpu::GemmKernel::Simt;
  if (s == "skinny") return gpu::GemmKernel::Skinny;
  if (s == "tensor") return gpu::GemmKernel::Tensor;
  fail(ErrorCode::InvalidArgument, "gemm: option kernel must be auto, reference, simt, skinny or tensor, got \"" + s + "\"");
}

const char* kernel_name(gpu::GemmKernel k) {
  switch (k) {
    case gpu::GemmKernel::Reference: return "reference";
    case gpu::GemmKernel::Simt: return "simt";
    case gpu::GemmKernel::Skinny: return "skinny";
    case gpu::GemmKernel::Tensor: return "tensor";
    default: return "auto";
  }
}

// The matrix dims of one GEMM, from the (last two) dims of a and b and the transpose flags.
struct GemmDims {
  int64_t m, n, k;
};

GemmDims gemm_dims(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const char* op) {
  const size_t ra = a.shape.size(), rb = b.shape.size();
  const int64_t a0 = a.shape[ra - 2], a1 = a.shape[ra - 1], b0 = b.shape[rb - 2], b1 = b.shape[rb - 1];
  const GemmDims d{trans_a ? a1 : a0, trans_b ? b0 : b1, trans_a ? a0 : a1};
  const int64_t kb = trans_b ? b1 : b0;
  if (d.k != kb)
    fail(ErrorCode::ShapeMismatch, std::string(op) + ": a " + shape_str(a.shape) + (trans_a ? " (transposed)" : "") + " and b " +
                                       shape_str(b.shape) + (trans_b ? " (transposed)" : "") + " disagree on k: " +
                                       std::to_string(d.k) + " vs " + std::to_string(kb));
  return d;
}

struct Common {
  gpu::GemmArgs args;
  gpu::GemmKernel kernel;
};

// Parses the options and checks dtypes; shapes are checked by the callers.
Common common(const Napi::CallbackInfo& info, Tensor& a, Tensor& b, Tensor& c, const char* op) {
  const Napi::Object opts = object_arg(info, 3);
  Common r;
  r.args.trans_a = bool_opt(opts, "transA", false);
  r.args.trans_b = bool_opt(opts, "transB", false);
  r.args.alpha = static_cast<float>(number_opt(opts, "alpha", 1.0));
  r.args.beta = static_cast<float>(number_opt(opts, "beta", 0.0));
  r.kernel = kernel_opt(opts);
  expect_dtype(a, DType::F32, "a");
  gpu::expect_float_dtype(b, op, "b");
  expect_dtype(c, DType::F32, "c");
  r.args.a = a.data<float>();
  r.args.b = b.raw();
  r.args.b_dtype = b.dtype;
  r.args.c = c.data<float>();
  if (Tensor* bias = optional_tensor_arg(opts.Get("bias"), "bias")) {
    expect_dtype(*bias, DType::F32, "bias");
    r.args.bias = bias->data<float>();
  }
  return r;
}

void check_bias(const Napi::CallbackInfo& info, int64_t n) {
  if (Tensor* bias = optional_tensor_arg(object_arg(info, 3).Get("bias"), "bias")) expect_shape(*bias, {n}, "bias");
}

}  // namespace

TESSERA_REGISTER_OPS(cuda_gemm) {
  // gemm(a, b, c, {transA, transB, alpha, beta, bias}): a [m,k] or [k,m]; b [k,n] or [n,k]; c [m,n]; bias [n].
  export_fn(env, exports, "gemm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& a = tensor_arg(info[0], "a");
    Tensor& b = tensor_arg(info[1], "b");
    Tensor& c = tensor_arg(info[2], "c");
    Common r = common(info, a, b, c, "gemm");
    expect_rank(a, 2, "a");
    expect_rank(b, 2, "b");
    const GemmDims d = gemm_dims(a, b, r.args.trans_a, r.args.trans_b, "gemm");
    expect_shape(c, {d.m, d.n}, "c");
    check_bias(info, d.n);
    r.args.m = d.m;
    r.args.n = d.n;
    r.args.k = d.k;
    r.args.lda = a.shape[1];
    r.args.ldb = b.shape[1];
    r.args.ldc = d.n;
    gpu::ready();
    gpu::gemm(r.args, 1, 0, 0, 0, r.kernel);
    return info.Env().Undefined();
  });

  // gemmBatched(a, b, c, opts): a [batch,m,k] (or [batch,k,m]); b [batch,k,n] / [batch,n,k], or rank 2 shared by
  // every batch entry; c [batch,m,n]; bias [n].
  export_fn(env, exports, "gemmBatched", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& a = tensor_arg(info[0], "a");
    Tensor& b = tensor_arg(info[1], "b");
    Tensor& c = tensor_arg(info[2], "c");
    Common r = common(info, a, b, c, "gemmBatched");
    expect_rank(a, 3, "a");
    if (b.shape.size() != 2 && b.shape.size() != 3)
      fail(ErrorCode::ShapeMismatch, "gemmBatched: b must have rank 2 (shared) or 3, got " + shape_str(b.shape));
    const int64_t batch = a.shape[0];
    const bool shared_b = b.shape.size() == 2;
    if (!shared_b && b.shape[0] != batch)
      fail(ErrorCode::ShapeMismatch, "gemmBatched: a " + shape_str(a.shape) + " and b " + shape_str(b.shape) + " differ in batch size");
    const GemmDims d = gemm_dims(a, b, r.args.trans_a, r.args.trans_b, "gemmBatched");
    expect_shape(c, {batch, d.m, d.n}, "c");
    check_bias(info, d.n);
    r.args.m = d.m;
    r.args.n = d.n;
    r.args.k = d.k;
    r.args.lda = a.shape[2];
    r.args.ldb = b.shape[b.shape.size() - 1];
    r.args.ldc = d.n;
    gpu::ready();
    gpu::gemm(r.args, batch, d.m * d.k, shared_b ? 0 : d.k * d.n, d.m * d.n, r.kernel);
    return info.Env().Undefined();
  });

  // cudaGemmKernel(m, n, k) -> the kernel `auto` runs for these sizes (tests use it to know which path they hit).
  export_fn(env, exports, "cudaGemmKernel", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const int64_t m = info[0].As<Napi::Number>().Int64Value(), n = info[1].As<Napi::Number>().Int64Value(),
                  k = info[2].As<Napi::Number>().Int64Value();
    return Napi::String::New(info.Env(), kernel_name(gpu::gemm_auto_kernel(m, n, k)));
  });
}

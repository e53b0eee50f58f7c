// N-API bindings for GEMM: gemm(a, b, c, opts) and gemmBatched(a, b, c, opts), opts = {transA, transB, alpha,
// beta, bias, reference, kernel, compute ('f32' | 'bf16')}. Shared by both addons: validation here, the kernel call in
// backend_ops_{cpu,cuda}.cc (`kernel` is a backend-specific choice the CUDA backend interprets).
#include <string>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

struct GemmOpts {
  bool trans_a = false, trans_b = false, reference = false, bf16_compute = false;
  float alpha = 1.0f, beta = 0.0f;
  Tensor* bias = nullptr;
  std::optional<std::string> kernel;
};

GemmOpts parse_opts(const Napi::CallbackInfo& info, size_t index) {
  const Napi::Object o = object_arg(info, index);
  GemmOpts g;
  g.trans_a = bool_opt(o, "transA", false);
  g.trans_b = bool_opt(o, "transB", false);
  g.reference = reference_opt(o);
  g.alpha = static_cast<float>(number_opt(o, "alpha", 1.0));
  g.beta = static_cast<float>(number_opt(o, "beta", 0.0));
  g.bias = optional_tensor_arg(o.Get("bias"), "bias");
  const Napi::Value compute = o.Get("compute");
  if (!compute.IsUndefined() && !compute.IsNull()) {
    const std::string mode = compute.IsString() ? compute.As<Napi::String>().Utf8Value() : "";
    if (mode != "f32" && mode != "bf16") fail(ErrorCode::InvalidArgument, "gemm: option compute must be 'f32' or 'bf16'");
    g.bf16_compute = mode == "bf16";
  }
  const Napi::Value kernel = o.Get("kernel");
  if (!kernel.IsUndefined() && !kernel.IsNull()) g.kernel = kernel.IsString() ? kernel.As<Napi::String>().Utf8Value() : "";
  return g;
}

// Checks dtypes, bias and aliasing (the shapes are checked by the caller); fills one GEMM's args. c is dense: ldc = n.
backend::GemmCall make_call(const char* op, Tensor& a, Tensor& b, Tensor& c, const GemmOpts& o, int64_t m, int64_t n, int64_t k,
                            int64_t lda, int64_t ldb) {
  expect_dtype(a, DType::F32, "a");
  if (!is_float_dtype(b.dtype))
    fail(ErrorCode::DTypeMismatch, std::string(op) + ": b " + shape_str(b.shape) + " must be f32, f16 or bf16, got " + dtype_name(b.dtype));
  expect_dtype(c, DType::F32, "c");
  if (o.bias) {
    expect_dtype(*o.bias, DType::F32, "bias");
    if (o.bias->shape.size() != 1 || o.bias->shape[0] != n)
      fail(ErrorCode::ShapeMismatch, std::string(op) + ": bias " + shape_str(o.bias->shape) + " must be [" + std::to_string(n) +
                                         "] for c " + shape_str(c.shape));
  }
  // C is written while A, B and bias are read; an overlapping output would corrupt its own inputs.
  if (bytes_overlap(c, a) || bytes_overlap(c, b) || (o.bias && bytes_overlap(c, *o.bias)))
    fail(ErrorCode::InvalidArgument, std::string(op) + ": c " + shape_str(c.shape) + " overlaps an input");
  backend::GemmCall call;
  GemmArgs& g = call.args;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = n;
  g.a = a.data<float>();
  g.b = b.raw();
  g.b_dtype = b.dtype;
  g.c = c.data<float>();
  g.trans_a = o.trans_a;
  g.trans_b = o.trans_b;
  g.alpha = o.alpha;
  g.beta = o.beta;
  g.bias = o.bias ? o.bias->data<float>() : nullptr;
  g.bf16_compute = o.bf16_compute;
  call.reference = o.reference;
  call.kernel = o.kernel;
  return call;
}

[[noreturn]] void k_mismatch(const char* op, const Tensor& a, const Tensor& b, const GemmOpts& o, int64_t ka, int64_t kb) {
  fail(ErrorCode::ShapeMismatch, std::string(op) + ": a " + shape_str(a.shape) + (o.trans_a ? " (transA)" : "") + " and b " +
                                     shape_str(b.shape) + (o.trans_b ? " (transB)" : "") + " disagree on k: " + std::to_string(ka) +
                                     " vs " + std::to_string(kb));
}

}  // namespace

TESSERA_REGISTER_OPS(gemm) {
  // gemm(a, b, c, opts): c [m, n] = alpha * op(a) @ op(b) + beta * c + bias
  export_fn(env, exports, "gemm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& a = tensor_arg(info[0], "a");
    Tensor& b = tensor_arg(info[1], "b");
    Tensor& c = tensor_arg(info[2], "c");
    const GemmOpts o = parse_opts(info, 3);
    expect_rank(a, 2, "a");
    expect_rank(b, 2, "b");
    expect_rank(c, 2, "c");
    const int64_t m = o.trans_a ? a.dim(1) : a.dim(0), k = o.trans_a ? a.dim(0) : a.dim(1);
    const int64_t kb = o.trans_b ? b.dim(1) : b.dim(0), n = o.trans_b ? b.dim(0) : b.dim(1);
    if (k != kb) k_mismatch("gemm", a, b, o, k, kb);
    expect_shape(c, {m, n}, "c");
    backend::gemm(make_call("gemm", a, b, c, o, m, n, k, a.dim(1), b.dim(1)));
    return info.Env().Undefined();
  });

  // gemmBatched(a, b, c, opts): a [batch, m, k] ([batch, k, m] with transA); b [batch, ...] or rank 2 (shared by
  // every batch entry); c [batch, m, n].
  export_fn(env, exports, "gemmBatched", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& a = tensor_arg(info[0], "a");
    Tensor& b = tensor_arg(info[1], "b");
    Tensor& c = tensor_arg(info[2], "c");
    const GemmOpts o = parse_opts(info, 3);
    expect_rank(a, 3, "a");
    expect_rank(c, 3, "c");
    if (b.shape.size() != 2 && b.shape.size() != 3)
      fail(ErrorCode::ShapeMismatch, "gemmBatched: b must have rank 2 (shared) or 3, got shape " + shape_str(b.shape));
    const bool shared = b.shape.size() == 2;
    const int64_t batch = a.dim(0);
    if (!shared && b.dim(0) != batch)
      fail(ErrorCode::ShapeMismatch, "gemmBatched: a " + shape_str(a.shape) + " and b " + shape_str(b.shape) +
                                         " disagree on batch: " + std::to_string(batch) + " vs " + std::to_string(b.dim(0)));
    const size_t bo = shared ? 0 : 1;  // index of b's first matrix dimension
    const int64_t m = o.trans_a ? a.dim(2) : a.dim(1), k = o.trans_a ? a.dim(1) : a.dim(2);
    const int64_t kb = o.trans_b ? b.dim(bo + 1) : b.dim(bo), n = o.trans_b ? b.dim(bo) : b.dim(bo + 1);
    if (k != kb) k_mismatch("gemmBatched", a, b, o, k, kb);
    expect_shape(c, {batch, m, n}, "c");
    backend::GemmCall call = make_call("gemmBatched", a, b, c, o, m, n, k, a.dim(2), b.dim(bo + 1));
    call.batched = true;
    call.batch = batch;
    call.stride_a = m * k;
    call.stride_b = shared ? 0 : k * n;
    call.stride_c = m * n;
    backend::gemm(call);
    return info.Env().Undefined();
  });
}

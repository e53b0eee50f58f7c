// N-API bindings for the CUDA elementwise group: binary (add/mul with row broadcast), scale, activations, siluMul.
// Validation mirrors cpu/bind_elementwise.cc exactly, so both addons accept and reject the same calls.
#include <string>

#include "../binding/napi_util.h"
#include "bind_common.h"
#include "cuda_kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

gpu::Activation activation_arg(const Napi::Value& v) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "gelu_erf") return gpu::Activation::GeluErf;
  if (s == "gelu_tanh") return gpu::Activation::GeluTanh;
  if (s == "silu") return gpu::Activation::Silu;
  fail(ErrorCode::InvalidArgument, "activation must be gelu_erf, gelu_tanh or silu, got \"" + s + "\"");
}

void expect_same_numel(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
  if (a.numel() != b.numel())
    fail(ErrorCode::ShapeMismatch, std::string(an) + " " + shape_str(a.shape) + " and " + bn + " " + shape_str(b.shape) +
                                       " differ in element count");
}

}  // namespace

TESSERA_REGISTER_OPS(cuda_elementwise) {
  // binary(op, a, b, out, {reference}): b has a's element count, or is one row broadcast over a's rows.
  export_fn(env, exports, "binary", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string name = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
    if (name != "add" && name != "mul") fail(ErrorCode::InvalidArgument, "binary op must be add or mul, got \"" + name + "\"");
    const gpu::BinaryOp op = name == "add" ? gpu::BinaryOp::Add : gpu::BinaryOp::Mul;
    Tensor& a = tensor_arg(info[1], "a");
    Tensor& b = tensor_arg(info[2], "b");
    Tensor& out = tensor_arg(info[3], "out");
    expect_dtype(a, DType::F32, "a");
    expect_dtype(b, DType::F32, "b");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(a, out, "a", "out");
    const int64_t n = a.numel(), bn = b.numel();
    const bool ok = bn == n || (bn > 0 && n % bn == 0 && a.last_dim() == bn);
    if (!ok) fail(ErrorCode::ShapeMismatch, "binary " + name + ": b " + shape_str(b.shape) + " neither matches a " + shape_str(a.shape) + " nor is one row of it");
    gpu::ready();
    gpu::binary(op, a.data<float>(), n, b.data<float>(), bn, out.data<float>(), gpu::use_reference(info, 4));
    return info.Env().Undefined();
  });

  export_fn(env, exports, "scale", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    const float s = static_cast<float>(info[1].As<Napi::Number>().DoubleValue());
    Tensor& out = tensor_arg(info[2], "out");
    expect_dtype(x, DType::F32, "x");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(x, out, "x", "out");
    gpu::ready();
    gpu::scale(x.data<float>(), x.numel(), s, out.data<float>(), gpu::use_reference(info, 3));
    return info.Env().Undefined();
  });

  export_fn(env, exports, "activation", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const gpu::Activation act = activation_arg(info[0]);
    Tensor& x = tensor_arg(info[1], "x");
    Tensor& out = tensor_arg(info[2], "out");
    expect_dtype(x, DType::F32, "x");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(x, out, "x", "out");
    gpu::ready();
    gpu::activation(act, x.data<float>(), x.numel(), out.data<float>(), gpu::use_reference(info, 3));
    return info.Env().Undefined();
  });

  export_fn(env, exports, "siluMul", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& gate = tensor_arg(info[0], "gate");
    Tensor& up = tensor_arg(info[1], "up");
    Tensor& out = tensor_arg(info[2], "out");
    expect_dtype(gate, DType::F32, "gate");
    expect_dtype(up, DType::F32, "up");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(gate, up, "gate", "up");
    expect_same_numel(gate, out, "gate", "out");
    gpu::ready();
    gpu::silu_mul(gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>(), gpu::use_reference(info, 3));
    return info.Env().Undefined();
  });
}

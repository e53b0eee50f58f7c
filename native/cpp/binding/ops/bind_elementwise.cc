// N-API bindings for the elementwise group: binary (add/mul with row broadcast), scale, activations, siluMul.
// Shared by both addons: validation here, the kernel call in backend_ops_{cpu,cuda}.cc.
#include <string>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

Activation activation_arg(const Napi::Value& v) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "gelu_erf") return Activation::GeluErf;
  if (s == "gelu_tanh") return Activation::GeluTanh;
  if (s == "silu") return Activation::Silu;
  fail(ErrorCode::InvalidArgument, "activation must be gelu_erf, gelu_tanh or silu, got \"" + s + "\"");
}

void expect_same_numel(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
  if (a.numel() != b.numel())
    fail(ErrorCode::ShapeMismatch, std::string(an) + " " + shape_str(a.shape) + " and " + bn + " " + shape_str(b.shape) +
                                       " differ in element count");
}

// x and out: f32 with the same element count (out may be x: these ops run in place).
void expect_unary(const Tensor& x, const Tensor& out, const char* xn) {
  expect_dtype(x, DType::F32, xn);
  expect_dtype(out, DType::F32, "out");
  expect_same_numel(x, out, xn, "out");
}

}  // namespace

TESSERA_REGISTER_OPS(elementwise) {
  // binary(op, a, b, out, {reference}): b has a's element count, or is one row broadcast over a's rows.
  export_fn(env, exports, "binary", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string name = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
    if (name != "add" && name != "mul") fail(ErrorCode::InvalidArgument, "binary op must be add or mul, got \"" + name + "\"");
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
    backend::binary(name == "add" ? BinaryOp::Add : BinaryOp::Mul, a, b, out, reference_opt(object_arg(info, 4)));
    return info.Env().Undefined();
  });

  // scale(x, s, out, {reference}): out = x * s.
  export_fn(env, exports, "scale", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    const float s = static_cast<float>(info[1].As<Napi::Number>().DoubleValue());
    Tensor& out = tensor_arg(info[2], "out");
    expect_unary(x, out, "x");
    backend::scale(x, s, out, reference_opt(object_arg(info, 3)));
    return info.Env().Undefined();
  });

  // activation(act, x, out, {reference})
  export_fn(env, exports, "activation", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const Activation act = activation_arg(info[0]);
    Tensor& x = tensor_arg(info[1], "x");
    Tensor& out = tensor_arg(info[2], "out");
    expect_unary(x, out, "x");
    backend::activation(act, x, out, reference_opt(object_arg(info, 3)));
    return info.Env().Undefined();
  });

  // siluMul(gate, up, out, {reference}): out = silu(gate) * up (SwiGLU).
  export_fn(env, exports, "siluMul", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& gate = tensor_arg(info[0], "gate");
    Tensor& up = tensor_arg(info[1], "up");
    Tensor& out = tensor_arg(info[2], "out");
    expect_dtype(gate, DType::F32, "gate");
    expect_dtype(up, DType::F32, "up");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(gate, up, "gate", "up");
    expect_same_numel(gate, out, "gate", "out");
    backend::silu_mul(gate, up, out, reference_opt(object_arg(info, 3)));
    return info.Env().Undefined();
  });
}

// N-API bindings for the elementwise group: binary (add/mul with row broadcast), scale, activations, siluMul.
#include "../binding/napi_util.h"
#include "kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

bool use_ref(const Napi::CallbackInfo& info, size_t opts_index) { return bool_opt(object_arg(info, opts_index), "reference", false); }

cpu::Activation activation_arg(const Napi::Value& v) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "gelu_erf") return cpu::Activation::GeluErf;
  if (s == "gelu_tanh") return cpu::Activation::GeluTanh;
  if (s == "silu") return cpu::Activation::Silu;
  fail(ErrorCode::InvalidArgument, "activation must be gelu_erf, gelu_tanh or silu, got \"" + s + "\"");
}

void expect_same_numel(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
  if (a.numel() != b.numel())
    fail(ErrorCode::ShapeMismatch, std::string(an) + " " + shape_str(a.shape) + " and " + bn + " " + shape_str(b.shape) +
                                       " differ in element count");
}

}  // namespace

TESSERA_REGISTER_OPS(elementwise) {
  // binary(op, a, b, out, {reference}): b has a's element count, or is one row broadcast over a's rows.
  export_fn(env, exports, "binary", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string name = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
    if (name != "add" && name != "mul") fail(ErrorCode::InvalidArgument, "binary op must be add or mul, got \"" + name + "\"");
    const cpu::BinaryOp op = name == "add" ? cpu::BinaryOp::Add : cpu::BinaryOp::Mul;
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
    if (use_ref(info, 4)) cpu::binary_ref(op, a.data<float>(), n, b.data<float>(), bn, out.data<float>());
    else cpu::binary(op, a.data<float>(), n, b.data<float>(), bn, out.data<float>());
    return info.Env().Undefined();
  });

  export_fn(env, exports, "scale", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    const float s = static_cast<float>(info[1].As<Napi::Number>().DoubleValue());
    Tensor& out = tensor_arg(info[2], "out");
    expect_dtype(x, DType::F32, "x");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(x, out, "x", "out");
    if (use_ref(info, 3)) cpu::scale_ref(x.data<float>(), x.numel(), s, out.data<float>());
    else cpu::scale(x.data<float>(), x.numel(), s, out.data<float>());
    return info.Env().Undefined();
  });

  export_fn(env, exports, "activation", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const cpu::Activation act = activation_arg(info[0]);
    Tensor& x = tensor_arg(info[1], "x");
    Tensor& out = tensor_arg(info[2], "out");
    expect_dtype(x, DType::F32, "x");
    expect_dtype(out, DType::F32, "out");
    expect_same_numel(x, out, "x", "out");
    if (use_ref(info, 3)) cpu::activation_ref(act, x.data<float>(), x.numel(), out.data<float>());
    else cpu::activation(act, x.data<float>(), x.numel(), out.data<float>());
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
    if (use_ref(info, 3)) cpu::silu_mul_ref(gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>());
    else cpu::silu_mul(gate.data<float>(), up.data<float>(), gate.numel(), out.data<float>());
    return info.Env().Undefined();
  });
}

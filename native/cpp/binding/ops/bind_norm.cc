// N-API bindings for the row-wise group: layerNorm, rmsNorm, softmax (f32, over the last dimension).
// Shared by both addons: validation here, the kernel call in backend_ops_{cpu,cuda}.cc.
#include <cmath>
#include <string>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

// x is f32 of rank >= 1, viewed as [rows, dim] with dim its last dimension; out must have x's shape and may be
// x itself (in place).
void expect_rows(const std::string& op, const Tensor& x, const Tensor& out) {
  expect_dtype(x, DType::F32, "x");
  expect_dtype(out, DType::F32, "out");
  if (x.shape.empty()) fail(ErrorCode::ShapeMismatch, op + ": x must have rank >= 1, got shape []");
  expect_shape(out, x.shape, "out");
  expect_in_place_or_disjoint(op, out, "out", x, "x");
}

// gamma / beta: null, or f32 [dim] not overlapping out.
void expect_row_param(const std::string& op, const Tensor* p, const char* name, const Tensor& x, const Tensor& out) {
  if (!p) return;
  expect_dtype(*p, DType::F32, name);
  expect_shape(*p, {x.last_dim()}, name);
  expect_disjoint(op, out, "out", *p, name);
}

}  // namespace

TESSERA_REGISTER_OPS(norm) {
  // layerNorm(x, gamma | null, beta | null, out, {eps, reference})
  export_fn(env, exports, "layerNorm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor* gamma = optional_tensor_arg(info[1], "gamma");
    Tensor* beta = optional_tensor_arg(info[2], "beta");
    Tensor& out = tensor_arg(info[3], "out");
    const Napi::Object opts = object_arg(info, 4);
    expect_rows("layerNorm", x, out);
    expect_row_param("layerNorm", gamma, "gamma", x, out);
    expect_row_param("layerNorm", beta, "beta", x, out);
    const float eps = static_cast<float>(finite_opt(opts, "eps", 1e-5, 0.0, false, "layerNorm"));
    backend::layer_norm(x, gamma, beta, eps, out, reference_opt(opts));
    return info.Env().Undefined();
  });

  // rmsNorm(x, gamma | null, out, {eps, reference})
  export_fn(env, exports, "rmsNorm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor* gamma = optional_tensor_arg(info[1], "gamma");
    Tensor& out = tensor_arg(info[2], "out");
    const Napi::Object opts = object_arg(info, 3);
    expect_rows("rmsNorm", x, out);
    expect_row_param("rmsNorm", gamma, "gamma", x, out);
    const float eps = static_cast<float>(finite_opt(opts, "eps", 1e-6, 0.0, false, "rmsNorm"));
    backend::rms_norm(x, gamma, eps, out, reference_opt(opts));
    return info.Env().Undefined();
  });

  // softmax(x, out, {scale, reference}): softmax(x * scale) over the last dimension.
  export_fn(env, exports, "softmax", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& out = tensor_arg(info[1], "out");
    const Napi::Object opts = object_arg(info, 2);
    expect_rows("softmax", x, out);
    const double scale = number_opt(opts, "scale", 1.0);
    if (!std::isfinite(scale)) fail(ErrorCode::InvalidArgument, "softmax: scale must be finite, got " + number_str(scale));
    backend::softmax(x, static_cast<float>(scale), out, reference_opt(opts));
    return info.Env().Undefined();
  });
}

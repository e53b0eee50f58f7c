// N-API bindings for the CUDA row-wise ops over the last dimension: layerNorm, rmsNorm, softmax.
#include <cmath>
#include <string>

#include "../binding/napi_util.h"
#include "bind_common.h"
#include "cuda_kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

struct Rows {
  int64_t rows, dim;
};

// x: f32, rank >= 1, normalised over its last dimension; out: f32 with x's shape.
Rows rows_of(const Tensor& x, const Tensor& out, const char* op) {
  expect_dtype(x, DType::F32, "x");
  expect_dtype(out, DType::F32, "out");
  if (x.shape.empty()) fail(ErrorCode::ShapeMismatch, std::string(op) + ": x must have rank >= 1, got a scalar");
  expect_shape(out, x.shape, "out");
  const int64_t dim = x.last_dim();
  return {dim == 0 ? 0 : x.numel() / dim, dim};
}

// gamma/beta: null, or f32 [dim].
const float* row_param(const Napi::Value& v, const char* what, int64_t dim) {
  Tensor* t = optional_tensor_arg(v, what);
  if (!t) return nullptr;
  expect_dtype(*t, DType::F32, what);
  expect_shape(*t, {dim}, what);
  return t->data<float>();
}

float eps_opt(const Napi::Object& opts, const char* op) {
  const double eps = number_opt(opts, "eps", 1e-5);
  if (!(eps >= 0) || !std::isfinite(eps)) fail(ErrorCode::InvalidArgument, std::string(op) + ": eps must be a finite number >= 0");
  return static_cast<float>(eps);
}

}  // namespace

TESSERA_REGISTER_OPS(cuda_norm) {
  // layerNorm(x, gamma | null, beta | null, out, {eps})
  export_fn(env, exports, "layerNorm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& out = tensor_arg(info[3], "out");
    const Rows r = rows_of(x, out, "layerNorm");
    const float* gamma = row_param(info[1], "gamma", r.dim);
    const float* beta = row_param(info[2], "beta", r.dim);
    const Napi::Object opts = object_arg(info, 4);
    const float eps = eps_opt(opts, "layerNorm");
    gpu::ready();
    gpu::layer_norm(x.data<float>(), r.rows, r.dim, gamma, beta, eps, out.data<float>(), bool_opt(opts, "reference", false));
    return info.Env().Undefined();
  });

  // rmsNorm(x, gamma | null, out, {eps})
  export_fn(env, exports, "rmsNorm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& out = tensor_arg(info[2], "out");
    const Rows r = rows_of(x, out, "rmsNorm");
    const float* gamma = row_param(info[1], "gamma", r.dim);
    const Napi::Object opts = object_arg(info, 3);
    const float eps = eps_opt(opts, "rmsNorm");
    gpu::ready();
    gpu::rms_norm(x.data<float>(), r.rows, r.dim, gamma, eps, out.data<float>(), bool_opt(opts, "reference", false));
    return info.Env().Undefined();
  });

  // softmax(x, out, {scale}): softmax(x * scale) over each row.
  export_fn(env, exports, "softmax", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& out = tensor_arg(info[1], "out");
    const Rows r = rows_of(x, out, "softmax");
    const Napi::Object opts = object_arg(info, 2);
    const double scale = number_opt(opts, "scale", 1.0);
    if (!std::isfinite(scale)) fail(ErrorCode::InvalidArgument, "softmax: scale must be finite");
    gpu::ready();
    gpu::softmax(x.data<float>(), r.rows, r.dim, static_cast<float>(scale), out.data<float>(), bool_opt(opts, "reference", false));
    return info.Env().Undefined();
  });
}

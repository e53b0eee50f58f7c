// N-API bindings for the row-wise group: layerNorm, rmsNorm, softmax (f32, over the last dimension).
#include "../binding/napi_util.h"
#include "bind_checks.h"
#include "kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

struct Rows {
  int64_t rows = 0, dim = 0;
};

// x is f32 of rank >= 1, viewed as [rows, dim] with dim its last dimension; out must have x's shape and may be
// x itself (in place).
Rows row_args(const std::string& op, const Tensor& x, const Tensor& out) {
  expect_dtype(x, DType::F32, "x");
  expect_dtype(out, DType::F32, "out");
  if (x.shape.empty()) fail(ErrorCode::ShapeMismatch, op + ": x must have rank >= 1, got shape []");
  expect_shape(out, x.shape, "out");
  expect_in_place_or_disjoint(op, out, "out", x, "x");
  const int64_t dim = x.last_dim();
  return {dim == 0 ? 0 : x.numel() / dim, dim};
}

// gamma / beta: null, or f32 [dim] not overlapping out.
const float* row_param(const std::string& op, const Tensor* p, const char* name, const Rows& r, const Tensor& out) {
  if (!p) return nullptr;
  expect_dtype(*p, DType::F32, name);
  expect_shape(*p, {r.dim}, name);
  expect_disjoint(op, out, "out", *p, name);
  return p->data<float>();
}

bool use_ref(const Napi::Object& opts) { return bool_opt(opts, "reference", false); }

}  // namespace

TESSERA_REGISTER_OPS(norm) {
  // layerNorm(x, gamma | null, beta | null, out, {eps, reference})
  export_fn(env, exports, "layerNorm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor* gamma = optional_tensor_arg(info[1], "gamma");
    Tensor* beta = optional_tensor_arg(info[2], "beta");
    Tensor& out = tensor_arg(info[3], "out");
    const Napi::Object opts = object_arg(info, 4);
    const Rows r = row_args("layerNorm", x, out);
    const float* g = row_param("layerNorm", gamma, "gamma", r, out);
    const float* b = row_param("layerNorm", beta, "beta", r, out);
    const float eps = static_cast<float>(finite_opt(opts, "eps", 1e-5, 0.0, false, "layerNorm"));
    if (use_ref(opts)) cpu::layer_norm_ref(x.data<float>(), r.rows, r.dim, g, b, eps, out.data<float>());
    else cpu::layer_norm(x.data<float>(), r.rows, r.dim, g, b, eps, out.data<float>());
    return info.Env().Undefined();
  });

  // rmsNorm(x, gamma | null, out, {eps, reference})
  export_fn(env, exports, "rmsNorm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor* gamma = optional_tensor_arg(info[1], "gamma");
    Tensor& out = tensor_arg(info[2], "out");
    const Napi::Object opts = object_arg(info, 3);
    const Rows r = row_args("rmsNorm", x, out);
    const float* g = row_param("rmsNorm", gamma, "gamma", r, out);
    const float eps = static_cast<float>(finite_opt(opts, "eps", 1e-6, 0.0, false, "rmsNorm"));
    if (use_ref(opts)) cpu::rms_norm_ref(x.data<float>(), r.rows, r.dim, g, eps, out.data<float>());
    else cpu::rms_norm(x.data<float>(), r.rows, r.dim, g, eps, out.data<float>());
    return info.Env().Undefined();
  });

  // softmax(x, out, {scale, reference}): softmax(x * scale) over the last dimension.
  export_fn(env, exports, "softmax", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& out = tensor_arg(info[1], "out");
    const Napi::Object opts = object_arg(info, 2);
    const Rows r = row_args("softmax", x, out);
    const double scale = number_opt(opts, "scale", 1.0);
    if (!std::isfinite(scale)) fail(ErrorCode::InvalidArgument, "softmax: scale must be finite, got " + number_str(scale));
    if (use_ref(opts)) cpu::softmax_ref(x.data<float>(), r.rows, r.dim, static_cast<float>(scale), out.data<float>());
    else cpu::softmax(x.data<float>(), r.rows, r.dim, static_cast<float>(scale), out.data<float>());
    return info.Env().Undefined();
  });
}

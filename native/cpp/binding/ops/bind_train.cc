// N-API bindings for the training kernels: the backward of the row-wise, elementwise and attention forwards, the fused
// cross-entropy, column sums (bias gradients), embedding scatter-add, AdamW and the sum of squares behind the global
// gradient norm (all f32). Shared by both addons: validation here (shapes, dtypes, aliasing, target and id ranges,
// option values), the kernel call in backend_ops_{cpu,cuda}.cc. The TS layer (src/ops/backward.ts, src/ops/optim.ts)
// validates first with the same messages.
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

using Named = std::pair<const Tensor*, const char*>;

void expect_f32_like(const std::string& op, const Tensor& t, const char* name, const Tensor& like, const char* like_name) {
  expect_dtype(t, DType::F32, name);
  if (t.shape != like.shape)
    fail(ErrorCode::ShapeMismatch, op + ": " + name + " " + shape_str(t.shape) + " must have the shape of " + like_name + " " +
                                       shape_str(like.shape));
}

// An output must not share memory with any listed tensor (null entries are skipped), itself included.
void expect_out_disjoint(const std::string& op, const Tensor* out, const char* out_name, std::initializer_list<Named> others) {
  if (!out) return;
  for (const auto& [t, name] : others)
    if (t) expect_disjoint(op, *out, out_name, *t, name);
}

void expect_param(const std::string& op, const Tensor* p, const char* name, int64_t dim, const Tensor& x) {
  if (!p) return;
  expect_dtype(*p, DType::F32, name);
  if (p->shape != Shape{dim})
    fail(ErrorCode::ShapeMismatch, op + ": " + name + " " + shape_str(p->shape) + " must be [" + std::to_string(dim) +
                                       "], the last dimension of x " + shape_str(x.shape));
}

Activation activation_arg(const Napi::Value& v) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "gelu_erf") return Activation::GeluErf;
  if (s == "gelu_tanh") return Activation::GeluTanh;
  if (s == "silu") return Activation::Silu;
  fail(ErrorCode::InvalidArgument, "activationBackward: activation must be gelu_erf, gelu_tanh or silu, got \"" + s + "\"");
}

double bounded_opt(const std::string& op, const Napi::Object& opts, const char* key, double fallback, double lo, double hi,
                   bool hi_open) {
  const double v = number_opt(opts, key, fallback);
  if (!std::isfinite(v) || v < lo || v > hi || (hi_open && v == hi))
    fail(ErrorCode::InvalidArgument, op + ": " + key + " must be in [" + number_str(lo) + ", " + number_str(hi) + (hi_open ? ")" : "]") +
                                         ", got " + number_str(v));
  return v;
}

// Shared by layerNormBackward / rmsNormBackward: x f32 rank >= 1, dy like x, dx null or like x (dy itself or disjoint
// from everything), gamma / dgamma / dbeta null or f32 [dim], the gradients disjoint from everything else.
void expect_norm_bwd(const std::string& op, const Tensor& x, const Tensor* gamma, const Tensor& dy, const Tensor* dx, const Tensor* dgamma,
                     const Tensor* dbeta) {
  expect_dtype(x, DType::F32, "x");
  if (x.shape.empty()) fail(ErrorCode::ShapeMismatch, op + ": x must have rank >= 1, got shape []");
  expect_f32_like(op, dy, "dy", x, "x");
  const int64_t dim = x.last_dim();
  expect_param(op, gamma, "gamma", dim, x);
  expect_param(op, dgamma, "dgamma", dim, x);
  expect_param(op, dbeta, "dbeta", dim, x);
  if (dx) {
    expect_f32_like(op, *dx, "dx", x, "x");
    expect_in_place_or_disjoint(op, *dx, "dx", dy, "dy");
    expect_out_disjoint(op, dx, "dx", {{&x, "x"}, {gamma, "gamma"}, {dgamma, "dgamma"}, {dbeta, "dbeta"}});
  }
  expect_out_disjoint(op, dgamma, "dgamma", {{&x, "x"}, {&dy, "dy"}, {gamma, "gamma"}, {dbeta, "dbeta"}});
  expect_out_disjoint(op, dbeta, "dbeta", {{&x, "x"}, {&dy, "dy"}, {gamma, "gamma"}});
}

}  // namespace

TESSERA_REGISTER_OPS(train) {
  // layerNormBackward(x, gamma | null, dy, dx | null, dgamma | null, dbeta | null, {eps, accumulate, reference})
  export_fn(env, exports, "layerNormBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "layerNormBackward";
    Tensor& x = tensor_arg(info[0], "x");
    Tensor* gamma = optional_tensor_arg(info[1], "gamma");
    Tensor& dy = tensor_arg(info[2], "dy");
    Tensor* dx = optional_tensor_arg(info[3], "dx");
    Tensor* dgamma = optional_tensor_arg(info[4], "dgamma");
    Tensor* dbeta = optional_tensor_arg(info[5], "dbeta");
    const Napi::Object opts = object_arg(info, 6);
    expect_norm_bwd(op, x, gamma, dy, dx, dgamma, dbeta);
    const float eps = static_cast<float>(finite_opt(opts, "eps", 1e-5, 0.0, false, op));
    backend::layer_norm_bwd(x, gamma, dy, eps, dx, dgamma, dbeta, bool_opt(opts, "accumulate", false), reference_opt(opts));
    return info.Env().Undefined();
  });

  // rmsNormBackward(x, gamma | null, dy, dx | null, dgamma | null, {eps, accumulate, reference})
  export_fn(env, exports, "rmsNormBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "rmsNormBackward";
    Tensor& x = tensor_arg(info[0], "x");
    Tensor* gamma = optional_tensor_arg(info[1], "gamma");
    Tensor& dy = tensor_arg(info[2], "dy");
    Tensor* dx = optional_tensor_arg(info[3], "dx");
    Tensor* dgamma = optional_tensor_arg(info[4], "dgamma");
    const Napi::Object opts = object_arg(info, 5);
    expect_norm_bwd(op, x, gamma, dy, dx, dgamma, nullptr);
    const float eps = static_cast<float>(finite_opt(opts, "eps", 1e-6, 0.0, false, op));
    backend::rms_norm_bwd(x, gamma, dy, eps, dx, dgamma, bool_opt(opts, "accumulate", false), reference_opt(opts));
    return info.Env().Undefined();
  });

  // softmaxBackward(y, dy, dx, {scale, reference}): y the forward's output; dx may be y or dy (in place).
  export_fn(env, exports, "softmaxBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "softmaxBackward";
    Tensor& y = tensor_arg(info[0], "y");
    Tensor& dy = tensor_arg(info[1], "dy");
    Tensor& dx = tensor_arg(info[2], "dx");
    const Napi::Object opts = object_arg(info, 3);
    expect_dtype(y, DType::F32, "y");
    if (y.shape.empty()) fail(ErrorCode::ShapeMismatch, op + ": y must have rank >= 1, got shape []");
    expect_f32_like(op, dy, "dy", y, "y");
    expect_f32_like(op, dx, "dx", y, "y");
    expect_in_place_or_disjoint(op, dx, "dx", y, "y");
    expect_in_place_or_disjoint(op, dx, "dx", dy, "dy");
    const double scale = number_opt(opts, "scale", 1.0);
    if (!std::isfinite(scale)) fail(ErrorCode::InvalidArgument, op + ": scale must be finite, got " + number_str(scale));
    backend::softmax_bwd(y, dy, static_cast<float>(scale), dx, reference_opt(opts));
    return info.Env().Undefined();
  });

  // activationBackward(act, x, dy, dx, {reference}): dx = dy * act'(x); dx may be x or dy.
  export_fn(env, exports, "activationBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "activationBackward";
    const Activation act = activation_arg(info[0]);
    Tensor& x = tensor_arg(info[1], "x");
    Tensor& dy = tensor_arg(info[2], "dy");
    Tensor& dx = tensor_arg(info[3], "dx");
    const Napi::Object opts = object_arg(info, 4);
    expect_dtype(x, DType::F32, "x");
    expect_f32_like(op, dy, "dy", x, "x");
    expect_f32_like(op, dx, "dx", x, "x");
    expect_in_place_or_disjoint(op, dx, "dx", x, "x");
    expect_in_place_or_disjoint(op, dx, "dx", dy, "dy");
    backend::activation_bwd(act, x, dy, dx, reference_opt(opts));
    return info.Env().Undefined();
  });

  // siluMulBackward(gate, up, dy, dgate, dup, {reference}): each output may be one of the inputs; not each other.
  export_fn(env, exports, "siluMulBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "siluMulBackward";
    Tensor& gate = tensor_arg(info[0], "gate");
    Tensor& up = tensor_arg(info[1], "up");
    Tensor& dy = tensor_arg(info[2], "dy");
    Tensor& dgate = tensor_arg(info[3], "dgate");
    Tensor& dup = tensor_arg(info[4], "dup");
    const Napi::Object opts = object_arg(info, 5);
    expect_dtype(gate, DType::F32, "gate");
    expect_f32_like(op, up, "up", gate, "gate");
    expect_f32_like(op, dy, "dy", gate, "gate");
    expect_f32_like(op, dgate, "dgate", gate, "gate");
    expect_f32_like(op, dup, "dup", gate, "gate");
    expect_disjoint(op, dgate, "dgate", dup, "dup");
    for (const Tensor* out : {&dgate, &dup}) {
      const char* name = out == &dgate ? "dgate" : "dup";
      expect_in_place_or_disjoint(op, *out, name, gate, "gate");
      expect_in_place_or_disjoint(op, *out, name, up, "up");
      expect_in_place_or_disjoint(op, *out, name, dy, "dy");
    }
    backend::silu_mul_bwd(gate, up, dy, dgate, dup, reference_opt(opts));
    return info.Env().Undefined();
  });

  // crossEntropy(logits [rows, vocab], targets i32 [rows], loss [rows], dlogits | null, {ignoreIndex, labelSmoothing,
  //              gradScale, reference}); dlogits may be logits (in place).
  export_fn(env, exports, "crossEntropy", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "crossEntropy";
    Tensor& logits = tensor_arg(info[0], "logits");
    Tensor& targets = tensor_arg(info[1], "targets");
    Tensor& loss = tensor_arg(info[2], "loss");
    Tensor* dlogits = optional_tensor_arg(info[3], "dlogits");
    const Napi::Object opts = object_arg(info, 4);
    expect_dtype(logits, DType::F32, "logits");
    expect_rank(logits, 2, "logits");
    expect_dtype(targets, DType::I32, "targets");
    expect_dtype(loss, DType::F32, "loss");
    const int64_t rows = logits.dim(0), vocab = logits.dim(1);
    if (targets.shape != Shape{rows})
      fail(ErrorCode::ShapeMismatch, op + ": targets " + shape_str(targets.shape) + " must be [rows] = [" + std::to_string(rows) +
                                         "] for logits " + shape_str(logits.shape));
    expect_shape(loss, Shape{rows}, "loss");
    if (dlogits) {
      expect_f32_like(op, *dlogits, "dlogits", logits, "logits");
      expect_in_place_or_disjoint(op, *dlogits, "dlogits", logits, "logits");
      expect_out_disjoint(op, dlogits, "dlogits", {{&targets, "targets"}, {&loss, "loss"}});
    }
    expect_out_disjoint(op, &loss, "loss", {{&logits, "logits"}, {&targets, "targets"}});
    const double ignore = number_opt(opts, "ignoreIndex", -100);
    if (std::floor(ignore) != ignore || ignore < -2147483648.0 || ignore > 2147483647.0)
      fail(ErrorCode::InvalidArgument, op + ": ignoreIndex must be an i32 integer, got " + number_str(ignore));
    const double smoothing = bounded_opt(op, opts, "labelSmoothing", 0.0, 0.0, 1.0, false);
    const double grad_scale = number_opt(opts, "gradScale", 1.0);
    if (!std::isfinite(grad_scale)) fail(ErrorCode::InvalidArgument, op + ": gradScale must be finite, got " + number_str(grad_scale));
    const std::vector<int32_t> t = backend::read_indices(targets);
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == static_cast<int32_t>(ignore)) continue;
      if (t[i] < 0 || t[i] >= vocab)
        fail(ErrorCode::InvalidArgument, op + ": targets[" + std::to_string(i) + "] = " + std::to_string(t[i]) + " is outside [0, " +
                                             std::to_string(vocab) + ") and not the ignore index " + number_str(ignore));
    }
    CrossEntropyArgs a;
    a.logits = logits.data<float>();
    a.targets = targets.data<int32_t>();
    a.loss = loss.data<float>();
    a.dlogits = dlogits ? dlogits->data<float>() : nullptr;
    a.rows = rows;
    a.vocab = vocab;
    a.ignore_index = static_cast<int32_t>(ignore);
    a.smoothing = static_cast<float>(smoothing);
    a.grad_scale = static_cast<float>(grad_scale);
    backend::cross_entropy(a, reference_opt(opts));
    return info.Env().Undefined();
  });

  // columnSum(x [..., cols], out [cols], {accumulate, reference}): out (+)= the sum of x's rows.
  export_fn(env, exports, "columnSum", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "columnSum";
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& out = tensor_arg(info[1], "out");
    const Napi::Object opts = object_arg(info, 2);
    expect_dtype(x, DType::F32, "x");
    expect_dtype(out, DType::F32, "out");
    if (x.shape.empty()) fail(ErrorCode::ShapeMismatch, op + ": x must have rank >= 1, got shape []");
    if (out.shape != Shape{x.last_dim()})
      fail(ErrorCode::ShapeMismatch, op + ": out " + shape_str(out.shape) + " must be [" + std::to_string(x.last_dim()) +
                                         "], the last dimension of x " + shape_str(x.shape));
    expect_disjoint(op, out, "out", x, "x");
    backend::column_sum(x, out, bool_opt(opts, "accumulate", false), reference_opt(opts));
    return info.Env().Undefined();
  });

  // embeddingBackward(dy [...ids.shape, dim], ids i32, dtable [vocab, dim], {accumulate, reference})
  export_fn(env, exports, "embeddingBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "embeddingBackward";
    Tensor& dy = tensor_arg(info[0], "dy");
    Tensor& ids = tensor_arg(info[1], "ids");
    Tensor& dtable = tensor_arg(info[2], "dtable");
    const Napi::Object opts = object_arg(info, 3);
    expect_dtype(dy, DType::F32, "dy");
    expect_dtype(ids, DType::I32, "ids");
    expect_dtype(dtable, DType::F32, "dtable");
    expect_rank(dtable, 2, "dtable");
    Shape want = ids.shape;
    want.push_back(dtable.dim(1));
    if (dy.shape != want)
      fail(ErrorCode::ShapeMismatch, op + ": dy " + shape_str(dy.shape) + " must be [...ids.shape, dim] = " + shape_str(want) +
                                         " for ids " + shape_str(ids.shape) + " and dtable " + shape_str(dtable.shape));
    expect_disjoint(op, dtable, "dtable", dy, "dy");
    expect_disjoint(op, dtable, "dtable", ids, "ids");
    expect_indices_below(op, "ids", backend::read_indices(ids), dtable.dim(0), "rows of dtable " + shape_str(dtable.shape));
    backend::embedding_bwd(dy, ids, dtable, bool_opt(opts, "accumulate", false), reference_opt(opts));
    return info.Env().Undefined();
  });

  // attentionPrefillBackward(q, k, v, dout, dq, dk, dv, {causal, scale, keyMask, reference}) in attentionPrefill's
  // layout: q, dout, dq [b, s, h, d]; k, v, dk, dv [b, s, kvh, d].
  export_fn(env, exports, "attentionPrefillBackward", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "attentionPrefillBackward";
    Tensor& q = tensor_arg(info[0], "q");
    Tensor& k = tensor_arg(info[1], "k");
    Tensor& v = tensor_arg(info[2], "v");
    Tensor& dout = tensor_arg(info[3], "dout");
    Tensor& dq = tensor_arg(info[4], "dq");
    Tensor& dk = tensor_arg(info[5], "dk");
    Tensor& dv = tensor_arg(info[6], "dv");
    const Napi::Object opts = object_arg(info, 7);
    Tensor* key_mask = optional_tensor_arg(opts.Get("keyMask"), "keyMask");
    for (auto [t, name] : {std::pair<Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
      expect_dtype(*t, DType::F32, name);
      expect_rank(*t, 4, name);
    }
    PrefillAttentionBwdArgs a;
    a.batch = q.dim(0);
    a.seq = q.dim(1);
    a.n_heads = q.dim(2);
    a.head_dim = q.dim(3);
    a.n_kv_heads = k.dim(2);
    const Shape kv_shape{a.batch, a.seq, a.n_kv_heads, a.head_dim};
    if (k.shape != kv_shape)
      fail(ErrorCode::ShapeMismatch, op + ": k " + shape_str(k.shape) + " does not fit q " + shape_str(q.shape) +
                                         ": expected [batch, seq, kv_heads, head_dim] = " + shape_str(kv_shape));
    expect_f32_like(op, v, "v", k, "k");
    expect_f32_like(op, dout, "dout", q, "q");
    expect_f32_like(op, dq, "dq", q, "q");
    expect_f32_like(op, dk, "dk", k, "k");
    expect_f32_like(op, dv, "dv", k, "k");
    const bool split_ok = a.n_kv_heads == 0 ? a.n_heads == 0 : a.n_heads % a.n_kv_heads == 0;
    if (!split_ok)
      fail(ErrorCode::ShapeMismatch, op + ": q " + shape_str(q.shape) + " has " + std::to_string(a.n_heads) +
                                         " heads, not a multiple of the " + std::to_string(a.n_kv_heads) + " kv heads of " +
                                         shape_str(k.shape));
    if (key_mask) {
      expect_dtype(*key_mask, DType::U8, "keyMask");
      expect_shape(*key_mask, Shape{a.batch, a.seq}, "keyMask");
    }
    const std::initializer_list<Named> inputs = {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&dout, "dout"}, {key_mask, "keyMask"}};
    expect_out_disjoint(op, &dq, "dq", inputs);
    expect_out_disjoint(op, &dk, "dk", inputs);
    expect_out_disjoint(op, &dv, "dv", inputs);
    expect_disjoint(op, dq, "dq", dk, "dk");
    expect_disjoint(op, dq, "dq", dv, "dv");
    expect_disjoint(op, dk, "dk", dv, "dv");
    const double fallback = a.head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(a.head_dim)) : 1.0;
    const double scale = number_opt(opts, "scale", fallback);
    if (!std::isfinite(scale)) fail(ErrorCode::InvalidArgument, op + ": scale must be finite, got " + number_str(scale));
    a.q = q.data<float>();
    a.k = k.data<float>();
    a.v = v.data<float>();
    a.dout = dout.data<float>();
    a.dq = dq.data<float>();
    a.dk = dk.data<float>();
    a.dv = dv.data<float>();
    a.key_mask = key_mask ? key_mask->data<uint8_t>() : nullptr;
    a.causal = bool_opt(opts, "causal", false);
    a.scale = static_cast<float>(scale);
    backend::attention_prefill_bwd(a, reference_opt(opts));
    return info.Env().Undefined();
  });

  // adamw(param, grad, m, v, {lr, beta1, beta2, eps, weightDecay, step, gradScale, reference}): in place on param, m, v.
  export_fn(env, exports, "adamw", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "adamw";
    Tensor& param = tensor_arg(info[0], "param");
    Tensor& grad = tensor_arg(info[1], "grad");
    Tensor& m = tensor_arg(info[2], "m");
    Tensor& v = tensor_arg(info[3], "v");
    const Napi::Object opts = object_arg(info, 4);
    expect_dtype(param, DType::F32, "param");
    expect_f32_like(op, grad, "grad", param, "param");
    expect_f32_like(op, m, "m", param, "param");
    expect_f32_like(op, v, "v", param, "param");
    expect_out_disjoint(op, &param, "param", {{&grad, "grad"}, {&m, "m"}, {&v, "v"}});
    expect_out_disjoint(op, &m, "m", {{&grad, "grad"}, {&v, "v"}});
    expect_out_disjoint(op, &v, "v", {{&grad, "grad"}});
    const double lr = finite_opt(opts, "lr", 1e-3, 0.0, false, op);
    const double beta1 = bounded_opt(op, opts, "beta1", 0.9, 0.0, 1.0, true);
    const double beta2 = bounded_opt(op, opts, "beta2", 0.999, 0.0, 1.0, true);
    const double eps = finite_opt(opts, "eps", 1e-8, 0.0, true, op);
    const double wd = finite_opt(opts, "weightDecay", 0.01, 0.0, false, op);
    const double step = number_opt(opts, "step", NAN);
    if (!(step >= 1) || std::floor(step) != step || step > 9007199254740991.0)
      fail(ErrorCode::InvalidArgument, op + ": step must be an integer >= 1 (the 1-based step count), got " + number_str(step));
    const double grad_scale = number_opt(opts, "gradScale", 1.0);
    if (!std::isfinite(grad_scale)) fail(ErrorCode::InvalidArgument, op + ": gradScale must be finite, got " + number_str(grad_scale));
    AdamWArgs a;
    a.param = param.data<float>();
    a.grad = grad.data<float>();
    a.m = m.data<float>();
    a.v = v.data<float>();
    a.n = param.numel();
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.eps = eps;
    a.grad_scale = grad_scale;
    a.decay = 1.0 - lr * wd;
    a.step_size = lr / (1.0 - std::pow(beta1, step));
    a.inv_sqrt_bc2 = 1.0 / std::sqrt(1.0 - std::pow(beta2, step));
    backend::adamw(a, reference_opt(opts));
    return info.Env().Undefined();
  });

  // sumSquares(x, {reference}) -> number: the sum of x's squared elements, accumulated in double in a fixed order.
  export_fn(env, exports, "sumSquares", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    const Napi::Object opts = object_arg(info, 1);
    expect_dtype(x, DType::F32, "x");
    return Napi::Number::New(info.Env(), backend::sum_squares(x, reference_opt(opts)));
  });
}

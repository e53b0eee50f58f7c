// N-API bindings for Punica's LoRA kernels: sgmvShrink, sgmvExpand (segments of consecutive rows, indptr) and
// bgmvShrink, bgmvExpand (a per-row adapter index). Shared by both addons: every check runs here (dtypes, shapes,
// ranks against rMax, the layer, indptr / rowIndex read back to the host, aliasing), then the call becomes a list of
// row groups (SgmvArgs, core/op_args.h) for backend_ops_{cpu,cuda}.cc.
#include <cmath>
#include <string>
#include <vector>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

struct OpKind {
  const char* op;
  bool expand;  // expand: y [rows, hOut] += scale * v [rows, rMax] W; shrink: y [rows, rMax] += x [rows, hIn] Wᵀ
  bool bgmv;    // bgmv: rowIndex i32 [rows]; sgmv: indptr i32 [n + 1]
};

[[noreturn]] void fail_op(ErrorCode code, const OpKind& k, const std::string& msg) { fail(code, std::string(k.op) + ": " + msg); }

// "weights[3] (segment 3) [2, 16, 64]": how errors name a weight.
std::string weight_label(const OpKind& k, size_t i, const Tensor* w) {
  std::string s = "weights[" + std::to_string(i) + "]";
  if (!k.bgmv) s += " (segment " + std::to_string(i) + ")";
  if (w) s += " " + shape_str(w->shape);
  return s;
}

std::vector<Tensor*> weight_list(const OpKind& k, const Napi::Value& v) {
  if (!v.IsArray()) fail_op(ErrorCode::InvalidArgument, k, "weights must be an array of tensors or nulls");
  const Napi::Array arr = v.As<Napi::Array>();
  std::vector<Tensor*> out(arr.Length(), nullptr);
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    const Napi::Value e = arr.Get(i);
    if (e.IsNull() || e.IsUndefined()) continue;
    if (!NativeTensor::Is(e)) fail_op(ErrorCode::InvalidArgument, k, "weights[" + std::to_string(i) + "] must be a native tensor or null");
    out[i] = &NativeTensor::Unwrap(e.As<Napi::Object>())->tensor("weight");
  }
  return out;
}

int64_t layer_opt(const OpKind& k, const Napi::Object& opts) {
  const Napi::Value v = opts.Get("layer");
  if (!v.IsNumber()) fail_op(ErrorCode::InvalidArgument, k, "option layer must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d < 0 || d != std::floor(d) || d > 2147483647.0)
    fail_op(ErrorCode::InvalidArgument, k, "layer must be an integer >= 0, got " + number_str(d));
  return static_cast<int64_t>(d);
}

// Expand only: one finite scale per weight entry (per segment for SGMV, per adapter for BGMV); absent = all 1.
std::vector<float> scales_opt(const OpKind& k, const Napi::Object& opts, size_t n) {
  std::vector<float> scales(n, 1.0f);
  const Napi::Value v = opts.Get("scales");
  if (v.IsUndefined() || v.IsNull()) return scales;
  if (!k.expand) fail_op(ErrorCode::InvalidArgument, k, "takes no scales (only the expand kernels scale)");
  if (!v.IsArray()) fail_op(ErrorCode::InvalidArgument, k, "scales must be an array of numbers");
  const Napi::Array arr = v.As<Napi::Array>();
  if (arr.Length() != n)
    fail_op(ErrorCode::InvalidArgument, k, "scales has " + std::to_string(arr.Length()) + " entries, want one per weight (" + std::to_string(n) + ")");
  for (uint32_t i = 0; i < n; ++i) {
    const Napi::Value e = arr.Get(i);
    const double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : NAN;
    if (!std::isfinite(d) || std::fabs(d) > 3.4e38)
      fail_op(ErrorCode::InvalidArgument, k, "scales[" + std::to_string(i) + "] must be a finite number, got " + (e.IsNumber() ? number_str(d) : std::string("a non-number")));
    scales[i] = static_cast<float>(d);
  }
  return scales;
}

Napi::Value run(const OpKind& k, const Napi::CallbackInfo& info) {
  const char* x_name = k.expand ? "v" : "x";
  const char* index_name = k.bgmv ? "rowIndex" : "indptr";
  Tensor& y = tensor_arg(info[0], "y");
  Tensor& x = tensor_arg(info[1], x_name);
  const std::vector<Tensor*> weights = weight_list(k, info[2]);
  Tensor& index = tensor_arg(info[3], index_name);
  const Napi::Object opts = object_arg(info, 4);
  const size_t n = weights.size();

  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&y, "y"}, {&x, x_name}}) {
    if (t->dtype != DType::F32) fail_op(ErrorCode::DTypeMismatch, k, std::string(name) + " " + shape_str(t->shape) + " must be f32, got " + dtype_name(t->dtype));
    if (t->shape.size() != 2) fail_op(ErrorCode::ShapeMismatch, k, std::string(name) + " must have rank 2, got " + shape_str(t->shape));
  }
  const int64_t rows = y.dim(0);
  if (x.dim(0) != rows)
    fail_op(ErrorCode::ShapeMismatch, k, std::string("y ") + shape_str(y.shape) + " and " + x_name + " " + shape_str(x.shape) + " must have the same number of rows");
  const int64_t h = k.expand ? y.dim(1) : x.dim(1);      // hOut or hIn: the last dimension of every weight
  const int64_t r_max = k.expand ? x.dim(1) : y.dim(1);  // columns of v or y: every weight's rank fits
  const char* h_name = k.expand ? "hOut" : "hIn";
  auto h_from = [&] { return k.expand ? "y " + shape_str(y.shape) : "x " + shape_str(x.shape); };
  auto r_from = [&] { return k.expand ? "v " + shape_str(x.shape) : "y " + shape_str(y.shape); };
  const int64_t layer = layer_opt(k, opts);
  const std::vector<float> scales = scales_opt(k, opts, n);

  expect_disjoint(k.op, y, "y", x, x_name);
  expect_disjoint(k.op, y, "y", index, index_name);
  for (size_t i = 0; i < n; ++i) {
    const Tensor* w = weights[i];
    if (!w) continue;
    // Messages are built only on failure: this loop runs once per weight on every call.
    if (w->dtype != DType::F32) fail_op(ErrorCode::DTypeMismatch, k, weight_label(k, i, w) + " must be f32, got " + dtype_name(w->dtype));
    if (w->shape.size() != 3 || w->dim(2) != h)
      fail_op(ErrorCode::ShapeMismatch, k, weight_label(k, i, w) + " must be [L, r, " + h_name + "] with " + h_name + " = " + std::to_string(h) + " (from " + h_from() + ")");
    if (w->dim(1) > r_max)
      fail_op(ErrorCode::ShapeMismatch, k, weight_label(k, i, w) + " has rank r = " + std::to_string(w->dim(1)) + " > rMax = " + std::to_string(r_max) +
                                               " (the columns of " + r_from() + ")");
    if (layer >= w->dim(0))
      fail_op(ErrorCode::InvalidArgument, k, "layer " + std::to_string(layer) + " is outside [0, " + std::to_string(w->dim(0)) + ") for " + weight_label(k, i, w));
    if (bytes_overlap(y, *w)) expect_disjoint(k.op, y, "y", *w, ("weights[" + std::to_string(i) + "]").c_str());
  }

  if (index.dtype != DType::I32) fail_op(ErrorCode::DTypeMismatch, k, std::string(index_name) + " " + shape_str(index.shape) + " must be i32, got " + dtype_name(index.dtype));
  if (index.shape.size() != 1) fail_op(ErrorCode::ShapeMismatch, k, std::string(index_name) + " must have rank 1, got " + shape_str(index.shape));
  const int64_t want_len = k.bgmv ? rows : static_cast<int64_t>(n) + 1;
  if (index.dim(0) != want_len)
    fail_op(ErrorCode::ShapeMismatch, k, std::string(index_name) + " " + shape_str(index.shape) + " must have " + std::to_string(want_len) + " entries (" +
                                             (k.bgmv ? "one per row of y " + shape_str(y.shape) : "weights.length + 1 = " + std::to_string(n) + " + 1") + ")");
  const std::vector<int32_t> host = backend::read_indices(index);

  // The layer slice of weight i: [r, h] at offset layer * r * h.
  auto slice = [&](size_t i) { return weights[i]->data<float>() + layer * weights[i]->dim(1) * h; };
  std::vector<SgmvSegment> groups;
  std::vector<int32_t> row_ids;
  if (!k.bgmv) {
    if (host[0] != 0) fail_op(ErrorCode::InvalidArgument, k, "indptr[0] = " + std::to_string(host[0]) + " must be 0");
    for (size_t i = 0; i < n; ++i) {
      if (host[i + 1] < host[i])
        fail_op(ErrorCode::InvalidArgument, k, "indptr must be non-decreasing: indptr[" + std::to_string(i + 1) + "] = " + std::to_string(host[i + 1]) +
                                                   " < indptr[" + std::to_string(i) + "] = " + std::to_string(host[i]) + " (segment " + std::to_string(i) + ")");
    }
    if (host[n] != rows)
      fail_op(ErrorCode::InvalidArgument, k, "indptr[" + std::to_string(n) + "] = " + std::to_string(host[n]) + " must equal the " + std::to_string(rows) +
                                                 " rows of y " + shape_str(y.shape));
    for (size_t i = 0; i < n; ++i) {
      const int64_t len = host[i + 1] - host[i];
      if (!weights[i] || len == 0 || weights[i]->dim(1) == 0) continue;
      groups.push_back({slice(i), weights[i]->dim(1), host[i], len, scales[i]});
    }
  } else {
    for (int64_t row = 0; row < rows; ++row) {
      const int32_t j = host[static_cast<size_t>(row)];
      if (j < -1 || j >= static_cast<int64_t>(n))
        fail_op(ErrorCode::InvalidArgument, k, "rowIndex[" + std::to_string(row) + "] = " + std::to_string(j) + " is outside [-1, " + std::to_string(n) + ") (" +
                                                   std::to_string(n) + " weights; -1 = no adapter)");
    }
    // Group the rows by adapter (counting sort, rows ascending within a group): each weight is read once per call.
    std::vector<int64_t> start(n + 1, 0);
    for (const int32_t j : host)
      if (j >= 0) ++start[static_cast<size_t>(j) + 1];
    for (size_t j = 0; j < n; ++j) start[j + 1] += start[j];
    row_ids.resize(static_cast<size_t>(start[n]));
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t row = 0; row < rows; ++row) {
      const int32_t j = host[static_cast<size_t>(row)];
      if (j >= 0) row_ids[static_cast<size_t>(fill[static_cast<size_t>(j)]++)] = static_cast<int32_t>(row);
    }
    for (size_t j = 0; j < n; ++j) {
      const int64_t len = start[j + 1] - start[j];
      if (!weights[j] || len == 0 || weights[j]->dim(1) == 0) continue;
      groups.push_back({slice(j), weights[j]->dim(1), start[j], len, scales[j]});
    }
  }
  if (groups.empty() || h == 0) return info.Env().Undefined();

  SgmvArgs args;
  args.x = x.data<float>();
  args.y = y.data<float>();
  args.total_rows = rows;
  args.h = h;
  args.r_max = r_max;
  args.segments = groups.data();
  args.n_segments = static_cast<int64_t>(groups.size());
  args.row_ids = k.bgmv ? row_ids.data() : nullptr;
  const bool reference = reference_opt(opts);
  if (k.expand) backend::sgmv_expand(args, reference);
  else backend::sgmv_shrink(args, reference);
  return info.Env().Undefined();
}

}  // namespace

TESSERA_REGISTER_OPS(sgmv) {
  // sgmvShrink(y [rows, rMax], x [rows, hIn], weights (W_i [L, r_i, hIn] | null)[n], indptr i32 [n + 1],
  //            {layer, reference}): y[segment i rows, 0:r_i] += x[same rows] · W_i[layer]ᵀ.
  export_fn(env, exports, "sgmvShrink", [](const Napi::CallbackInfo& info) { return run({"sgmvShrink", false, false}, info); });
  // sgmvExpand(y [rows, hOut], v [rows, rMax], weights (W_i [L, r_i, hOut] | null)[n], indptr i32 [n + 1],
  //            {layer, scales (one per segment) | null, reference}): y[segment i rows] += scale_i v[same rows, 0:r_i] W_i[layer].
  export_fn(env, exports, "sgmvExpand", [](const Napi::CallbackInfo& info) { return run({"sgmvExpand", true, false}, info); });
  // bgmvShrink / bgmvExpand: the same with rowIndex i32 [rows] (j >= 0 selects weights[j], -1 none) instead of indptr,
  // and scales one per weight.
  export_fn(env, exports, "bgmvShrink", [](const Napi::CallbackInfo& info) { return run({"bgmvShrink", false, true}, info); });
  export_fn(env, exports, "bgmvExpand", [](const Napi::CallbackInfo& info) { return run({"bgmvExpand", true, true}, info); });
}

// N-API bindings for lookups and copies: embedding, gatherRows, scatterRows, convert.
#include "../binding/napi_util.h"
#include "bind_checks.h"
#include "kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

Shape row_shape(const Tensor& t) { return Shape(t.shape.begin() + 1, t.shape.end()); }

int64_t row_bytes(const Tensor& t) { return shape_numel(row_shape(t)) * static_cast<int64_t>(dtype_size(t.dtype)); }

// Every index must lie in [0, limit): checked here so a bad direct call can never read or write out of bounds.
void expect_indices_below(const std::string& op, const char* name, const Tensor& idx, int64_t limit, const std::string& what) {
  const int32_t* p = idx.data<int32_t>();
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] < 0 || p[i] >= limit)
      fail(ErrorCode::InvalidArgument, op + ": " + name + "[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                                           " is outside [0, " + std::to_string(limit) + ") (" + what + ")");
  }
}

}  // namespace

TESSERA_REGISTER_OPS(gather) {
  // embedding(table [vocab, dim] f32|f16|bf16, ids i32 (any shape), out f32 [...ids.shape, dim], {reference})
  export_fn(env, exports, "embedding", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& table = tensor_arg(info[0], "table");
    Tensor& ids = tensor_arg(info[1], "ids");
    Tensor& out = tensor_arg(info[2], "out");
    const Napi::Object opts = object_arg(info, 3);
    if (!is_float_dtype(table.dtype))
      fail(ErrorCode::DTypeMismatch, std::string("embedding: table must be f32, f16 or bf16, got ") + dtype_name(table.dtype));
    expect_rank(table, 2, "table");
    expect_dtype(ids, DType::I32, "ids");
    expect_dtype(out, DType::F32, "out");
    const int64_t vocab = table.dim(0), dim = table.dim(1);
    Shape want = ids.shape;
    want.push_back(dim);
    expect_shape(out, want, "out");
    expect_disjoint("embedding", out, "out", table, "table");
    expect_disjoint("embedding", out, "out", ids, "ids");
    expect_indices_below("embedding", "ids", ids, vocab, "vocabulary size " + std::to_string(vocab));
    if (bool_opt(opts, "reference", false))
      cpu::embedding_ref(table.raw(), table.dtype, dim, ids.data<int32_t>(), ids.numel(), out.data<float>());
    else cpu::embedding(table.raw(), table.dtype, dim, ids.data<int32_t>(), ids.numel(), out.data<float>());
    return info.Env().Undefined();
  });

  // gatherRows(src [rows, ...row], idx i32 [n], out [n, ...row] of src's dtype): out[i] = src[idx[i]].
  export_fn(env, exports, "gatherRows", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& idx = tensor_arg(info[1], "idx");
    Tensor& out = tensor_arg(info[2], "out");
    if (src.shape.empty()) fail(ErrorCode::ShapeMismatch, "gatherRows: src must have rank >= 1, got shape []");
    expect_dtype(idx, DType::I32, "idx");
    expect_rank(idx, 1, "idx");
    expect_dtype(out, src.dtype, "out");
    Shape want = row_shape(src);
    want.insert(want.begin(), idx.dim(0));
    expect_shape(out, want, "out");
    expect_disjoint("gatherRows", out, "out", src, "src");
    expect_disjoint("gatherRows", out, "out", idx, "idx");
    expect_indices_below("gatherRows", "idx", idx, src.dim(0), "src " + shape_str(src.shape) + " has " + std::to_string(src.dim(0)) + " rows");
    cpu::gather_rows(src.raw(), row_bytes(src), idx.data<int32_t>(), idx.numel(), out.raw());
    return info.Env().Undefined();
  });

  // scatterRows(src [n, ...row], idx i32 [n], dst [rows, ...row] of src's dtype): dst[idx[i]] = src[i];
  // with duplicate indices the last one wins.
  export_fn(env, exports, "scatterRows", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& idx = tensor_arg(info[1], "idx");
    Tensor& dst = tensor_arg(info[2], "dst");
    if (src.shape.empty()) fail(ErrorCode::ShapeMismatch, "scatterRows: src must have rank >= 1, got shape []");
    if (dst.shape.empty()) fail(ErrorCode::ShapeMismatch, "scatterRows: dst must have rank >= 1, got shape []");
    expect_dtype(idx, DType::I32, "idx");
    expect_rank(idx, 1, "idx");
    expect_dtype(dst, src.dtype, "dst");
    if (idx.dim(0) != src.dim(0) || row_shape(src) != row_shape(dst))
      fail(ErrorCode::ShapeMismatch, "scatterRows: src " + shape_str(src.shape) + ", idx " + shape_str(idx.shape) + " and dst " +
                                         shape_str(dst.shape) + " do not fit (src [n, ...row], idx [n], dst [rows, ...row])");
    expect_disjoint("scatterRows", dst, "dst", src, "src");
    expect_disjoint("scatterRows", dst, "dst", idx, "idx");
    expect_indices_below("scatterRows", "idx", idx, dst.dim(0), "dst " + shape_str(dst.shape) + " has " + std::to_string(dst.dim(0)) + " rows");
    cpu::scatter_rows(src.raw(), row_bytes(src), idx.data<int32_t>(), idx.numel(), dst.raw());
    return info.Env().Undefined();
  });

  // convert(src, dst, {reference}): same shape; f32/f16/bf16 to each other, or any dtype to itself (a copy).
  export_fn(env, exports, "convert", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& dst = tensor_arg(info[1], "dst");
    const Napi::Object opts = object_arg(info, 2);
    if (src.dtype != dst.dtype && (!is_float_dtype(src.dtype) || !is_float_dtype(dst.dtype)))
      fail(ErrorCode::DTypeMismatch, std::string("convert: no conversion from ") + dtype_name(src.dtype) + " to " + dtype_name(dst.dtype) +
                                         " (conversions are between f32, f16 and bf16)");
    expect_shape(dst, src.shape, "dst");
    expect_disjoint("convert", dst, "dst", src, "src");
    if (bool_opt(opts, "reference", false)) cpu::convert_ref(src.raw(), src.dtype, dst.raw(), dst.dtype, src.numel());
    else cpu::convert(src.raw(), src.dtype, dst.raw(), dst.dtype, src.numel());
    return info.Env().Undefined();
  });
}

// N-API bindings for lookups and copies: embedding, gatherRows, scatterRows, convert.
// Shared by both addons: validation here (index tensors are read back to the host and checked before any kernel
// runs, so a bad index throws instead of reading out of bounds or faulting the GPU), the kernel call in
// backend_ops_{cpu,cuda}.cc.
#include <string>
#include <vector>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

Shape row_shape(const Tensor& t) { return Shape(t.shape.begin() + 1, t.shape.end()); }

std::string rows_of(const char* name, const Tensor& t) {
  return std::string(name) + " " + shape_str(t.shape) + " has " + std::to_string(t.dim(0)) + " rows";
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
    expect_indices_below("embedding", "ids", backend::read_indices(ids), vocab, "vocabulary size " + std::to_string(vocab));
    backend::embedding(table, ids, out, reference_opt(opts));
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
    expect_indices_below("gatherRows", "idx", backend::read_indices(idx), src.dim(0), rows_of("src", src));
    backend::gather_rows(src, idx, out);
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
    const std::vector<int32_t> host_idx = backend::read_indices(idx);
    expect_indices_below("scatterRows", "idx", host_idx, dst.dim(0), rows_of("dst", dst));
    backend::scatter_rows(src, idx, host_idx, dst);
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
    backend::convert(src, dst, reference_opt(opts));
    return info.Env().Undefined();
  });
}

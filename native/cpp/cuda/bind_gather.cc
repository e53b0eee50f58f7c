// N-API bindings for the CUDA gathers and copies: embedding, gatherRows, scatterRows, convert.
// Index tensors are checked on the host first (see bind_common.h): a bad index throws, it never faults the GPU.
#include <string>
#include <unordered_map>
#include <vector>

#include "../binding/device.h"
#include "../binding/napi_util.h"
#include "bind_common.h"
#include "cuda_kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

void expect_index_tensor(const Tensor& idx, const char* op, const char* what) {
  if (idx.dtype != DType::I32)
    fail(ErrorCode::DTypeMismatch, std::string(op) + ": " + what + " " + shape_str(idx.shape) + " must be i32, got " + dtype_name(idx.dtype));
}

void expect_rows_match(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  if (a.dtype != b.dtype)
    fail(ErrorCode::DTypeMismatch, std::string(op) + ": " + an + " is " + dtype_name(a.dtype) + " but " + bn + " is " + dtype_name(b.dtype));
  if (a.shape.empty() || b.shape.empty() || gpu::row_elements(a) != gpu::row_elements(b))
    fail(ErrorCode::ShapeMismatch, std::string(op) + ": " + an + " " + shape_str(a.shape) + " and " + bn + " " + shape_str(b.shape) +
                                       " do not have rows of the same size");
}

}  // namespace

TESSERA_REGISTER_OPS(cuda_gather) {
  // embedding(table, ids, out): out[i, :] = float(table[ids[i], :]); table [vocab, dim] f32/f16/bf16, ids i32 (any
  // shape, n elements), out f32 with n * dim elements and last dimension dim.
  export_fn(env, exports, "embedding", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& table = tensor_arg(info[0], "table");
    Tensor& ids = tensor_arg(info[1], "ids");
    Tensor& out = tensor_arg(info[2], "out");
    gpu::expect_float_dtype(table, "embedding", "table");
    expect_rank(table, 2, "table");
    expect_index_tensor(ids, "embedding", "ids");
    expect_dtype(out, DType::F32, "out");
    const int64_t vocab = table.shape[0], dim = table.shape[1], n = ids.numel();
    if (out.numel() != n * dim || (!out.shape.empty() && out.last_dim() != dim) || (out.shape.empty() && dim != 1))
      fail(ErrorCode::ShapeMismatch, "embedding: out " + shape_str(out.shape) + " does not hold one row of table " + shape_str(table.shape) +
                                         " per id of ids " + shape_str(ids.shape));
    gpu::ready();
    gpu::expect_indices_below(gpu::download_i32(ids), vocab, "embedding", "ids", "the table's rows");
    gpu::embedding(table.raw(), table.dtype, dim, ids.data<int32_t>(), n, out.data<float>(), gpu::use_reference(info, 3));
    return info.Env().Undefined();
  });

  // gatherRows(src, idx, out): out[i] = src[idx[i]] over rows of any dtype.
  export_fn(env, exports, "gatherRows", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& idx = tensor_arg(info[1], "idx");
    Tensor& out = tensor_arg(info[2], "out");
    expect_index_tensor(idx, "gatherRows", "idx");
    expect_rows_match(src, out, "gatherRows", "src", "out");
    const int64_t n = idx.numel();
    if (out.shape[0] != n)
      fail(ErrorCode::ShapeMismatch, "gatherRows: out " + shape_str(out.shape) + " must have one row per index of idx " + shape_str(idx.shape));
    gpu::ready();
    gpu::expect_indices_below(gpu::download_i32(idx), src.shape[0], "gatherRows", "idx", "src's rows");
    gpu::gather_rows(src.raw(), gpu::row_elements(src) * static_cast<int64_t>(dtype_size(src.dtype)), idx.data<int32_t>(), n, out.raw());
    return info.Env().Undefined();
  });

  // scatterRows(src, idx, dst): dst[idx[i]] = src[i]; with repeated indices the last write wins (as on the CPU).
  export_fn(env, exports, "scatterRows", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& idx = tensor_arg(info[1], "idx");
    Tensor& dst = tensor_arg(info[2], "dst");
    expect_index_tensor(idx, "scatterRows", "idx");
    expect_rows_match(src, dst, "scatterRows", "src", "dst");
    const int64_t n = idx.numel();
    if (src.shape[0] != n)
      fail(ErrorCode::ShapeMismatch, "scatterRows: src " + shape_str(src.shape) + " must have one row per index of idx " + shape_str(idx.shape));
    gpu::ready();
    const std::vector<int32_t> host = gpu::download_i32(idx);
    gpu::expect_indices_below(host, dst.shape[0], "scatterRows", "idx", "dst's rows");
    const int64_t row_bytes = gpu::row_elements(src) * static_cast<int64_t>(dtype_size(src.dtype));
    // Parallel writes to one row would race, so repeated destinations are reduced to their last source first.
    std::unordered_map<int32_t, int32_t> last;  // destination row -> last source row
    last.reserve(host.size());
    for (size_t i = 0; i < host.size(); ++i) last[host[i]] = static_cast<int32_t>(i);
    if (last.size() == host.size()) {
      gpu::scatter_rows(src.raw(), row_bytes, nullptr, idx.data<int32_t>(), n, dst.raw());
      return info.Env().Undefined();
    }
    std::vector<int32_t> pairs;  // [src rows..., dst rows...], in source order
    pairs.reserve(last.size() * 2);
    for (size_t i = 0; i < host.size(); ++i)
      if (last[host[i]] == static_cast<int32_t>(i)) pairs.push_back(static_cast<int32_t>(i));
    const int64_t kept = static_cast<int64_t>(pairs.size());
    for (int64_t i = 0; i < kept; ++i) pairs.push_back(host[static_cast<size_t>(pairs[static_cast<size_t>(i)])]);
    // The scratch list is charged to the budget like any allocation.
    Tensor list = Tensor::empty(device().allocator(), DType::I32, {2 * kept});
    device().upload(list.raw(), pairs.data(), list.nbytes());
    gpu::scatter_rows(src.raw(), row_bytes, list.data<int32_t>(), list.data<int32_t>() + kept, kept, dst.raw());
    device().synchronize();  // the kernel reads `list`, which is freed on return
    return info.Env().Undefined();
  });

  // convert(src, dst): element copy with f32/f16/bf16 conversion; same dtype (any) is a plain copy.
  export_fn(env, exports, "convert", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& dst = tensor_arg(info[1], "dst");
    if (src.numel() != dst.numel())
      fail(ErrorCode::ShapeMismatch, "convert: src " + shape_str(src.shape) + " and dst " + shape_str(dst.shape) + " differ in element count");
    if (src.dtype != dst.dtype) {
      gpu::expect_float_dtype(src, "convert", "src");
      gpu::expect_float_dtype(dst, "convert", "dst");
    }
    gpu::ready();
    gpu::convert(src.raw(), src.dtype, dst.raw(), dst.dtype, src.numel(), gpu::use_reference(info, 2));
    return info.Env().Undefined();
  });
}

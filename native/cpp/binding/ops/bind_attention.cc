// N-API bindings for attention: attentionPrefill (causal or bidirectional, optional key padding mask) and
// attentionDecode over the paged KV cache. Shared by both addons. The TS layer validates first; these checks repeat
// everything a kernel relies on (shapes, dtypes, page ids, context lengths; the index tensors are read back to the
// host first) so a bad direct call throws instead of reading out of bounds or faulting the GPU.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

// n_heads query heads over n_kv_heads kv heads (GQA): n_kv_heads divides n_heads (no heads at all is fine).
void expect_head_split(const std::string& op, int64_t n_heads, int64_t n_kv_heads, const Tensor& q, const Tensor& k) {
  const bool ok = n_kv_heads == 0 ? n_heads == 0 : n_heads % n_kv_heads == 0;
  if (!ok)
    fail(ErrorCode::ShapeMismatch, op + ": q " + shape_str(q.shape) + " has " + std::to_string(n_heads) +
                                       " heads, not a multiple of the " + std::to_string(n_kv_heads) +
                                       " kv heads of " + shape_str(k.shape));
}

float scale_opt(const std::string& op, const Napi::Object& opts, int64_t head_dim) {
  const double fallback = head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
  const double s = number_opt(opts, "scale", fallback);
  if (!std::isfinite(s)) fail(ErrorCode::InvalidArgument, op + ": scale must be finite, got " + number_str(s));
  return static_cast<float>(s);
}

// The kernels read the inputs while writing out row by row, so out must not share bytes with any of them.
void expect_out_disjoint(const std::string& op, const Tensor& out, std::initializer_list<std::pair<const Tensor*, const char*>> inputs) {
  for (const auto& [t, name] : inputs) expect_disjoint(op, out, "out", *t, name);
}

// Every page a sequence reads must exist: its first ceil(len / 16) block-table entries are dereferenced.
void expect_pages(const Tensor& block_table, const Tensor& context_lens, const Tensor& k_cache, int64_t num_pages) {
  const int64_t batch = block_table.dim(0), max_pages = block_table.dim(1);
  const std::vector<int32_t> lens = backend::read_indices(context_lens);
  const std::vector<int32_t> table = backend::read_indices(block_table);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    if (len < 0 || len > max_pages * kPageSize)
      fail(ErrorCode::InvalidArgument, "attentionDecode: contextLens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                           " is outside [0, " + std::to_string(max_pages * kPageSize) + "] (blockTable " +
                                           shape_str(block_table.shape) + " holds " + std::to_string(max_pages) +
                                           " pages of 16 per sequence)");
    const int64_t used = (len + kPageSize - 1) / kPageSize;
    for (int64_t p = 0; p < used; ++p) {
      const int64_t page = table[static_cast<size_t>(b * max_pages + p)];
      if (page < 0 || page >= num_pages)
        fail(ErrorCode::InvalidArgument, "attentionDecode: blockTable[" + std::to_string(b) + ", " + std::to_string(p) + "] = " +
                                             std::to_string(page) + " is not a page of kCache " + shape_str(k_cache.shape) +
                                             " (valid: 0 to " + std::to_string(num_pages - 1) + ")");
    }
  }
}

}  // namespace

TESSERA_REGISTER_OPS(attention) {
  // attentionPrefill(q [b,s,h,d], k [b,s,kvh,d], v [b,s,kvh,d], out [b,s,h,d], {causal, scale, keyMask u8 [b,s], reference})
  export_fn(env, exports, "attentionPrefill", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "attentionPrefill";
    Tensor& q = tensor_arg(info[0], "q");
    Tensor& k = tensor_arg(info[1], "k");
    Tensor& v = tensor_arg(info[2], "v");
    Tensor& out = tensor_arg(info[3], "out");
    const Napi::Object opts = object_arg(info, 4);
    Tensor* key_mask = optional_tensor_arg(opts.Get("keyMask"), "keyMask");
    for (auto [t, name] : {std::pair<Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
      expect_dtype(*t, DType::F32, name);
      expect_rank(*t, 4, name);
    }
    PrefillAttentionArgs args;
    args.batch = q.dim(0);
    args.seq = q.dim(1);
    args.n_heads = q.dim(2);
    args.head_dim = q.dim(3);
    args.n_kv_heads = k.dim(2);
    const Shape kv_shape{args.batch, args.seq, args.n_kv_heads, args.head_dim};
    if (k.shape != kv_shape)
      fail(ErrorCode::ShapeMismatch, op + ": k " + shape_str(k.shape) + " does not fit q " + shape_str(q.shape) +
                                         ": expected [batch, seq, kv_heads, head_dim] = " + shape_str(kv_shape));
    expect_shape(v, k.shape, "v");
    expect_shape(out, q.shape, "out");
    expect_head_split(op, args.n_heads, args.n_kv_heads, q, k);
    if (key_mask) {
      expect_dtype(*key_mask, DType::U8, "keyMask");
      expect_shape(*key_mask, Shape{args.batch, args.seq}, "keyMask");
    }
    expect_out_disjoint(op, out, {{&q, "q"}, {&k, "k"}, {&v, "v"}});
    if (key_mask) expect_disjoint(op, out, "out", *key_mask, "keyMask");

    args.q = q.data<float>();
    args.k = k.data<float>();
    args.v = v.data<float>();
    args.out = out.data<float>();
    args.key_mask = key_mask ? key_mask->data<uint8_t>() : nullptr;
    args.causal = bool_opt(opts, "causal", false);
    args.scale = scale_opt(op, opts, args.head_dim);
    backend::attention_prefill(args, reference_opt(opts));
    return info.Env().Undefined();
  });

  // attentionDecode(q [b,h,d], kCache/vCache [pages,16,kvh,d], blockTable i32 [b,maxPages], contextLens i32 [b],
  //                 out [b,h,d], {scale, reference})
  export_fn(env, exports, "attentionDecode", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "attentionDecode";
    Tensor& q = tensor_arg(info[0], "q");
    Tensor& k_cache = tensor_arg(info[1], "kCache");
    Tensor& v_cache = tensor_arg(info[2], "vCache");
    Tensor& block_table = tensor_arg(info[3], "blockTable");
    Tensor& context_lens = tensor_arg(info[4], "contextLens");
    Tensor& out = tensor_arg(info[5], "out");
    const Napi::Object opts = object_arg(info, 6);
    expect_dtype(q, DType::F32, "q");
    expect_dtype(k_cache, DType::F32, "kCache");
    expect_dtype(v_cache, DType::F32, "vCache");
    expect_dtype(out, DType::F32, "out");
    expect_dtype(block_table, DType::I32, "blockTable");
    expect_dtype(context_lens, DType::I32, "contextLens");
    expect_rank(q, 3, "q");
    expect_rank(k_cache, 4, "kCache");
    expect_rank(block_table, 2, "blockTable");
    DecodeAttentionArgs args;
    args.batch = q.dim(0);
    args.n_heads = q.dim(1);
    args.head_dim = q.dim(2);
    args.num_pages = k_cache.dim(0);
    args.n_kv_heads = k_cache.dim(2);
    args.max_pages = block_table.dim(1);
    args.page_size = kPageSize;
    const Shape cache_shape{args.num_pages, kPageSize, args.n_kv_heads, args.head_dim};
    if (k_cache.shape != cache_shape)
      fail(ErrorCode::ShapeMismatch, op + ": kCache " + shape_str(k_cache.shape) + " does not fit q " + shape_str(q.shape) +
                                         ": expected [num_pages, 16, kv_heads, head_dim] = " + shape_str(cache_shape));
    expect_shape(v_cache, k_cache.shape, "vCache");
    expect_shape(out, q.shape, "out");
    expect_shape(block_table, Shape{args.batch, args.max_pages}, "blockTable");
    expect_shape(context_lens, Shape{args.batch}, "contextLens");
    expect_head_split(op, args.n_heads, args.n_kv_heads, q, k_cache);
    expect_out_disjoint(op, out, {{&q, "q"}, {&k_cache, "kCache"}, {&v_cache, "vCache"}});
    args.scale = scale_opt(op, opts, args.head_dim);
    expect_pages(block_table, context_lens, k_cache, args.num_pages);

    args.q = q.data<float>();
    args.k_cache = k_cache.data<float>();
    args.v_cache = v_cache.data<float>();
    args.out = out.data<float>();
    args.block_table = block_table.data<int32_t>();
    args.context_lens = context_lens.data<int32_t>();
    backend::attention_decode(args, reference_opt(opts));
    return info.Env().Undefined();
  });
}

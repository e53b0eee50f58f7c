// N-API bindings for attention: attentionPrefill (causal or bidirectional, optional key padding mask) and
// attentionDecode over the paged KV cache. The TS layer validates first; these checks repeat everything a
// kernel relies on (shapes, dtypes, page ids, context lengths) so a bad direct call throws instead of reading
// out of bounds.
#include <cmath>
#include <string>

#include "../binding/napi_util.h"
#include "kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

// The kernels read q/k/v while writing out row by row, so out must not share bytes with an input.
void expect_disjoint(const Tensor& out, const Tensor& in, const char* in_name) {
  if (out.storage != in.storage || out.nbytes() == 0 || in.nbytes() == 0) return;
  const uint64_t a0 = out.offset, a1 = out.offset + out.nbytes();
  const uint64_t b0 = in.offset, b1 = in.offset + in.nbytes();
  if (a0 < b1 && b0 < a1)
    fail(ErrorCode::InvalidArgument, std::string("out ") + shape_str(out.shape) + " overlaps " + in_name + " " +
                                         shape_str(in.shape) + " in memory");
}

void expect_head_split(int64_t n_heads, int64_t n_kv_heads, const Tensor& q, const Tensor& k) {
  const bool ok = n_kv_heads == 0 ? n_heads == 0 : n_heads % n_kv_heads == 0;
  if (!ok)
    fail(ErrorCode::ShapeMismatch, "q " + shape_str(q.shape) + " has " + std::to_string(n_heads) +
                                       " heads, not a multiple of the " + std::to_string(n_kv_heads) +
                                       " kv heads of " + shape_str(k.shape));
}

float scale_opt(const Napi::Object& opts, int64_t head_dim) {
  const double fallback = head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
  const double s = number_opt(opts, "scale", fallback);
  if (!std::isfinite(s)) fail(ErrorCode::InvalidArgument, "scale must be finite, got " + std::to_string(s));
  return static_cast<float>(s);
}

}  // namespace

TESSERA_REGISTER_OPS(attention) {
  // attentionPrefill(q [b,s,h,d], k [b,s,kvh,d], v [b,s,kvh,d], out [b,s,h,d], {causal, scale, keyMask u8 [b,s], reference})
  export_fn(env, exports, "attentionPrefill", [](const Napi::CallbackInfo& info) -> Napi::Value {
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
    const int64_t batch = q.dim(0), seq = q.dim(1), n_heads = q.dim(2), head_dim = q.dim(3);
    const int64_t n_kv_heads = k.dim(2);
    const Shape kv_shape{batch, seq, n_kv_heads, head_dim};
    if (k.shape != kv_shape)
      fail(ErrorCode::ShapeMismatch, "k " + shape_str(k.shape) + " does not fit q " + shape_str(q.shape) +
                                         ": expected [batch, seq, kv_heads, head_dim] = " + shape_str(kv_shape));
    expect_shape(v, k.shape, "v");
    expect_shape(out, q.shape, "out");
    expect_head_split(n_heads, n_kv_heads, q, k);
    if (key_mask) {
      expect_dtype(*key_mask, DType::U8, "keyMask");
      expect_shape(*key_mask, Shape{batch, seq}, "keyMask");
    }
    expect_disjoint(out, q, "q");
    expect_disjoint(out, k, "k");
    expect_disjoint(out, v, "v");
    if (key_mask) expect_disjoint(out, *key_mask, "keyMask");

    cpu::PrefillAttentionArgs args;
    args.q = q.data<float>();
    args.k = k.data<float>();
    args.v = v.data<float>();
    args.out = out.data<float>();
    args.batch = batch;
    args.seq = seq;
    args.n_heads = n_heads;
    args.n_kv_heads = n_kv_heads;
    args.head_dim = head_dim;
    args.key_mask = key_mask ? key_mask->data<uint8_t>() : nullptr;
    args.causal = bool_opt(opts, "causal", false);
    args.scale = scale_opt(opts, head_dim);
    if (bool_opt(opts, "reference", false)) cpu::attention_prefill_ref(args);
    else cpu::attention_prefill(args);
    return info.Env().Undefined();
  });

  // attentionDecode(q [b,h,d], kCache/vCache [pages,16,kvh,d], blockTable i32 [b,maxPages], contextLens i32 [b],
  //                 out [b,h,d], {scale, reference})
  export_fn(env, exports, "attentionDecode", [](const Napi::CallbackInfo& info) -> Napi::Value {
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
    const int64_t batch = q.dim(0), n_heads = q.dim(1), head_dim = q.dim(2);
    const int64_t num_pages = k_cache.dim(0), n_kv_heads = k_cache.dim(2), max_pages = block_table.dim(1);
    const Shape cache_shape{num_pages, cpu::kPageSize, n_kv_heads, head_dim};
    if (k_cache.shape != cache_shape)
      fail(ErrorCode::ShapeMismatch, "kCache " + shape_str(k_cache.shape) + " does not fit q " + shape_str(q.shape) +
                                         ": expected [num_pages, 16, kv_heads, head_dim] = " + shape_str(cache_shape));
    expect_shape(v_cache, k_cache.shape, "vCache");
    expect_shape(out, q.shape, "out");
    expect_shape(block_table, Shape{batch, max_pages}, "blockTable");
    expect_shape(context_lens, Shape{batch}, "contextLens");
    expect_head_split(n_heads, n_kv_heads, q, k_cache);
    expect_disjoint(out, q, "q");
    expect_disjoint(out, k_cache, "kCache");
    expect_disjoint(out, v_cache, "vCache");

    // Every page a sequence reads must exist: its first ceil(len / 16) block-table entries are dereferenced.
    const int32_t* lens = context_lens.data<int32_t>();
    const int32_t* table = block_table.data<int32_t>();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = lens[b];
      if (len < 0 || len > max_pages * cpu::kPageSize)
        fail(ErrorCode::InvalidArgument, "contextLens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                             " is outside [0, " + std::to_string(max_pages * cpu::kPageSize) +
                                             "] (blockTable " + shape_str(block_table.shape) + " holds " +
                                             std::to_string(max_pages) + " pages of 16 per sequence)");
      const int64_t used = (len + cpu::kPageSize - 1) / cpu::kPageSize;
      for (int64_t p = 0; p < used; ++p) {
        const int64_t page = table[b * max_pages + p];
        if (page < 0 || page >= num_pages)
          fail(ErrorCode::InvalidArgument, "blockTable[" + std::to_string(b) + ", " + std::to_string(p) + "] = " +
                                               std::to_string(page) + " is not a page of kCache " +
                                               shape_str(k_cache.shape) + " (valid: 0 to " +
                                               std::to_string(num_pages - 1) + ")");
      }
    }

    cpu::DecodeAttentionArgs args;
    args.q = q.data<float>();
    args.k_cache = k_cache.data<float>();
    args.v_cache = v_cache.data<float>();
    args.out = out.data<float>();
    args.block_table = table;
    args.context_lens = lens;
    args.batch = batch;
    args.n_heads = n_heads;
    args.n_kv_heads = n_kv_heads;
    args.head_dim = head_dim;
    args.num_pages = num_pages;
    args.max_pages = max_pages;
    args.page_size = cpu::kPageSize;
    args.scale = scale_opt(opts, head_dim);
    if (bool_opt(opts, "reference", false)) cpu::attention_decode_ref(args);
    else cpu::attention_decode(args);
    return info.Env().Undefined();
  });
}

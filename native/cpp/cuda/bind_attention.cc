// N-API bindings for CUDA RoPE and attention: rope, attentionPrefill, attentionDecode (paged KV cache, page 16).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "../binding/napi_util.h"
#include "bind_common.h"
#include "cuda_kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

// n_heads query heads over n_kv kv heads (GQA): n_kv >= 1 and divides n_heads.
void expect_gqa(int64_t n_heads, int64_t n_kv, const Tensor& q, const Tensor& k, const char* op) {
  if (n_kv < 1 || n_heads % n_kv != 0)
    fail(ErrorCode::ShapeMismatch, std::string(op) + ": q " + shape_str(q.shape) + " has " + std::to_string(n_heads) + " heads, which " +
                                       "is not a multiple of the " + std::to_string(n_kv) + " kv heads of " + shape_str(k.shape));
}

float scale_opt(const Napi::Object& opts, int64_t head_dim, const char* op) {
  const double s = number_opt(opts, "scale", head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0);
  if (!std::isfinite(s)) fail(ErrorCode::InvalidArgument, std::string(op) + ": scale must be finite");
  return static_cast<float>(s);
}

}  // namespace

TESSERA_REGISTER_OPS(cuda_attention) {
  // rope(x, positions, {rotDim, base}): x f32 [tokens, heads, head_dim] rotated in place; positions i32 [tokens].
  export_fn(env, exports, "rope", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& pos = tensor_arg(info[1], "positions");
    const Napi::Object opts = object_arg(info, 2);
    expect_dtype(x, DType::F32, "x");
    expect_rank(x, 3, "x");
    expect_dtype(pos, DType::I32, "positions");
    const int64_t tokens = x.shape[0], heads = x.shape[1], head_dim = x.shape[2];
    expect_shape(pos, {tokens}, "positions");
    const double rot = number_opt(opts, "rotDim", static_cast<double>(head_dim));
    const double base = number_opt(opts, "base", 10000.0);
    if (!(rot >= 0) || std::floor(rot) != rot || static_cast<int64_t>(rot) > head_dim || static_cast<int64_t>(rot) % 2 != 0)
      fail(ErrorCode::InvalidArgument, "rope: rotDim must be an even integer in [0, " + std::to_string(head_dim) + "] for x " + shape_str(x.shape));
    if (!(base > 0) || !std::isfinite(base)) fail(ErrorCode::InvalidArgument, "rope: base must be a finite number > 0");
    gpu::ready();
    gpu::rope(x.data<float>(), tokens, heads, head_dim, static_cast<int64_t>(rot), pos.data<int32_t>(), static_cast<float>(base),
              bool_opt(opts, "reference", false));
    return info.Env().Undefined();
  });

  // attentionPrefill(q, k, v, out, {causal, scale, keyMask}): q/out [batch, seq, n_heads, d]; k/v [batch, seq,
  // n_kv_heads, d]; keyMask u8 [batch, seq] or null (0 = padding key).
  export_fn(env, exports, "attentionPrefill", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& q = tensor_arg(info[0], "q");
    Tensor& k = tensor_arg(info[1], "k");
    Tensor& v = tensor_arg(info[2], "v");
    Tensor& out = tensor_arg(info[3], "out");
    const Napi::Object opts = object_arg(info, 4);
    const std::pair<Tensor*, const char*> operands[] = {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}};
    for (const auto& [t, what] : operands) {
      expect_dtype(*t, DType::F32, what);
      expect_rank(*t, 4, what);
    }
    gpu::PrefillAttentionArgs a;
    a.batch = q.shape[0];
    a.seq = q.shape[1];
    a.n_heads = q.shape[2];
    a.head_dim = q.shape[3];
    a.n_kv_heads = k.shape[2];
    if (k.shape[0] != a.batch || k.shape[1] != a.seq || k.shape[3] != a.head_dim)
      fail(ErrorCode::ShapeMismatch, "attentionPrefill: q " + shape_str(q.shape) + " and k " + shape_str(k.shape) + " differ in batch, seq or head_dim");
    expect_shape(v, k.shape, "v");
    expect_shape(out, q.shape, "out");
    if (a.n_heads > 0) expect_gqa(a.n_heads, a.n_kv_heads, q, k, "attentionPrefill");
    if (Tensor* mask = optional_tensor_arg(opts.Get("keyMask"), "keyMask")) {
      expect_dtype(*mask, DType::U8, "keyMask");
      expect_shape(*mask, {a.batch, a.seq}, "keyMask");
      a.key_mask = mask->data<uint8_t>();
    }
    a.causal = bool_opt(opts, "causal", false);
    a.scale = scale_opt(opts, a.head_dim, "attentionPrefill");
    a.q = q.data<float>();
    a.k = k.data<float>();
    a.v = v.data<float>();
    a.out = out.data<float>();
    gpu::ready();
    gpu::attention_prefill(a, bool_opt(opts, "reference", false));
    return info.Env().Undefined();
  });

  // attentionDecode(q, kCache, vCache, blockTable, contextLens, out, {scale}): q/out [batch, n_heads, d]; caches
  // [num_pages, 16, n_kv_heads, d]; blockTable i32 [batch, max_pages]; contextLens i32 [batch].
  export_fn(env, exports, "attentionDecode", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& q = tensor_arg(info[0], "q");
    Tensor& kc = tensor_arg(info[1], "kCache");
    Tensor& vc = tensor_arg(info[2], "vCache");
    Tensor& table = tensor_arg(info[3], "blockTable");
    Tensor& lens = tensor_arg(info[4], "contextLens");
    Tensor& out = tensor_arg(info[5], "out");
    const Napi::Object opts = object_arg(info, 6);
    expect_dtype(q, DType::F32, "q");
    expect_rank(q, 3, "q");
    expect_dtype(kc, DType::F32, "kCache");
    expect_rank(kc, 4, "kCache");
    expect_dtype(vc, DType::F32, "vCache");
    expect_shape(vc, kc.shape, "vCache");
    expect_dtype(out, DType::F32, "out");
    expect_shape(out, q.shape, "out");
    expect_dtype(table, DType::I32, "blockTable");
    expect_rank(table, 2, "blockTable");
    expect_dtype(lens, DType::I32, "contextLens");
    gpu::DecodeAttentionArgs a;
    a.batch = q.shape[0];
    a.n_heads = q.shape[1];
    a.head_dim = q.shape[2];
    a.num_pages = kc.shape[0];
    a.n_kv_heads = kc.shape[2];
    a.max_pages = table.shape[1];
    if (kc.shape[1] != gpu::kPageSize)
      fail(ErrorCode::ShapeMismatch, "attentionDecode: kCache " + shape_str(kc.shape) + " must have pages of " + std::to_string(gpu::kPageSize) + " tokens (dim 1)");
    if (kc.shape[3] != a.head_dim)
      fail(ErrorCode::ShapeMismatch, "attentionDecode: q " + shape_str(q.shape) + " and kCache " + shape_str(kc.shape) + " differ in head_dim");
    if (table.shape[0] != a.batch)
      fail(ErrorCode::ShapeMismatch, "attentionDecode: blockTable " + shape_str(table.shape) + " must have one row per sequence of q " + shape_str(q.shape));
    expect_shape(lens, {a.batch}, "contextLens");
    if (a.n_heads > 0) expect_gqa(a.n_heads, a.n_kv_heads, q, kc, "attentionDecode");
    a.scale = scale_opt(opts, a.head_dim, "attentionDecode");
    gpu::ready();
    // Context lengths and the pages they use are checked on the host (see bind_common.h).
    const std::vector<int32_t> ctx = gpu::download_i32(lens);
    const std::vector<int32_t> pages = gpu::download_i32(table);
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t len = ctx[static_cast<size_t>(b)];
      if (len < 0 || len > a.max_pages * gpu::kPageSize)
        fail(ErrorCode::InvalidArgument, "attentionDecode: contextLens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                             " is outside [0, " + std::to_string(a.max_pages * gpu::kPageSize) + "] for blockTable " + shape_str(table.shape));
      for (int64_t p = 0; p < (len + gpu::kPageSize - 1) / gpu::kPageSize; ++p) {
        const int32_t page = pages[static_cast<size_t>(b * a.max_pages + p)];
        if (page < 0 || page >= a.num_pages)
          fail(ErrorCode::InvalidArgument, "attentionDecode: blockTable[" + std::to_string(b) + "][" + std::to_string(p) + "] = " +
                                               std::to_string(page) + " is not a page of kCache " + shape_str(kc.shape));
      }
    }
    a.q = q.data<float>();
    a.k_cache = kc.data<float>();
    a.v_cache = vc.data<float>();
    a.block_table = table.data<int32_t>();
    a.context_lens = lens.data<int32_t>();
    a.out = out.data<float>();
    gpu::attention_decode(a, bool_opt(opts, "reference", false));
    return info.Env().Undefined();
  });
}

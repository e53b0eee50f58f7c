// N-API bindings of the PLOT index and the fused lookup -> gather -> aggregate (plot.h): plotIndex* and
// plotLookupRows / plotLookupAggregate. CPU-only exports (like bind_q8.cc): PLOT lives in host memory (hmi.md §1.3,
// "GPU memory for PLOT: none"), so there is no CUDA counterpart.
// An index is an External handle owning a PlotTable, type-tagged so that no other External passes for one; dispose
// frees it at once, garbage collection otherwise. Keys cross as BigInt (one) or BigUint64Array (a batch).
// tessera-gpu-check compiles cpu/*.cc without N-API headers: this file is empty there.
#if __has_include(<napi.h>)
#include <memory>
#include <string>
#include <vector>

#include "../binding/napi_util.h"
#include "../binding/ops/checks.h"
#include "plot.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

struct PlotIndexHandle {
  std::unique_ptr<cpu::PlotTable> table;
  int64_t reported_bytes = 0;  // told to V8, so GC pressure reflects the slots (as NativeTensor does for storage)
};

// Brings what V8 was told in line with the slots now held (after a create, a growth, a clear or a dispose). As for
// tensors, the finalizer path does not adjust: only explicit calls do.
void sync_external(Napi::Env env, PlotIndexHandle& h) {
  const int64_t now = h.table ? h.table->byte_size() : 0;
  if (now != h.reported_bytes) Napi::MemoryManagement::AdjustExternalMemory(env, now - h.reported_bytes);
  h.reported_bytes = now;
}

constexpr napi_type_tag kPlotIndexTag = {0x7e55e4a9c1d24b6bULL, 0x9a0f3c58d2e17b40ULL};

Napi::Value wrap_table(Napi::Env env, std::unique_ptr<cpu::PlotTable> table) {
  auto* h = new PlotIndexHandle{std::move(table)};
  Napi::External<PlotIndexHandle> ext = Napi::External<PlotIndexHandle>::New(env, h, [](Napi::Env, PlotIndexHandle* p) { delete p; });
  ext.TypeTag(&kPlotIndexTag);
  sync_external(env, *h);
  return ext;
}

PlotIndexHandle& handle_arg(const Napi::Value& v, const std::string& op, const std::string& what) {
  if (!v.IsExternal() || !v.As<Napi::External<PlotIndexHandle>>().CheckTypeTag(&kPlotIndexTag))
    fail(ErrorCode::InvalidArgument, op + ": " + what + " is not a plot index handle");
  return *v.As<Napi::External<PlotIndexHandle>>().Data();
}

cpu::PlotTable& table_arg(const Napi::Value& v, const std::string& op, const std::string& what = "index") {
  PlotIndexHandle& h = handle_arg(v, op, what);
  if (!h.table) fail(ErrorCode::Disposed, op + ": the plot " + what + " was disposed");
  return *h.table;
}

uint64_t key_arg(const Napi::Value& v, const std::string& op) {
  if (!v.IsBigInt()) fail(ErrorCode::InvalidArgument, op + ": key must be a bigint");
  bool lossless = false;
  const uint64_t key = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) fail(ErrorCode::InvalidArgument, op + ": key must be a bigint in [0, 2^64)");
  return key;
}

template <class T>
Napi::TypedArrayOf<T> typed_arg(const Napi::Value& v, napi_typedarray_type type, const std::string& op, const char* what, const char* type_name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type)
    fail(ErrorCode::DTypeMismatch, op + ": " + what + " must be a " + type_name);
  return v.As<Napi::TypedArrayOf<T>>();
}

Napi::TypedArrayOf<uint64_t> keys_arg(const Napi::Value& v, const std::string& op) {
  return typed_arg<uint64_t>(v, napi_biguint64_array, op, "keys", "BigUint64Array");
}

std::vector<const cpu::PlotTable*> chain_arg(const Napi::Value& v, const std::string& op) {
  if (!v.IsArray()) fail(ErrorCode::InvalidArgument, op + ": chain must be an array of plot index handles (child first)");
  const Napi::Array arr = v.As<Napi::Array>();
  std::vector<const cpu::PlotTable*> chain;
  for (uint32_t i = 0; i < arr.Length(); ++i) chain.push_back(&table_arg(arr.Get(i), op, "chain[" + std::to_string(i) + "]"));
  return chain;
}

cpu::PlotBackoff backoff_opt(const Napi::Object& opts, const std::string& op) {
  const Napi::Value v = opts.Get("backoff");
  if (v.IsUndefined() || v.IsNull()) return cpu::PlotBackoff::None;
  const std::string name = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (name == "none") return cpu::PlotBackoff::None;
  if (name == "encoder") return cpu::PlotBackoff::Encoder;
  if (name == "causal") return cpu::PlotBackoff::Causal;
  fail(ErrorCode::InvalidArgument, op + ": option backoff must be none, encoder or causal, got \"" + name + "\"");
}

void expect_f32_rows(const Tensor& t, int64_t d, const std::string& op, const char* what) {
  expect_dtype(t, DType::F32, what);
  expect_rank(t, 2, what);
  if (t.dim(1) != d)
    fail(ErrorCode::ShapeMismatch, op + ": " + what + " " + shape_str(t.shape) + " must have rows of the hidden size " + std::to_string(d));
}

}  // namespace

TESSERA_REGISTER_OPS(plot) {
  // plotIndexCreate(expectedKeys) -> handle: an empty index sized for expectedKeys keys without growing.
  export_fn(env, exports, "plotIndexCreate", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const double expected = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
    if (!(expected >= 0 && expected <= 1e9) || expected != static_cast<double>(static_cast<int64_t>(expected)))
      fail(ErrorCode::InvalidArgument, "plotIndexCreate: expectedKeys must be an integer in [0, 1e9]");
    return wrap_table(info.Env(), std::make_unique<cpu::PlotTable>(static_cast<int64_t>(expected)));
  });

  // plotIndexClone(h) -> handle: an independent copy.
  export_fn(env, exports, "plotIndexClone", [](const Napi::CallbackInfo& info) -> Napi::Value {
    return wrap_table(info.Env(), std::make_unique<cpu::PlotTable>(table_arg(info[0], "plotIndexClone")));
  });

  // plotIndexDispose(h): frees the table now (later calls with h throw Disposed; disposing twice is a no-op).
  export_fn(env, exports, "plotIndexDispose", [](const Napi::CallbackInfo& info) -> Napi::Value {
    PlotIndexHandle& h = handle_arg(info[0], "plotIndexDispose", "index");
    h.table.reset();
    sync_external(info.Env(), h);
    return info.Env().Undefined();
  });

  // plotIndexSet(h, key, row) -> previous row or 0.
  export_fn(env, exports, "plotIndexSet", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "plotIndexSet";
    PlotIndexHandle& h = handle_arg(info[0], op, "index");
    cpu::PlotTable& t = table_arg(info[0], op);
    const uint64_t key = key_arg(info[1], op);
    const double row = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : -1;
    if (!(row >= 1 && row <= 2147483647.0) || row != static_cast<double>(static_cast<int32_t>(row)))
      fail(ErrorCode::InvalidArgument, op + ": row must be an integer in [1, 2^31) (row 0 is the reserved zero row)");
    const int32_t previous = t.set(key, static_cast<int32_t>(row));
    sync_external(info.Env(), h);
    return Napi::Number::New(info.Env(), previous);
  });

  // plotIndexGet(h, key) -> row or 0.
  export_fn(env, exports, "plotIndexGet", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const cpu::PlotTable& t = table_arg(info[0], "plotIndexGet");
    return Napi::Number::New(info.Env(), t.get(key_arg(info[1], "plotIndexGet")));
  });

  // plotIndexDelete(h, key) -> the removed row or 0.
  export_fn(env, exports, "plotIndexDelete", [](const Napi::CallbackInfo& info) -> Napi::Value {
    cpu::PlotTable& t = table_arg(info[0], "plotIndexDelete");
    return Napi::Number::New(info.Env(), t.erase(key_arg(info[1], "plotIndexDelete")));
  });

  // plotIndexGetBatch(h, keys: BigUint64Array, out: Int32Array): out[i] = get(keys[i]) (one table, no back-off).
  export_fn(env, exports, "plotIndexGetBatch", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "plotIndexGetBatch";
    const cpu::PlotTable* t = &table_arg(info[0], op);
    auto keys = keys_arg(info[1], op);
    auto out = typed_arg<int32_t>(info[2], napi_int32_array, op, "out", "Int32Array");
    if (out.ElementLength() < keys.ElementLength())
      fail(ErrorCode::ShapeMismatch, op + ": out holds " + std::to_string(out.ElementLength()) + " rows for " +
                                         std::to_string(keys.ElementLength()) + " keys");
    cpu::plot_lookup_rows(&t, 1, cpu::PlotBackoff::None, keys.Data(), static_cast<int64_t>(keys.ElementLength()), out.Data());
    return info.Env().Undefined();
  });

  // plotLookupRows(chain, keys, out, {backoff}): A2 over a chain of indexes (child first).
  export_fn(env, exports, "plotLookupRows", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "plotLookupRows";
    const std::vector<const cpu::PlotTable*> chain = chain_arg(info[0], op);
    auto keys = keys_arg(info[1], op);
    auto out = typed_arg<int32_t>(info[2], napi_int32_array, op, "out", "Int32Array");
    const cpu::PlotBackoff backoff = backoff_opt(object_arg(info, 3), op);
    if (out.ElementLength() < keys.ElementLength())
      fail(ErrorCode::ShapeMismatch, op + ": out holds " + std::to_string(out.ElementLength()) + " rows for " +
                                         std::to_string(keys.ElementLength()) + " keys");
    cpu::plot_lookup_rows(chain.data(), static_cast<int64_t>(chain.size()), backoff, keys.Data(),
                          static_cast<int64_t>(keys.ElementLength()), out.Data());
    return info.Env().Undefined();
  });

  export_fn(env, exports, "plotIndexSize", [](const Napi::CallbackInfo& info) -> Napi::Value {
    return Napi::Number::New(info.Env(), static_cast<double>(table_arg(info[0], "plotIndexSize").size()));
  });
  export_fn(env, exports, "plotIndexCapacity", [](const Napi::CallbackInfo& info) -> Napi::Value {
    return Napi::Number::New(info.Env(), static_cast<double>(table_arg(info[0], "plotIndexCapacity").capacity()));
  });
  export_fn(env, exports, "plotIndexByteLength", [](const Napi::CallbackInfo& info) -> Napi::Value {
    return Napi::Number::New(info.Env(), static_cast<double>(table_arg(info[0], "plotIndexByteLength").byte_size()));
  });
  export_fn(env, exports, "plotIndexClear", [](const Napi::CallbackInfo& info) -> Napi::Value {
    table_arg(info[0], "plotIndexClear").clear();
    sync_external(info.Env(), handle_arg(info[0], "plotIndexClear", "index"));
    return info.Env().Undefined();
  });

  // plotIndexEntries(h) -> { keys: BigUint64Array, rows: Int32Array } in slot order.
  export_fn(env, exports, "plotIndexEntries", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const cpu::PlotTable& t = table_arg(info[0], "plotIndexEntries");
    Napi::Env e = info.Env();
    const size_t n = static_cast<size_t>(t.size());
    auto keys = Napi::BigUint64Array::New(e, n);
    auto rows = Napi::Int32Array::New(e, n);
    t.entries(keys.Data(), rows.Data());
    Napi::Object out = Napi::Object::New(e);
    out.Set("keys", keys);
    out.Set("rows", rows);
    return out;
  });

  // plotLookupAggregate(chain, keys, lengths, types | null, values, posEmb, typeEmb, gamma | null, beta | null, out,
  //                     {eps, backoff, reference}): A2 lookup, gather and A3 merge + LayerNorm in one call.
  export_fn(env, exports, "plotLookupAggregate", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "plotLookupAggregate";
    const std::vector<const cpu::PlotTable*> chain = chain_arg(info[0], op);
    auto keys = keys_arg(info[1], op);
    auto lengths = typed_arg<int32_t>(info[2], napi_int32_array, op, "lengths", "Int32Array");
    const bool has_types = !info[3].IsNull() && !info[3].IsUndefined();
    Tensor& values = tensor_arg(info[4], "values");
    Tensor& pos = tensor_arg(info[5], "posEmb");
    Tensor& type_emb = tensor_arg(info[6], "typeEmb");
    Tensor* gamma = optional_tensor_arg(info[7], "gamma");
    Tensor* beta = optional_tensor_arg(info[8], "beta");
    Tensor& out = tensor_arg(info[9], "out");
    const Napi::Object opts = object_arg(info, 10);

    expect_dtype(values, DType::F16, "values");
    expect_rank(values, 3, "values");
    if (values.dim(1) != 3)
      fail(ErrorCode::ShapeMismatch, op + ": values " + shape_str(values.shape) + " must be [rows, 3, hidden] (left, centre, right slots)");
    const int64_t d = values.dim(2);
    expect_dtype(out, DType::F32, "out");
    expect_rank(out, 3, "out");
    const int64_t B = out.dim(0), T = out.dim(1);
    if (out.dim(2) != d) fail(ErrorCode::ShapeMismatch, op + ": out " + shape_str(out.shape) + " and values " + shape_str(values.shape) + " disagree on hidden");
    if (static_cast<int64_t>(lengths.ElementLength()) != B)
      fail(ErrorCode::ShapeMismatch, op + ": lengths holds " + std::to_string(lengths.ElementLength()) + " sequences, out " + shape_str(out.shape) + " " + std::to_string(B));
    expect_f32_rows(pos, d, op, "posEmb");
    expect_f32_rows(type_emb, d, op, "typeEmb");
    if (type_emb.dim(0) < 1) fail(ErrorCode::ShapeMismatch, op + ": typeEmb " + shape_str(type_emb.shape) + " has no rows");
    for (Tensor* p : {gamma, beta}) {
      if (!p) continue;
      const char* what = p == gamma ? "gamma" : "beta";
      expect_dtype(*p, DType::F32, what);
      expect_shape(*p, Shape{d}, what);
      expect_disjoint(op, out, "out", *p, what);
    }
    expect_disjoint(op, out, "out", values, "values");
    expect_disjoint(op, out, "out", pos, "posEmb");
    expect_disjoint(op, out, "out", type_emb, "typeEmb");

    // The keys.ts layout: each sequence's keys then one separator (key 0).
    const int32_t* len = lengths.Data();
    const uint64_t* k = keys.Data();
    const int64_t n_keys = static_cast<int64_t>(keys.ElementLength());
    int64_t total = 0, max_len = 0;
    for (int64_t b = 0; b < B; ++b) {
      if (len[b] < 0 || len[b] > T)
        fail(ErrorCode::ShapeMismatch, op + ": lengths[" + std::to_string(b) + "] = " + std::to_string(len[b]) + " is outside [0, " + std::to_string(T) + "] (out " + shape_str(out.shape) + ")");
      total += len[b] + 1;
      max_len = std::max<int64_t>(max_len, len[b]);
      if (total <= n_keys && k[total - 1] != 0)
        fail(ErrorCode::InvalidArgument, op + ": keys[" + std::to_string(total - 1) + "] should be the separator (0) after sequence " + std::to_string(b));
    }
    if (total != n_keys)
      fail(ErrorCode::ShapeMismatch, op + ": keys holds " + std::to_string(n_keys) + " keys, the lengths need " + std::to_string(total) + " (each sequence's keys and one separator)");
    if (pos.dim(0) < max_len)
      fail(ErrorCode::ShapeMismatch, op + ": posEmb " + shape_str(pos.shape) + " has fewer rows than the longest sequence (" + std::to_string(max_len) + ")");
    const int32_t* types = nullptr;
    if (has_types) {
      auto t = typed_arg<int32_t>(info[3], napi_int32_array, op, "types", "Int32Array");
      if (static_cast<int64_t>(t.ElementLength()) != B * T)
        fail(ErrorCode::ShapeMismatch, op + ": types holds " + std::to_string(t.ElementLength()) + " ids, out " + shape_str(out.shape) + " needs " + std::to_string(B * T));
      types = t.Data();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < len[b]; ++i)
          if (types[b * T + i] < 0 || types[b * T + i] >= type_emb.dim(0))
            fail(ErrorCode::InvalidArgument, op + ": types[" + std::to_string(b) + "][" + std::to_string(i) + "] = " + std::to_string(types[b * T + i]) +
                                                 " is outside [0, " + std::to_string(type_emb.dim(0)) + ") (typeEmb rows)");
    }

    cpu::PlotAggregateArgs a;
    a.chain = chain.data();
    a.chain_len = static_cast<int64_t>(chain.size());
    a.backoff = backoff_opt(opts, op);
    a.keys = k;
    a.n_keys = n_keys;
    a.lengths = len;
    a.batch = B;
    a.seq_len = T;
    a.types = types;
    a.values = static_cast<const f16_t*>(values.raw());
    a.value_rows = values.dim(0);
    a.hidden = d;
    a.pos_emb = pos.data<float>();
    a.type_emb = type_emb.data<float>();
    a.gamma = gamma ? gamma->data<float>() : nullptr;
    a.beta = beta ? beta->data<float>() : nullptr;
    a.eps = static_cast<float>(finite_opt(opts, "eps", 1e-12, 0, false, op));
    a.out = out.data<float>();
    if (reference_opt(opts)) cpu::plot_lookup_aggregate_ref(a);
    else cpu::plot_lookup_aggregate(a);
    return info.Env().Undefined();
  });
}
#endif  // __has_include(<napi.h>)

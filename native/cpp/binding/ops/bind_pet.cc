// N-API binding for PetS's PET operators: petSiteRun(meta, slots, tensors, {numStreams, reference}) runs one linear site's op
// list (native/src/ops/pet.ts packs it). Shared by both addons. Every check that memory safety needs runs here, before
// any kernel: dtypes, shapes, each op's rows within its tensors, the CSR index contents, aliasing inside an op, and
// that ops of different streams never touch memory another stream writes (they run concurrently). Then the list
// becomes PetOpArgs (cpu/pet_args.h) for backend_ops_{cpu,cuda}.cc.
//
// Packing (two typed arrays and the distinct tensors, so marshalling costs a few N-API calls per distinct tensor, not
// a property lookup per field):
//   meta     Float64Array [n * kMetaFields]: kind (0 csr, 1 bias, 2 adapter, 3 layernorm), stream, rows.start,
//            rows.seqs, rows.stride, rows.tokens, scale (csr), eps (layernorm), act (adapter: 0 gelu, 1 gelu_tanh)
//   slots    Int32Array [n * kTensorSlots]: per op, y, x, then the kind's parameters in the order of PetOp (csr indptr,
//            indices, values; bias bias; adapter down, downBias, up, upBias; layernorm gamma, beta), each an index
//            into `tensors` or -1 for none
//   tensors  NativeTensor[]: the distinct tensors of the call
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

constexpr int kMetaFields = 9;
constexpr int kTensorSlots = 6;
constexpr int64_t kMaxStreams = 1024;
constexpr double kMaxRowField = 2147483647.0;  // rows fields fit in 31 bits, so their products fit in int64

const char* const kKindNames[] = {"csr", "bias", "adapter", "layernorm"};
// Slot names per kind (y and x first), as PetOp names the fields.
const char* const kSlotNames[4][kTensorSlots] = {
    {"y", "x", "indptr", "indices", "values", nullptr},
    {"y", nullptr, "bias", nullptr, nullptr, nullptr},
    {"y", nullptr, "down", "downBias", "up", "upBias"},
    {"y", "x", "gamma", "beta", nullptr, nullptr},
};

// A number as JS's String() writes it (messages match the TS layer's): NaN, Infinity, integers without exponent,
// otherwise the shortest round-tripping decimal.
std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == std::floor(v) && std::fabs(v) < 9e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

struct OpCtx {
  int64_t index = 0;
  int kind = 0;
  std::string label() const { return "petSiteRun: ops[" + std::to_string(index) + "] (" + kKindNames[kind] + ")"; }
  [[noreturn]] void fail_op(ErrorCode code, const std::string& msg) const { fail(code, label() + " " + msg); }
};

const Tensor* slot(const std::vector<Tensor*>& tensors, int64_t op, int s) { return tensors[static_cast<size_t>(op * kTensorSlots + s)]; }

const Tensor& required(const OpCtx& c, const std::vector<Tensor*>& tensors, int s) {
  const Tensor* t = slot(tensors, c.index, s);
  if (!t) c.fail_op(ErrorCode::InvalidArgument, std::string(kSlotNames[c.kind][s]) + " must be a tensor");
  return *t;
}

void expect_dtype_rank(const OpCtx& c, const Tensor& t, const char* name, size_t rank, DType dtype = DType::F32) {
  if (t.dtype != dtype)
    c.fail_op(ErrorCode::DTypeMismatch, std::string(name) + " " + shape_str(t.shape) + " must be " + dtype_name(dtype) + ", got " + dtype_name(t.dtype));
  if (t.shape.size() != rank) c.fail_op(ErrorCode::ShapeMismatch, std::string(name) + " must have rank " + std::to_string(rank) + ", got " + shape_str(t.shape));
}

// A 1-D parameter of `want` elements; why() says where the length comes from (built only on failure: these checks
// run for every op on every call).
template <typename Why>
void expect_vector(const OpCtx& c, const Tensor& t, const char* name, int64_t want, Why&& why, DType dtype = DType::F32) {
  expect_dtype_rank(c, t, name, 1, dtype);
  if (t.dim(0) != want) c.fail_op(ErrorCode::ShapeMismatch, std::string(name) + " " + shape_str(t.shape) + " must be [" + std::to_string(want) + "], " + why());
}

// Operands that are read while y is written must not share its memory (x of LayerNorm may be y itself).
void disjoint(const OpCtx& c, const Tensor& y, const Tensor& in, const char* in_name, bool in_place_ok = false) {
  if (in_place_ok && y.raw() == in.raw() && y.nbytes() == in.nbytes()) return;
  if (bytes_overlap(y, in)) c.fail_op(ErrorCode::InvalidArgument, "y " + shape_str(y.shape) + " overlaps " + in_name + " " + shape_str(in.shape) + " in memory");
}

int64_t row_field(const OpCtx& c, double v, const char* name) {
  if (!std::isfinite(v) || v < 0 || v != std::floor(v) || v > kMaxRowField)
    c.fail_op(ErrorCode::InvalidArgument, std::string("rows.") + name + " must be an integer in [0, 2^31), got " + js_number(v));
  return static_cast<int64_t>(v);
}

// The CSR index contents: indptr[0] = 0, non-decreasing, indptr[out] = nnz; every row's columns strictly increasing
// and in [0, in). This runs on every call, so the pass that accepts good input is branch-free counting the compiler
// vectorises (out-of-range columns; columns not above their predecessor, minus those at row starts, where any column
// may follow); only a bad matrix takes the second, precise pass that names the first bad entry.
void check_csr_indices(const OpCtx& c, const int32_t* p, const int32_t* ix, int64_t out, int64_t nnz, int64_t in, const Tensor& x) {
  if (p[0] != 0) c.fail_op(ErrorCode::InvalidArgument, "indptr[0] = " + std::to_string(p[0]) + " must be 0");
  uint32_t descending = 0;
  for (int64_t o = 0; o < out; ++o) descending += p[o + 1] < p[o];
  if (descending) {
    for (int64_t o = 0; o < out; ++o) {
      if (p[o + 1] < p[o])
        c.fail_op(ErrorCode::InvalidArgument, "indptr must be non-decreasing: indptr[" + std::to_string(o + 1) + "] = " + std::to_string(p[o + 1]) +
                                                  " < indptr[" + std::to_string(o) + "] = " + std::to_string(p[o]));
    }
  }
  if (p[out] != nnz) c.fail_op(ErrorCode::InvalidArgument, "indices has " + std::to_string(nnz) + " entries but indptr[out] = " + std::to_string(p[out]));
  // indptr is now within [0, nnz].
  // Columns are i32: c is in range iff uint32(c) < min(in, 2^31) (a negative c wraps to >= 2^31).
  const uint32_t limit = static_cast<uint32_t>(std::min<int64_t>(in, int64_t(1) << 31));
  uint32_t outside = 0, not_increasing = 0;
  for (int64_t e = 0; e < nnz; ++e) outside += static_cast<uint32_t>(ix[e]) >= limit;
  for (int64_t e = 1; e < nnz; ++e) not_increasing += ix[e] <= ix[e - 1];
  for (int64_t o = 0; o < out; ++o) {
    const int64_t e = p[o];
    if (e > 0 && e < p[o + 1]) not_increasing -= ix[e] <= ix[e - 1];
  }
  if (outside == 0 && not_increasing == 0) return;
  for (int64_t o = 0; o < out; ++o) {
    int64_t prev = -1;
    for (int64_t e = p[o]; e < p[o + 1]; ++e) {
      const int64_t col = ix[e];
      if (col < 0 || col >= in)
        c.fail_op(ErrorCode::InvalidArgument, "indices[" + std::to_string(e) + "] = " + std::to_string(col) + " is outside [0, " + std::to_string(in) +
                                                  ") (the columns of x " + shape_str(x.shape) + ")");
      if (col <= prev)
        c.fail_op(ErrorCode::InvalidArgument, "the columns of row " + std::to_string(o) + " must be strictly increasing: indices[" + std::to_string(e) + "] = " +
                                                  std::to_string(col) + " follows indices[" + std::to_string(e - 1) + "] = " + std::to_string(prev));
      prev = col;
    }
  }
}

// CSR index structures validated before, by the addresses of indptr and indices and the sizes they were checked
// against. Ops of a task reuse one matrix on every batch, so after its first use a call only looks it up. The weak
// references tell a live tensor from a freed one whose address was reused. A validated tensor written afterwards is
// not re-checked (except with `reference`): the fast kernels clamp every index they read, so such a matrix gives
// wrong numbers, never an access outside x, indices or values.
struct CsrKey {
  const void* indptr;
  const void* indices;
  int64_t out, nnz, in;
  bool operator==(const CsrKey& o) const { return indptr == o.indptr && indices == o.indices && out == o.out && nnz == o.nnz && in == o.in; }
};
struct CsrKeyHash {
  size_t operator()(const CsrKey& k) const {
    size_t h = std::hash<const void*>()(k.indptr);
    for (const size_t v : {std::hash<const void*>()(k.indices), std::hash<int64_t>()(k.out), std::hash<int64_t>()(k.nnz), std::hash<int64_t>()(k.in)})
      h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};
struct CsrSeen {
  std::weak_ptr<Storage> indptr, indices;
};
constexpr size_t kMaxValidatedCsr = 1 << 14;

struct ValidatedCsr {
  std::mutex mu;  // sites may run on several JS threads (workers) of one process
  std::unordered_map<CsrKey, CsrSeen, CsrKeyHash> seen;
};
ValidatedCsr& validated_csr() {
  static ValidatedCsr cache;
  return cache;
}

bool same_owner(const std::weak_ptr<Storage>& w, const std::shared_ptr<Storage>& s) { return !w.expired() && !w.owner_before(s) && !s.owner_before(w); }

// ---------------------------------------------------------------- cross-stream conflicts

// A byte range one op touches: a sequence's rows of y or x (row = the tensor row it starts at) or a whole parameter
// (row = -1).
struct Span {
  uintptr_t lo = 0, hi = 0;
  int64_t op = 0;
  int slot = 0;
  bool write = false;
  int64_t row = -1;
  uint64_t row_bytes = 0;
};

std::string describe(const std::vector<int>& kinds, const Span& s, uintptr_t at) {
  std::string d = std::string(s.write ? "writes " : "reads ") + kSlotNames[kinds[static_cast<size_t>(s.op)]][s.slot];
  if (s.row >= 0) d += " row " + std::to_string(s.row + static_cast<int64_t>((at - s.lo) / s.row_bytes));
  return d;
}

// Sweeps the spans by address; any two that overlap, come from ops on different streams and include a write are a
// race (streams run concurrently). Same-stream overlaps are ordered and fine.
void check_stream_conflicts(std::vector<Span>& spans, const std::vector<int>& kinds, const std::vector<int32_t>& streams) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo || (a.lo == b.lo && a.op < b.op); });
  std::vector<const Span*> active;
  for (const Span& s : spans) {
    active.erase(std::remove_if(active.begin(), active.end(), [&](const Span* a) { return a->hi <= s.lo; }), active.end());
    for (const Span* a : active) {
      if (streams[static_cast<size_t>(a->op)] == streams[static_cast<size_t>(s.op)] || !(a->write || s.write)) continue;
      const uintptr_t at = std::max(a->lo, s.lo);
      const Span& first = a->op < s.op ? *a : s;
      const Span& second = a->op < s.op ? s : *a;
      auto name = [&](const Span& x) {
        return "ops[" + std::to_string(x.op) + "] (" + kKindNames[kinds[static_cast<size_t>(x.op)]] + ") on stream " +
               std::to_string(streams[static_cast<size_t>(x.op)]);
      };
      fail(ErrorCode::InvalidArgument, "petSiteRun: " + name(first) + " " + describe(kinds, first, at) + " and " + name(second) + " " +
                                           describe(kinds, second, at) + " (the same memory): ops on different streams must not touch memory another stream writes");
    }
    active.push_back(&s);
  }
}

void add_row_spans(std::vector<Span>& spans, const Tensor& t, const PetRows& r, int64_t op, int slot, bool write) {
  const uint64_t rb = static_cast<uint64_t>(backend::row_bytes(t));
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.raw());
  for (int64_t s = 0; s < r.seqs; ++s) {
    const int64_t row = r.start + s * r.stride;
    const uintptr_t lo = base + static_cast<uint64_t>(row) * rb;
    spans.push_back({lo, lo + static_cast<uint64_t>(r.tokens) * rb, op, slot, write, row, rb});
  }
}

// ---------------------------------------------------------------- the call

Napi::Value run(const Napi::CallbackInfo& info) {
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    fail(ErrorCode::InvalidArgument, "petSiteRun: meta must be a Float64Array");
  const Napi::Float64Array meta_arr = info[0].As<Napi::Float64Array>();
  if (meta_arr.ElementLength() % kMetaFields != 0)
    fail(ErrorCode::InvalidArgument, "petSiteRun: meta has " + std::to_string(meta_arr.ElementLength()) + " entries, not a multiple of " + std::to_string(kMetaFields));
  const int64_t n = static_cast<int64_t>(meta_arr.ElementLength() / kMetaFields);
  const double* meta = meta_arr.Data();
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    fail(ErrorCode::InvalidArgument, "petSiteRun: slots must be an Int32Array");
  const Napi::Int32Array slot_arr = info[1].As<Napi::Int32Array>();
  if (static_cast<int64_t>(slot_arr.ElementLength()) != n * kTensorSlots)
    fail(ErrorCode::InvalidArgument, "petSiteRun: slots has " + std::to_string(slot_arr.ElementLength()) + " entries, want " + std::to_string(kTensorSlots) +
                                         " per op (" + std::to_string(n * kTensorSlots) + ")");
  const int32_t* slot_ids = slot_arr.Data();
  if (!info[2].IsArray()) fail(ErrorCode::InvalidArgument, "petSiteRun: tensors must be an array of native tensors");
  const Napi::Array tensor_arr = info[2].As<Napi::Array>();
  const Napi::Object opts = object_arg(info, 3);
  const double streams_d = number_opt(opts, "numStreams", 1);
  if (!std::isfinite(streams_d) || streams_d < 1 || streams_d != std::floor(streams_d) || streams_d > static_cast<double>(kMaxStreams))
    fail(ErrorCode::InvalidArgument, "petSiteRun: numStreams must be an integer in [1, " + std::to_string(kMaxStreams) + "], got " + js_number(streams_d));
  const int32_t num_streams = static_cast<int32_t>(streams_d);
  const bool reference = reference_opt(opts);

  // Each distinct tensor is unwrapped once (the site's y and x appear in every op; unwrapping costs ~0.3 µs).
  std::vector<Tensor*> unique(tensor_arr.Length(), nullptr);
  std::vector<Tensor*> tensors(static_cast<size_t>(n * kTensorSlots), nullptr);
  std::vector<int> kinds(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double k = meta[i * kMetaFields];
    if (!(k == 0 || k == 1 || k == 2 || k == 3))
      fail(ErrorCode::InvalidArgument, "petSiteRun: ops[" + std::to_string(i) + "].kind code " + js_number(k) + " is not 0 (csr), 1 (bias), 2 (adapter) or 3 (layernorm)");
    kinds[static_cast<size_t>(i)] = static_cast<int>(k);
    for (int s = 0; s < kTensorSlots; ++s) {
      const int32_t id = slot_ids[i * kTensorSlots + s];
      if (id < 0) continue;
      const char* name = kSlotNames[static_cast<int>(k)][s];
      const OpCtx c{i, static_cast<int>(k)};
      if (!name) c.fail_op(ErrorCode::InvalidArgument, "takes no tensor in slot " + std::to_string(s));
      if (static_cast<size_t>(id) >= unique.size())
        c.fail_op(ErrorCode::InvalidArgument, std::string(name) + " is tensors[" + std::to_string(id) + "], past the " + std::to_string(unique.size()) + " tensors given");
      Tensor*& t = unique[static_cast<size_t>(id)];
      if (!t) {
        const Napi::Value v = tensor_arr.Get(static_cast<uint32_t>(id));
        if (!NativeTensor::Is(v)) c.fail_op(ErrorCode::InvalidArgument, std::string(name) + " must be a native tensor");
        t = &NativeTensor::Unwrap(v.As<Napi::Object>())->tensor(name);
      }
      tensors[static_cast<size_t>(i * kTensorSlots + s)] = t;
    }
  }

  std::vector<PetOpArgs> ops(static_cast<size_t>(n));
  std::vector<int32_t> streams(static_cast<size_t>(n));
  std::vector<int32_t> host_indptr, host_indices;
  for (int64_t i = 0; i < n; ++i) {
    const double* f = meta + i * kMetaFields;
    const OpCtx c{i, kinds[static_cast<size_t>(i)]};
    PetOpArgs& op = ops[static_cast<size_t>(i)];
    op.kind = static_cast<PetOpKind>(c.kind);
    const double stream = f[1];
    if (!std::isfinite(stream) || stream < 0 || stream >= num_streams || stream != std::floor(stream))
      fail(ErrorCode::InvalidArgument, "petSiteRun: streams[" + std::to_string(i) + "] = " + js_number(stream) + " is outside [0, " + std::to_string(num_streams) +
                                           ") (numStreams = " + std::to_string(num_streams) + ")");
    op.stream = static_cast<int32_t>(stream);
    streams[static_cast<size_t>(i)] = op.stream;
    op.rows = {row_field(c, f[2], "start"), row_field(c, f[3], "seqs"), row_field(c, f[4], "stride"), row_field(c, f[5], "tokens")};

    const Tensor& y = required(c, tensors, 0);
    expect_dtype_rank(c, y, "y", 2);
    op.y = y.data<float>();
    op.out = y.dim(1);
    auto y_cols = [&] { return "the columns of y " + shape_str(y.shape); };
    const Tensor* x = nullptr;
    if (c.kind == 0 || c.kind == 3) {
      x = &required(c, tensors, 1);
      expect_dtype_rank(c, *x, "x", 2);
      if (x->dim(0) != y.dim(0))
        c.fail_op(ErrorCode::ShapeMismatch, "x " + shape_str(x->shape) + " and y " + shape_str(y.shape) + " must have the same number of rows");
      op.x = x->data<float>();
      op.in = x->dim(1);
    }
    // The rows: sequences must not overlap each other, and must lie inside y (and x, which has y's rows).
    const PetRows& r = op.rows;
    if (r.count() > 0) {
      if (r.seqs > 1 && r.stride < r.tokens)
        c.fail_op(ErrorCode::InvalidArgument, "rows.stride = " + std::to_string(r.stride) + " must be >= rows.tokens = " + std::to_string(r.tokens) +
                                                  " when rows.seqs > 1 (sequences would overlap)");
      const int64_t end = r.start + (r.seqs - 1) * r.stride + r.tokens;
      if (end > y.dim(0))
        c.fail_op(ErrorCode::InvalidArgument, "rows end at row " + std::to_string(end) + " (start + (seqs - 1) * stride + tokens) but y " + shape_str(y.shape) +
                                                  " has " + std::to_string(y.dim(0)) + " rows");
    }

    switch (c.kind) {
      case 0: {  // csr
        const Tensor& indptr = required(c, tensors, 2);
        const Tensor& indices = required(c, tensors, 3);
        const Tensor& values = required(c, tensors, 4);
        expect_vector(c, indptr, "indptr", op.out + 1, [&] { return "out + 1 entries (out = " + y_cols() + ")"; }, DType::I32);
        expect_dtype_rank(c, indices, "indices", 1, DType::I32);
        expect_dtype_rank(c, values, "values", 1);
        if (indices.dim(0) != values.dim(0))
          c.fail_op(ErrorCode::ShapeMismatch, "indices " + shape_str(indices.shape) + " and values " + shape_str(values.shape) + " must have the same length (nnz)");
        const double scale = f[6];
        if (!std::isfinite(scale) || std::fabs(scale) > 3.4e38) c.fail_op(ErrorCode::InvalidArgument, "scale must be a finite number, got " + js_number(scale));
        disjoint(c, y, *x, "x");
        disjoint(c, y, indptr, "indptr");
        disjoint(c, y, indices, "indices");
        disjoint(c, y, values, "values");
        op.indptr = indptr.data<int32_t>();
        op.indices = indices.data<int32_t>();
        op.values = values.data<float>();
        op.nnz = values.dim(0);
        op.scale = static_cast<float>(scale);
        const CsrKey key{indptr.raw(), indices.raw(), op.out, op.nnz, op.in};
        ValidatedCsr& cache = validated_csr();
        bool known = false;
        if (!reference) {
          std::lock_guard<std::mutex> lock(cache.mu);
          const auto it = cache.seen.find(key);
          known = it != cache.seen.end() && same_owner(it->second.indptr, indptr.storage) && same_owner(it->second.indices, indices.storage);
        }
        if (!known) {
          const int32_t* p = backend::host_i32(indptr, host_indptr);
          const int32_t* ix = backend::host_i32(indices, host_indices);
          check_csr_indices(c, p, ix, op.out, op.nnz, op.in, *x);
          std::lock_guard<std::mutex> lock(cache.mu);
          if (cache.seen.size() >= kMaxValidatedCsr) {
            for (auto it = cache.seen.begin(); it != cache.seen.end();) it = it->second.indptr.expired() || it->second.indices.expired() ? cache.seen.erase(it) : std::next(it);
            if (cache.seen.size() >= kMaxValidatedCsr) cache.seen.clear();
          }
          cache.seen[key] = {indptr.storage, indices.storage};
        }
        break;
      }
      case 1: {  // bias
        const Tensor& bias = required(c, tensors, 2);
        expect_vector(c, bias, "bias", op.out, y_cols);
        disjoint(c, y, bias, "bias");
        op.bias = bias.data<float>();
        break;
      }
      case 2: {  // adapter
        const Tensor& down = required(c, tensors, 2);
        const Tensor& down_bias = required(c, tensors, 3);
        const Tensor& up = required(c, tensors, 4);
        const Tensor& up_bias = required(c, tensors, 5);
        expect_dtype_rank(c, down, "down", 2);
        if (down.dim(1) != op.out)
          c.fail_op(ErrorCode::ShapeMismatch, "down " + shape_str(down.shape) + " must be [m, " + std::to_string(op.out) + "] with d = " + y_cols());
        const int64_t m = down.dim(0);
        if (m > kPetMaxBottleneck)
          c.fail_op(ErrorCode::InvalidArgument, "bottleneck m = " + std::to_string(m) + " (the rows of down " + shape_str(down.shape) + ") exceeds " +
                                                    std::to_string(kPetMaxBottleneck));
        expect_vector(c, down_bias, "downBias", m, [&] { return "m (the rows of down " + shape_str(down.shape) + ")"; });
        expect_dtype_rank(c, up, "up", 2);
        if (up.dim(0) != op.out || up.dim(1) != m)
          c.fail_op(ErrorCode::ShapeMismatch, "up " + shape_str(up.shape) + " must be [" + std::to_string(op.out) + ", " + std::to_string(m) + "] ([d, m])");
        expect_vector(c, up_bias, "upBias", op.out, [&] { return "d (" + y_cols() + ")"; });
        const double act = f[8];
        if (!(act == 0 || act == 1 || act == 2))
          c.fail_op(ErrorCode::InvalidArgument, "act code " + js_number(act) + " is not 0 (gelu), 1 (gelu_tanh) or 2 (relu)");
        disjoint(c, y, down, "down");
        disjoint(c, y, down_bias, "downBias");
        disjoint(c, y, up, "up");
        disjoint(c, y, up_bias, "upBias");
        op.down = down.data<float>();
        op.down_bias = down_bias.data<float>();
        op.up = up.data<float>();
        op.up_bias = up_bias.data<float>();
        op.m = m;
        op.act = act == 1 ? Activation::GeluTanh : act == 2 ? Activation::Relu : Activation::GeluErf;
        break;
      }
      default: {  // layernorm
        if (x->shape != y.shape)
          c.fail_op(ErrorCode::ShapeMismatch, "x " + shape_str(x->shape) + " and y " + shape_str(y.shape) + " must have the same shape");
        const Tensor& gamma = required(c, tensors, 2);
        const Tensor& beta = required(c, tensors, 3);
        expect_vector(c, gamma, "gamma", op.out, y_cols);
        expect_vector(c, beta, "beta", op.out, y_cols);
        const double eps = f[7];
        if (!std::isfinite(eps) || eps < 0 || eps > 3.4e38) c.fail_op(ErrorCode::InvalidArgument, "eps must be a finite number >= 0, got " + js_number(eps));
        disjoint(c, y, *x, "x", true);
        disjoint(c, y, gamma, "gamma");
        disjoint(c, y, beta, "beta");
        op.gamma = gamma.data<float>();
        op.beta = beta.data<float>();
        op.eps = static_cast<float>(eps);
        break;
      }
    }
  }

  if (num_streams > 1) {
    std::vector<Span> spans;
    for (int64_t i = 0; i < n; ++i) {
      const PetOpArgs& op = ops[static_cast<size_t>(i)];
      if (op.rows.count() == 0) continue;
      const int kind = kinds[static_cast<size_t>(i)];
      add_row_spans(spans, *slot(tensors, i, 0), op.rows, i, 0, true);
      if (kind == 0 || kind == 3) add_row_spans(spans, *slot(tensors, i, 1), op.rows, i, 1, false);
      for (int s = 2; s < kTensorSlots; ++s) {
        const Tensor* t = slot(tensors, i, s);
        if (!t || t->nbytes() == 0) continue;
        const uintptr_t lo = reinterpret_cast<uintptr_t>(t->raw());
        spans.push_back({lo, lo + t->nbytes(), i, s, false, -1, 0});
      }
    }
    check_stream_conflicts(spans, kinds, streams);
  }

  if (n == 0) return info.Env().Undefined();
  PetSiteArgs args;
  args.ops = ops.data();
  args.n_ops = n;
  args.num_streams = num_streams;
  backend::pet_site(args, reference);
  return info.Env().Undefined();
}

}  // namespace

TESSERA_REGISTER_OPS(pet) {
  // petSiteRun(meta Float64Array [n * 9], slots Int32Array [n * 6], tensors NativeTensor[], {numStreams, reference}): runs one
  // site's PET ops (layout above); ops of a stream in list order, streams concurrently, one barrier at the end.
  export_fn(env, exports, "petSiteRun", [](const Napi::CallbackInfo& info) { return run(info); });
}

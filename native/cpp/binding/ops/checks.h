// Argument guards shared by the op bindings (binding/ops/bind_*.cc): memory aliasing between operands, option values
// and index ranges. The TS layer validates first; these keep a bad direct call from producing garbage, reading out
// of bounds or faulting the GPU, identically on both backends.
#pragma once
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../core/tensor.h"
#include "../napi_util.h"

namespace tessera::binding {

inline bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// `reference: true` runs the backend's plain reference kernel (the oracle the tests compare fast paths against).
inline bool reference_opt(const Napi::Object& opts) { return bool_opt(opts, "reference", false); }

// By address, so it holds for device pointers too (distinct allocations never overlap).
inline bool bytes_overlap(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a.raw()), pb = reinterpret_cast<uintptr_t>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// Operands that are read while `out` is written must not share memory with it.
inline void expect_disjoint(const std::string& op, const Tensor& out, const char* out_name, const Tensor& in, const char* in_name) {
  if (bytes_overlap(out, in))
    fail(ErrorCode::InvalidArgument, op + ": " + out_name + " " + shape_str(out.shape) + " overlaps " + in_name + " " +
                                         shape_str(in.shape) + " in memory");
}

// Row-wise ops may run in place: `out` is exactly `in` (same bytes) or shares no memory with it.
inline void expect_in_place_or_disjoint(const std::string& op, const Tensor& out, const char* out_name, const Tensor& in, const char* in_name) {
  if (out.raw() == in.raw() && out.nbytes() == in.nbytes()) return;
  expect_disjoint(op, out, out_name, in, in_name);
}

inline std::string number_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A finite number option >= min (or > min when strict).
inline double finite_opt(const Napi::Object& opts, const char* key, double fallback, double min, bool strict, const std::string& op) {
  const double v = number_opt(opts, key, fallback);
  if (!std::isfinite(v) || v < min || (strict && v == min))
    fail(ErrorCode::InvalidArgument, op + ": " + key + " must be a finite number " + (strict ? "> " : ">= ") +
                                         number_str(min) + ", got " + number_str(v));
  return v;
}

// Every index must lie in [0, limit); `what` says what the limit is. idx is a host copy (backend::read_indices).
inline void expect_indices_below(const std::string& op, const char* name, const std::vector<int32_t>& idx, int64_t limit, const std::string& what) {
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= limit)
      fail(ErrorCode::InvalidArgument, op + ": " + name + "[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                                           " is outside [0, " + std::to_string(limit) + ") (" + what + ")");
  }
}

}  // namespace tessera::binding

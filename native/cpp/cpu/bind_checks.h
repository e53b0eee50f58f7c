// Argument guards shared by the norm, rope and gather bindings: memory aliasing between operands and option
// values. (The TS layer validates first; these keep a bad direct call from producing garbage or crashing.)
#pragma once
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "../binding/napi_util.h"
#include "../core/error.h"
#include "../core/tensor.h"

namespace tessera::binding {

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

}  // namespace tessera::binding

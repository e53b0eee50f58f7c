// Comparisons with stated tolerances, and the seeded data the checks use. Every comparison reduces to the worst
// element's |got - want| / tolerance ("ratio": <= 1 passes, 0 is bitwise equal), so the report can say how close a
// passing kernel came to its bound. NaN where the reference has NaN counts as equal; NaN anywhere else fails.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace tessera::gpucheck {

struct Cmp {
  bool ok = true;
  double ratio = 0;
  std::string detail;
};

inline std::string num(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// Per-element tolerance tol(i); the shared core of the comparisons below.
template <typename TolFn>
Cmp compare_with(const float* got, const float* want, size_t n, TolFn tol, const std::string& bound) {
  Cmp c;
  size_t worst = 0;
  bool have = false;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    const double d = std::fabs(g - w);
    const double t = tol(i);
    double r;
    if (std::isnan(d)) r = std::numeric_limits<double>::infinity();
    else if (d == 0) r = 0;
    else r = t > 0 ? d / t : std::numeric_limits<double>::infinity();
    if (!have || r > c.ratio) {
      c.ratio = r;
      worst = i;
      have = true;
    }
  }
  c.ok = !(c.ratio > 1);
  if (have) c.detail = "element " + std::to_string(worst) + ": got " + num(got[worst]) + ", want " + num(want[worst]) + " (" + bound + ")";
  else c.detail = n == 0 ? "empty" : bound;
  return c;
}

inline Cmp compare_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol) {
  if (got.size() != want.size()) return {false, INFINITY, "length " + std::to_string(got.size()) + " != " + std::to_string(want.size())};
  return compare_with(got.data(), want.data(), got.size(), [&](size_t i) { return atol + rtol * std::fabs(want[i]); },
                      "rtol " + num(rtol) + ", atol " + num(atol));
}

inline Cmp compare_tol(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& tol, const std::string& bound) {
  if (got.size() != want.size()) return {false, INFINITY, "length mismatch"};
  return compare_with(got.data(), want.data(), got.size(), [&](size_t i) { return tol[i]; }, bound);
}

inline Cmp compare_bytes(const void* got, const void* want, size_t bytes, size_t elem) {
  Cmp c;
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* w = static_cast<const unsigned char*>(want);
  for (size_t i = 0; i < bytes; ++i) {
    if (g[i] != w[i]) {
      c.ok = false;
      c.ratio = INFINITY;
      c.detail = "element " + std::to_string(i / elem) + " differs (bitwise comparison)";
      return c;
    }
  }
  c.detail = "bitwise equal";
  return c;
}

template <typename T>
Cmp compare_bitwise(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return {false, INFINITY, "length mismatch"};
  return compare_bytes(got.data(), want.data(), got.size() * sizeof(T), sizeof(T));
}

// ||got - want||_2 / ||want||_2 <= tol (the SGMV and PET checks: sums over many terms of mixed sign).
inline Cmp compare_normwise(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  if (got.size() != want.size()) return {false, INFINITY, "length mismatch"};
  double num2 = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num2 += d * d;
    den += double(want[i]) * want[i];
  }
  Cmp c;
  const double err = std::sqrt(num2) / std::max(std::sqrt(den), 1e-30);
  c.ratio = std::isnan(err) ? INFINITY : err / tol;
  c.ok = !(c.ratio > 1);
  c.detail = "normwise relative error " + num(err) + " (tol " + num(tol) + ")";
  return c;
}

// Deterministic data (splitmix64): the same seed gives the same inputs on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  float uniform(float lo, float hi) { return static_cast<float>(lo + (hi - lo) * uniform()); }
  int32_t below(int32_t n) { return static_cast<int32_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = r.uniform(lo, hi);
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  Rng r(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = lo + r.below(hi - lo);
  return v;
}

}  // namespace tessera::gpucheck

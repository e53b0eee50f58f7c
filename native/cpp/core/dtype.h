// Element types shared by every backend, plus the scalar f16/bf16 conversions the references use.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace tessera {

enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2, I32 = 3, I64 = 4, U8 = 5 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

inline bool dtype_from_name(const std::string& s, DType* out) {
  static const char* names[] = {"f32", "f16", "bf16", "i32", "i64", "u8"};
  for (int i = 0; i < 6; ++i) {
    if (s == names[i]) { *out = static_cast<DType>(i); return true; }
  }
  return false;
}

using f16_t = uint16_t;
using bf16_t = uint16_t;

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// bf16 is the top half of an f32; round to nearest even, keep NaNs quiet.
inline bf16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>(u >> 16);
}
inline float bf16_to_f32(bf16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// IEEE binary16, round to nearest even, with subnormals, infinities and NaN.
inline float f16_to_f32(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: normalise
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_f32(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline f16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<f16_t>(sign | 0x7e00u);  // NaN
  if (u >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00u); // overflow (after rounding) -> inf
  if (u < 0x38800000u) {
    // subnormal or zero in f16: shift mantissa with round-to-nearest-even
    if (u < 0x33000000u) return static_cast<f16_t>(sign);  // below half the smallest subnormal
    const uint32_t exp = u >> 23;
    const uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) - ... : maps to a 10-bit subnormal mantissa
    uint32_t h = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<f16_t>(sign | h);
  }
  // normal: rebias exponent and round mantissa to 10 bits
  uint32_t h = ((u >> 13) - (112u << 10));
  const uint32_t rem = u & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<f16_t>(sign | h);
}

}  // namespace tessera

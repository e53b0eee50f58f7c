// Device-side helpers shared by the .cu files: f16/bf16 conversions bit-identical to core/dtype.h (so convert and
// embedding agree with the CPU backend bit for bit, NaNs included), and deterministic warp/block reductions.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::gpu {

constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------- conversions (ports of core/dtype.h)

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet the NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return __uint_as_float(sign);
    int e = -1;  // subnormal: normalise
    do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return __uint_as_float(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows after rounding: inf
  if (u < 0x38800000u) {                                               // f16 subnormal or zero
    if (u < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exp = u >> 23;
    const uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (u >> 13) - (112u << 10);
  const uint32_t rem = u & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// Element i of a f32 / f16 / bf16 array (dtype code as in core/dtype.h: 0 f32, 1 f16, 2 bf16) as f32; exact.
template <int kDType>
__device__ __forceinline__ float load_as_f32(const void* p, int64_t i) {
  if constexpr (kDType == 0) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (kDType == 1) {
    return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
  } else {
    return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}

// ---------------------------------------------------------------- reductions
// Fixed butterfly order: every lane ends with the same value, and the result does not depend on timing.

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024). `scratch` holds 32 floats of shared memory.
// Every warp reduces the per-warp partials in the same order, so all threads return the identical value.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();  // scratch may be reused by the next reduction
  return t;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

// ---------------------------------------------------------------- launch shapes of the row kernels (host side)

namespace row_launch {

constexpr int kRefThreads = 128;             // reference kernels: one row (or element) per thread
constexpr int64_t kMaxRowBlocks = 1 << 20;   // fast kernels: one block per row, grid-strided past this

// Enough threads that each handles about four elements, from one warp up to 512.
inline int row_threads(int64_t dim) {
  int t = 32;
  while (t < 512 && static_cast<int64_t>(t) * 4 < dim) t *= 2;
  return t;
}
inline unsigned ref_grid(int64_t n) { return static_cast<unsigned>((n + kRefThreads - 1) / kRefThreads); }
inline unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks); }

}  // namespace row_launch

}  // namespace tessera::gpu

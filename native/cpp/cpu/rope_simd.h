// Per-ISA RoPE rotation bodies (rope_avx2.cc / rope_avx512.cc). rope.cc computes each token's cos/sin table
// once and these rotate every head of that token with it.
#pragma once
#include <cstdint>

namespace tessera::cpu {

// x is one token's [heads, head_dim]; rotates pairs (i, i + half) for i < half by the angle whose cos/sin
// are cos[i] / sin[i].
void rope_rotate_avx2(float* x, int64_t heads, int64_t head_dim, int64_t half, const float* cos, const float* sin);
void rope_rotate_avx512(float* x, int64_t heads, int64_t head_dim, int64_t half, const float* cos, const float* sin);

}  // namespace tessera::cpu

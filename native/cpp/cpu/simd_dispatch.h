// Per-ISA kernel bodies, defined in *_avx2.cc / *_avx512.cc (compiled with those ISA flags). Only the
// dispatching entries in kernels.h call them, after checking active_isa().
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels.h"

namespace tessera::cpu {

void binary_avx2(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out);
void binary_avx512(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out);
void activation_avx2(Activation act, const float* x, int64_t n, float* out);
void activation_avx512(Activation act, const float* x, int64_t n, float* out);
void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out);
void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tessera::cpu

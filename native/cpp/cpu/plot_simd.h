// Per-ISA bodies of the PLOT merge (plot_avx2.cc with F16C, plot_avx512.cc), called by plot.cc after active_isa().
#pragma once
#include <cstdint>

#include "../core/dtype.h"

namespace tessera::cpu {

// z[j] = (((centre[j] + next_left[j]) + prev_right[j]) + pos[j]) + type[j] in f32, fp16 operands widened exactly;
// a null next_left / prev_right is skipped. Every path adds in this order, so every ISA gives the same bits.
void plot_merge_row_avx2(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                         const float* type, int64_t d, float* z);
void plot_merge_row_avx512(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                           const float* type, int64_t d, float* z);

}  // namespace tessera::cpu

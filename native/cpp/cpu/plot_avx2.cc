// The PLOT merge row (plot_simd.h) on AVX2 + F16C, 8 lanes; the loop is in plot_body.inl.
#include <immintrin.h>

#include "plot_simd.h"

namespace tessera::cpu {
namespace plot_avx2 {

using V = __m256;
constexpr int64_t kLanes = 8;
static inline V load_f16(const f16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
static inline V load_f32(const float* p) { return _mm256_loadu_ps(p); }
static inline void store_f32(float* p, V v) { _mm256_storeu_ps(p, v); }
static inline V add(V a, V b) { return _mm256_add_ps(a, b); }

#include "plot_body.inl"

}  // namespace plot_avx2

void plot_merge_row_avx2(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                         const float* type, int64_t d, float* z) {
  plot_avx2::merge_row(centre, next_left, prev_right, pos, type, d, z);
}

}  // namespace tessera::cpu

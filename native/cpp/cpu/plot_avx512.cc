// The PLOT merge row (plot_simd.h) on AVX-512F, 16 lanes; the loop is in plot_body.inl.
#include <immintrin.h>

#include "plot_simd.h"

namespace tessera::cpu {
namespace plot_avx512 {

using V = __m512;
constexpr int64_t kLanes = 16;
static inline V load_f16(const f16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
static inline V load_f32(const float* p) { return _mm512_loadu_ps(p); }
static inline void store_f32(float* p, V v) { _mm512_storeu_ps(p, v); }
static inline V add(V a, V b) { return _mm512_add_ps(a, b); }

#include "plot_body.inl"

}  // namespace plot_avx512

void plot_merge_row_avx512(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                           const float* type, int64_t d, float* z) {
  plot_avx512::merge_row(centre, next_left, prev_right, pos, type, d, z);
}

}  // namespace tessera::cpu

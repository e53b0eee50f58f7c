// The PLOT merge row (plot_simd.h) on AVX2 + F16C: fp16 slots widened by vcvtph2ps (exact), 8 lanes, the tail in scalar
// code with the same order of additions, so the bits match the scalar path.
#include <immintrin.h>

#include "plot_simd.h"

namespace tessera::cpu {

namespace {
inline __m256 load_f16(const f16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
}  // namespace

void plot_merge_row_avx2(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                         const float* type, int64_t d, float* z) {
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    __m256 v = load_f16(centre + j);
    if (next_left) v = _mm256_add_ps(v, load_f16(next_left + j));
    if (prev_right) v = _mm256_add_ps(v, load_f16(prev_right + j));
    v = _mm256_add_ps(v, _mm256_loadu_ps(pos + j));
    _mm256_storeu_ps(z + j, _mm256_add_ps(v, _mm256_loadu_ps(type + j)));
  }
  for (; j < d; ++j) {
    float v = f16_to_f32(centre[j]);
    if (next_left) v += f16_to_f32(next_left[j]);
    if (prev_right) v += f16_to_f32(prev_right[j]);
    v += pos[j];
    z[j] = v + type[j];
  }
}

}  // namespace tessera::cpu

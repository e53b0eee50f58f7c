// The PLOT merge row (plot_simd.h) on AVX-512F: fp16 slots widened by vcvtph2ps (exact), 16 lanes, the tail in scalar
// code with the same order of additions, so the bits match the scalar path.
#include <immintrin.h>

#include "plot_simd.h"

namespace tessera::cpu {

namespace {
inline __m512 load_f16(const f16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
}  // namespace

void plot_merge_row_avx512(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                           const float* type, int64_t d, float* z) {
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    __m512 v = load_f16(centre + j);
    if (next_left) v = _mm512_add_ps(v, load_f16(next_left + j));
    if (prev_right) v = _mm512_add_ps(v, load_f16(prev_right + j));
    v = _mm512_add_ps(v, _mm512_loadu_ps(pos + j));
    _mm512_storeu_ps(z + j, _mm512_add_ps(v, _mm512_loadu_ps(type + j)));
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

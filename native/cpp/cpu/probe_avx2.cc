// AVX2 + FMA bodies of the machine probes (see probe.cc).
#include <immintrin.h>

#include "probe_simd.h"

namespace tessera::cpu {

void stream_triad_avx2(float* a, const float* b, const float* c, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(a + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
    _mm256_storeu_ps(a + i + 8, _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) a[i] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(s), _mm_set_ss(c[i]), _mm_set_ss(b[i])));  // same rounding as the body
}

double read_sum_avx2(const float* x, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  double total = 0.0;
  for (float v : lanes) total += v;
  for (; i < n; ++i) total += x[i];
  return total;
}

double fma_chains_avx2(int64_t iters) {
  // 12 chains cover 4-cycle latency x 2 FMA pipes with margin and fit the 16 ymm registers with the constants.
  constexpr int kChains = 12;
  const __m256 m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(0.5f + 0.01f * static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0.0f;
  for (float v : lanes) total += v;
  volatile float sink = total;  // keeps every chain alive
  (void)sink;
  return 2.0 * 8.0 * kChains * static_cast<double>(iters);
}

}  // namespace tessera::cpu

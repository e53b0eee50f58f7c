// AVX-512 bodies of the machine probes (see probe.cc).
#include <immintrin.h>

#include "probe_simd.h"

namespace tessera::cpu {

namespace {
inline __mmask16 tail_mask(int64_t r) { return static_cast<__mmask16>((1u << r) - 1u); }
}  // namespace

void stream_triad_avx512(float* a, const float* b, const float* c, float s, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(a + i, _mm512_fmadd_ps(vs, _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i)));
    _mm512_storeu_ps(a + i + 16, _mm512_fmadd_ps(vs, _mm512_loadu_ps(c + i + 16), _mm512_loadu_ps(b + i + 16)));
  }
  for (; i < n; i += 16) {
    const int64_t r = n - i < 16 ? n - i : 16;
    const __mmask16 m = tail_mask(r);
    _mm512_mask_storeu_ps(a + i, m, _mm512_fmadd_ps(vs, _mm512_maskz_loadu_ps(m, c + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

double read_sum_avx512(const float* x, int64_t n) {
  // Four accumulators keep several loads in flight; one add chain would be latency-bound in cache.
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i < n; i += 16) {
    const int64_t r = n - i < 16 ? n - i : 16;
    s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(tail_mask(r), x + i));
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  double total = 0.0;
  for (float v : lanes) total += v;
  return total;
}

double fma_chains_avx512(int64_t iters) {
  // 16 independent chains: enough to cover FMA latency x throughput on Zen 4 (4 cycles x 2 pipes) and on
  // Intel server cores (4 x 2), leaving registers for the constants. x <- x*m + a converges to a/(1-m) = 1,
  // so values stay normal (no denormal slow path) and the compiler cannot fold the loop.
  constexpr int kChains = 16;
  const __m512 m = _mm512_set1_ps(0.9999999f), a = _mm512_set1_ps(1e-7f);
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(0.5f + 0.01f * static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);  // keeps the chains alive
  (void)sink;
  return 2.0 * 16.0 * kChains * static_cast<double>(iters);
}

}  // namespace tessera::cpu

// Per-ISA bodies of the machine probes (probe_avx2.cc / probe_avx512.cc, compiled with those ISA flags).
// Only the dispatching entries in probe.cc call them, after checking active_isa().
#pragma once
#include <cstdint>

namespace tessera::cpu {

void stream_triad_avx2(float* a, const float* b, const float* c, float s, int64_t n);
void stream_triad_avx512(float* a, const float* b, const float* c, float s, int64_t n);

// Sum of x[0, n) with the float lanes widened to double at the end (the probe only needs the sum to be
// used and roughly right; bandwidth is what it measures).
double read_sum_avx2(const float* x, int64_t n);
double read_sum_avx512(const float* x, int64_t n);

// Runs `iters` rounds of independent FMA chains held in registers; returns the flops performed.
double fma_chains_avx2(int64_t iters);
double fma_chains_avx512(int64_t iters);

}  // namespace tessera::cpu

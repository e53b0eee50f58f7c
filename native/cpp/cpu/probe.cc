// Machine probes for the bench roofline: STREAM triad (write + 2 reads), a read-only sum (what a decode
// GEMV does to its weights), and a peak-FMA probe (independent chains in registers, no memory traffic).
// Dispatch and the scalar paths live here; the SIMD bodies are in probe_avx2.cc / probe_avx512.cc.
#include <algorithm>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "probe_simd.h"

namespace tessera::cpu {

namespace {
// 64 Ki floats (256 KiB) per task at least: large enough that scheduling is noise next to DRAM time,
// small enough that 64 chunks of a 3 x 64 MiB working set keep both threads busy to the end.
constexpr int64_t kStreamGrain = 1 << 16;
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kFmaTasksPerThread = 4;  // dynamic claiming evens out a thread that starts late

void stream_triad_scalar(float* a, const float* b, const float* c, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

double read_sum_scalar(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  double total = 0.0;
  for (float v : acc) total += v;
  for (; i < n; ++i) total += x[i];
  return total;
}

double fma_chains_scalar(int64_t iters) {
  // The baseline ISA has no FMA instruction: x*m + a is a multiply and an add (2 flops). The compiler may pack
  // the chains into SSE2 vectors, which is what baseline-ISA code gets; 32 chains hide the mul+add latency.
  constexpr int kChains = 32;
  const float m = 0.9999999f, a = 1e-7f;
  float acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = 0.5f + 0.01f * static_cast<float>(j);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * m + a;
  float total = 0.0f;
  for (float v : acc) total += v;
  volatile float sink = total;  // keeps every chain alive
  (void)sink;
  return 2.0 * kChains * static_cast<double>(iters);
}
}  // namespace

void stream_triad(float* a, const float* b, const float* c, float s, int64_t n) {
  const Isa isa = active_isa();
  global_pool().parallel_range(n, kStreamGrain, [&](int64_t lo, int64_t hi) {
    switch (isa) {
      case Isa::Avx512: stream_triad_avx512(a + lo, b + lo, c + lo, s, hi - lo); break;
      case Isa::Avx2: stream_triad_avx2(a + lo, b + lo, c + lo, s, hi - lo); break;
      default: stream_triad_scalar(a + lo, b + lo, c + lo, s, hi - lo);
    }
  });
}

double read_sum_probe(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const Isa isa = active_isa();
  // Fixed chunking (independent of the thread count) and an in-order sum of the chunk partials, so the
  // result is the same for any number of threads.
  const int64_t chunks = std::min<int64_t>(kMaxChunks, (n + kStreamGrain - 1) / kStreamGrain);
  const int64_t per = (n + chunks - 1) / chunks;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  global_pool().parallel_for(chunks, [&](int64_t t) {
    const int64_t lo = t * per;
    const int64_t hi = std::min(n, lo + per);
    if (lo >= hi) return;
    switch (isa) {
      case Isa::Avx512: partial[static_cast<size_t>(t)] = read_sum_avx512(x + lo, hi - lo); break;
      case Isa::Avx2: partial[static_cast<size_t>(t)] = read_sum_avx2(x + lo, hi - lo); break;
      default: partial[static_cast<size_t>(t)] = read_sum_scalar(x + lo, hi - lo);
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

double fma_peak_probe(int64_t iters) {
  if (iters <= 0) return 0.0;
  const Isa isa = active_isa();
  ThreadPool& pool = global_pool();
  // Every pool thread does `iters` rounds in total, split into a few tasks each.
  const int64_t tasks = static_cast<int64_t>(pool.size()) * kFmaTasksPerThread;
  const int64_t per_task = (iters + kFmaTasksPerThread - 1) / kFmaTasksPerThread;
  std::vector<double> flops(static_cast<size_t>(tasks), 0.0);
  pool.parallel_for(tasks, [&](int64_t t) {
    double f;
    switch (isa) {
      case Isa::Avx512: f = fma_chains_avx512(per_task); break;
      case Isa::Avx2: f = fma_chains_avx2(per_task); break;
      default: f = fma_chains_scalar(per_task);
    }
    flops[static_cast<size_t>(t)] = f;
  });
  double total = 0.0;
  for (double f : flops) total += f;
  return total;
}

}  // namespace tessera::cpu

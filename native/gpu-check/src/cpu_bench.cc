// CPU GEMM micro-benchmarks (--cpu-bench): our f32 GEMM (f32 weights) against each bf16-compute tile kernel this CPU
// runs (bf16 weights), on the projection shapes of `bench gemm` at m >= 32. The ratio is bench gemm's
// bf16_compute_vs_f32, measured here too because the hosts with AMX CPUs at hand are the GPU hosts, which have no
// Node.js. Rounds alternate the kernels; each kernel's figure is the median of its calls.
#include "cpu_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../cpp/core/cpu_features.h"
#include "../../cpp/core/dtype.h"
#include "../../cpp/core/thread_pool.h"
#include "../../cpp/cpu/kernels.h"

namespace tessera::gpucheck {

namespace {

struct Shape {
  const char* layer;
  int64_t n, k;
};

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

void run_cpu_benchmarks(Report& r) {
  const Shape shapes[] = {{"bert-base 768->3072", 3072, 768}, {"llama-7b 4096->4096", 4096, 4096},
                          {"llama-7b 4096->11008", 11008, 4096}, {"llama-7b 11008->4096", 4096, 11008}};
  const int64_t rows[] = {32, 128, 512};
  std::vector<Bf16Kernel> kernels;
  if (active_isa() == Isa::Avx512)
    for (Bf16Kernel k : {Bf16Kernel::Avx512Bf16, Bf16Kernel::Amx})
      if (cpu::bf16_kernel_available(k)) kernels.push_back(k);
  std::string names = "f32";
  for (Bf16Kernel k : kernels) names += std::string(", bf16 compute on ") + cpu::bf16_kernel_name(k);
  r.info("cpu bench", "GEMM " + names + "; " + std::to_string(global_pool().size()) + " threads; GFLOP/s, median of 3 rounds x 5 calls");
  {  // the machine's memory limit, for context: STREAM triad over 3 x 128 MB, counting 3 x 4 bytes per element
    const int64_t n = int64_t(32) << 20;
    std::vector<float> x(static_cast<size_t>(n), 1.f), y(static_cast<size_t>(n), 2.f), z(static_cast<size_t>(n), 0.f);
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) {
      const double t0 = now_ms();
      cpu::stream_triad(z.data(), x.data(), y.data(), 0.5f, n);
      t.push_back(now_ms() - t0);
    }
    std::sort(t.begin(), t.end());
    r.info("cpu bench triad", fmt("%.1f GB/s", 12.0 * double(n) / t[t.size() / 2] / 1e6));
  }
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<double> worst(kernels.size(), 1e30);
  for (const Shape& s : shapes) {
    std::vector<float> w(static_cast<size_t>(s.n * s.k));
    for (float& x : w) x = u(g);
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
    for (int64_t m : rows) {
      std::vector<float> a(static_cast<size_t>(m * s.k)), c(static_cast<size_t>(m * s.n));
      for (float& x : a) x = u(g);
      GemmArgs base;
      base.m = m;
      base.n = s.n;
      base.k = s.k;
      base.a = a.data();
      base.lda = s.k;
      base.trans_b = true;
      base.ldb = s.k;
      base.c = c.data();
      base.ldc = s.n;
      std::vector<GemmArgs> calls;
      {
        GemmArgs f = base;
        f.b = w.data();
        f.b_dtype = DType::F32;
        calls.push_back(f);
      }
      for (Bf16Kernel k : kernels) {
        GemmArgs b = base;
        b.b = wb.data();
        b.b_dtype = DType::BF16;
        b.bf16_compute = true;
        b.bf16_kernel = k;
        calls.push_back(b);
      }
      std::vector<std::vector<double>> samples(calls.size());
      for (const GemmArgs& call : calls) cpu::gemm(call);  // warm-up: scratch, page faults
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < calls.size(); ++i) {
          for (int rep = 0; rep < 5; ++rep) {
            const double t0 = now_ms();
            cpu::gemm(calls[i]);
            samples[i].push_back(now_ms() - t0);
          }
        }
      }
      const double flop = 2.0 * double(m) * double(s.n) * double(s.k);
      std::vector<double> med(calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        std::sort(samples[i].begin(), samples[i].end());
        med[i] = samples[i][samples[i].size() / 2];
      }
      std::string line = "f32 " + fmt("%.0f", flop / med[0] / 1e6);
      for (size_t i = 0; i < kernels.size(); ++i) {
        const double ratio = med[0] / med[i + 1];
        worst[i] = std::min(worst[i], ratio);
        line += std::string("; ") + cpu::bf16_kernel_name(kernels[i]) + " " + fmt("%.0f", flop / med[i + 1] / 1e6) + " (" + fmt("%.2f", ratio) + "x f32)";
      }
      r.info(std::string("cpu bench ") + s.layer + " m=" + std::to_string(m), line);
    }
  }
  for (size_t i = 0; i < kernels.size(); ++i)
    r.info(std::string("cpu bench bf16_compute_vs_f32 (") + cpu::bf16_kernel_name(kernels[i]) + ", min over shapes)", fmt("%.2f", worst[i]));
}

}  // namespace tessera::gpucheck

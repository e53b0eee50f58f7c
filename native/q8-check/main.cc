#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../cpp/core/cpu_features.h"
#include "../cpp/core/thread_pool.h"
#include "../cpp/cpu/q8_simd.h"

using namespace tessera;
using namespace tessera::cpu;

static int failures = 0;
#define CHECK(c, ...) do { if (!(c)) { ++failures; std::printf("FAIL: " __VA_ARGS__); std::printf("\n"); } } while (0)

static double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static std::vector<float> rnd(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

static void check_shape(int64_t m, int64_t n, int64_t k, uint32_t seed, const std::vector<Q8Kernel>& kernels) {
  auto w = rnd(size_t(n * k), seed, 0.1f);
  auto x = rnd(size_t(m * k), seed + 1, 2.0f);
  auto bias = rnd(size_t(n), seed + 2);
  std::vector<uint8_t> wq(size_t(n * (k / 32) * 34) + 1);
  CHECK(q8_quantize(w.data(), DType::F32, n, k, wq.data()) == 0, "quantize");
  std::vector<float> ref(size_t(m * n) + 1), scalar(size_t(m * n) + 1), got(size_t(m * n) + 1);
  q8_gemm_ref(x.data(), m, k, wq.data(), n, bias.data(), ref.data());
  set_global_threads(1);
  q8_gemm(x.data(), m, k, wq.data(), n, bias.data(), scalar.data(), Q8Kernel::Scalar);
  double maxref = 1e-30, maxerr = 0;
  for (int64_t i = 0; i < m * n; ++i) { maxref = std::max(maxref, double(std::fabs(ref[i]))); maxerr = std::max(maxerr, double(std::fabs(scalar[i] - ref[i]))); }
  CHECK(maxerr <= 1e-5 * maxref * (1 + k / 256.0), "scalar vs ref m %ld n %ld k %ld: %g (max %g)", long(m), long(n), long(k), maxerr, maxref);
  for (int threads : {1, int(std::thread::hardware_concurrency())}) {
    set_global_threads(threads);
    for (Q8Kernel kk : kernels) {
      std::fill(got.begin(), got.end(), -7.0f);
      q8_gemm(x.data(), m, k, wq.data(), n, bias.data(), got.data(), kk);
      CHECK(std::memcmp(got.data(), scalar.data(), size_t(m * n) * 4) == 0, "%s (%d threads) differs from scalar at m %ld n %ld k %ld", q8_kernel_name(kk), threads, long(m), long(n), long(k));
      CHECK(got[size_t(m * n)] == -7.0f, "%s wrote past y", q8_kernel_name(kk));
    }
  }
}

int main() {
  const CpuFeatures& f = cpu_features();
  std::printf("cpu: avx2 %d avx512f %d avx512bw %d avx512vl %d; best isa %s; hardware threads %u\n", f.avx2, f.avx512f, f.avx512bw, f.avx512vl,
              isa_name(best_supported_isa()), std::thread::hardware_concurrency());
  std::vector<Q8Kernel> kernels;
  for (int i = 1; i <= 5; ++i) {
    const Q8Kernel k = static_cast<Q8Kernel>(i);
    std::printf("kernel %-12s %s\n", q8_kernel_name(k), q8_kernel_available(k) ? "available" : "-");
    if (q8_kernel_available(k)) kernels.push_back(k);
  }
  std::printf("auto: %s\n", q8_kernel_name(q8_auto_kernel()));
  uint32_t seed = 1;
  for (int64_t m = 0; m <= 32; ++m) check_shape(m, 37, 96, seed++, kernels);
  const int64_t shapes[][3] = {{1, 300, 1024}, {16, 129, 512}, {32, 70, 2048}, {5, 1, 32}, {3, 0, 64}, {0, 5, 64}, {4, 9, 0}, {2, 2000, 64}, {7, 513, 768}};
  for (auto& s : shapes) check_shape(s[0], s[1], s[2], seed++, kernels);
  // NaN propagation: one row with a NaN
  {
    const int64_t n = 5, k = 64;
    auto w = rnd(size_t(n * k), 9, 0.1f);
    std::vector<uint8_t> wq(size_t(n * 2 * 34));
    q8_quantize(w.data(), DType::F32, n, k, wq.data());
    auto x = rnd(size_t(2 * k), 10);
    x[size_t(k + 5)] = NAN;
    for (Q8Kernel kk : kernels) {
      std::vector<float> y(size_t(2 * n));
      q8_gemm(x.data(), 2, k, wq.data(), n, nullptr, y.data(), kk);
      for (int c = 0; c < n; ++c) CHECK(std::isfinite(y[c]) && std::isnan(y[n + c]), "%s NaN row", q8_kernel_name(kk));
    }
  }
  std::printf("correctness: %s (%d failures)\n", failures ? "FAILED" : "ok", failures);

  // ---- timing
  const int hw = int(std::thread::hardware_concurrency());
  for (int threads : {hw, 2}) {
    set_global_threads(threads);
    // triad over 3 x 64 MiB
    const int64_t N = int64_t(1) << 24;
    std::vector<float> a(static_cast<size_t>(N)), b(static_cast<size_t>(N), 1.0f), c(static_cast<size_t>(N), 2.0f);
    double best = 1e30;
    for (int r = 0; r < 10; ++r) {
      const double t0 = now_ms();
      global_pool().parallel_range(N, 1 << 16, [&](int64_t i0, int64_t i1) { for (int64_t i = i0; i < i1; ++i) a[size_t(i)] = b[size_t(i)] + 3.0f * c[size_t(i)]; });
      best = std::min(best, now_ms() - t0);
    }
    const double triad = 3.0 * 4 * N / (best * 1e6);
    std::printf("threads %d: triad %.1f GB/s\n", threads, triad);
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}, {4096, 11008}, {2048, 768}}) {
      const int64_t bytes = n * k / 32 * 34;
      const int copies = int(std::min<int64_t>(16, std::max<int64_t>(2, (int64_t(400) << 20) / bytes)));
      std::vector<std::vector<uint8_t>> ws(static_cast<size_t>(copies));
      auto w = rnd(size_t(n * k), 3, 0.1f);
      for (auto& q : ws) { q.resize(size_t(bytes)); q8_quantize(w.data(), DType::F32, n, k, q.data()); }
      for (int64_t m : {1, 16}) {
        auto x = rnd(size_t(m * k), 4);
        std::vector<float> y(size_t(m * n));
        std::vector<double> ts;
        for (int r = 0; r < 3 * copies; ++r) {
          const double t0 = now_ms();
          q8_gemm(x.data(), m, k, ws[size_t(r % copies)].data(), n, nullptr, y.data());
          ts.push_back(now_ms() - t0);
        }
        std::sort(ts.begin(), ts.end());
        const double med = ts[ts.size() / 2];
        std::printf("  q8 %s n %ld k %ld m %ld: %.3f ms, %.1f GB/s (%.0f%% of triad), %.1f GMAC/s\n", q8_kernel_name(q8_auto_kernel()), long(n), long(k), long(m), med,
                    bytes / (med * 1e6), 100.0 * bytes / (med * 1e6) / triad, double(m) * n * k / (med * 1e6));
      }
    }
  }
  return failures ? 1 : 0;
}

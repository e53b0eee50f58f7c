// The GPU micro-benchmarks: each kernel family at serving sizes, timed with CUDA events (median of 7 samples, each
// averaging enough back-to-back calls to last >= 2 ms, after a warm-up call). Memory-bound kernels report the bytes
// they must move at least once (weights, KV cache, activations read and written) over the time, as a fraction of
// the device's peak DRAM bandwidth (memory clock x bus width, from cudaDeviceGetAttribute); compute-bound ones report
// useful FLOP/s as a fraction of the dense peak of the unit they run on (tensor cores by input type, else FP32),
// stated per compute capability below. A device-to-device copy is measured first: the bandwidth reachable at all.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../cpp/core/dtype.h"
#include "../../cpp/cuda/cuda_check.h"
#include "../../cpp/cuda/cuda_kernels.h"
#include "compare.h"
#include "cuda_target.h"

namespace tessera::gpucheck {

double cuda_peak_flops(const CudaDeviceFacts& f, const std::string& kind) {
  // Dense FLOP per clock per SM (an FMA counts 2). Sources: the NVIDIA A100 (GA100), GA102 / AD102 and H100 (GH100)
  // architecture whitepapers; Blackwell (B200) from its datasheet. 8.6 / 8.9 are the professional cards' rates
  // (GeForce cards halve f16 / bf16 with f32 accumulation). The WMMA kernels here use mma.sync, which on Hopper
  // reaches well under the wgmma peak quoted for 9.0.
  const int cc = f.major * 10 + f.minor;
  double per_sm = 0;
  if (kind == "fp32") {
    per_sm = cc == 80 ? 128 : (cc >= 86 ? 256 : 0);
  } else if (kind == "bf16 tensor" || kind == "f16 tensor") {
    per_sm = cc == 80 ? 2048 : (cc == 86 || cc == 87 || cc == 89) ? 1024 : cc == 90 ? 4096 : cc == 100 ? 8192 : 0;
  } else if (kind == "tf32 tensor") {
    per_sm = cc == 80 ? 1024 : (cc == 86 || cc == 87 || cc == 89) ? 512 : cc == 90 ? 2048 : cc == 100 ? 4096 : 0;
  }
  return per_sm * f.sms * f.sm_clock_hz;
}

namespace {

using gpu::check_cuda;

class DevMem {
 public:
  explicit DevMem(size_t bytes) { check_cuda(cudaMalloc(&p_, std::max<size_t>(bytes, 64)), "cudaMalloc"); }
  ~DevMem() {
    if (cudaFree(p_) != cudaSuccess) (void)cudaGetLastError();
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
};

template <typename T>
std::unique_ptr<DevMem> upload(const std::vector<T>& host) {
  auto d = std::make_unique<DevMem>(host.size() * sizeof(T));
  if (!host.empty()) check_cuda(cudaMemcpy(d->template as<void>(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

std::unique_ptr<DevMem> random_device(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return upload(random_floats(n, seed, lo, hi));
}

std::unique_ptr<DevMem> random_device_half(size_t n, uint64_t seed, DType dt) {
  const std::vector<float> v = random_floats(n, seed);
  std::vector<uint16_t> bits(n);
  for (size_t i = 0; i < n; ++i) bits[i] = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  return upload(bits);
}

// Median milliseconds per call.
double time_ms(const std::function<void()>& fn) {
  fn();
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  check_cuda(cudaEventCreate(&a), "cudaEventCreate");
  check_cuda(cudaEventCreate(&b), "cudaEventCreate");
  auto timed = [&](int reps) {
    check_cuda(cudaEventRecord(a), "cudaEventRecord");
    for (int i = 0; i < reps; ++i) fn();
    check_cuda(cudaEventRecord(b), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return static_cast<double>(ms) / reps;
  };
  const double one = std::max(timed(1), 1e-4);
  const int reps = static_cast<int>(std::clamp(std::ceil(2.0 / one), 1.0, 500.0));
  std::vector<double> samples;
  for (int s = 0; s < 7; ++s) samples.push_back(timed(reps));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

class Bench {
 public:
  Bench(Report& r, const CudaDeviceFacts& f) : r_(r), f_(f) {}

  // bytes: the minimum traffic; flops: useful work; peak: "" when the kernel is bandwidth-bound only.
  void run(const std::string& family, const std::string& name, double bytes, double flops, const std::string& peak,
           const std::function<void()>& fn, const std::string& note = "") {
    BenchResult b;
    b.family = family;
    b.name = name;
    b.note = note;
    try {
      b.ms = time_ms(fn);
      const double s = b.ms / 1e3;
      if (bytes > 0) {
        b.gbps = bytes / s / 1e9;
        if (f_.hbm_bytes_per_s() > 0) b.bw_frac = bytes / s / f_.hbm_bytes_per_s();
      }
      if (flops > 0) {
        b.tflops = flops / s / 1e12;
        if (!peak.empty()) {
          const double p = cuda_peak_flops(f_, peak);
          b.peak_kind = p > 0 ? peak + " " + num(p / 1e12).substr(0, 6) + " TF" : peak + " (no figure for this device)";
          if (p > 0) b.peak_frac = flops / s / p;
        }
      }
    } catch (const std::exception& e) {
      b.note = std::string("FAILED: ") + e.what();
      CheckResult c;
      c.part = "cuda";
      c.family = family;
      c.name = "benchmark " + name;
      c.pass = false;
      c.ratio = INFINITY;
      c.detail = e.what();
      r_.add(c);
    }
    r_.add(b);
  }

 private:
  Report& r_;
  const CudaDeviceFacts& f_;
};

void gemm_benches(Bench& b) {
  // Square 4096: tensor cores per B dtype, and the f32 SIMT kernel against the FP32 peak.
  const int64_t s = 4096;
  auto A = random_device(static_cast<size_t>(s * s), 1);
  auto C = std::make_unique<DevMem>(static_cast<size_t>(s * s) * 4);
  auto Bf = random_device(static_cast<size_t>(s * s), 2);
  auto Bh = random_device_half(static_cast<size_t>(s * s), 3, DType::F16);
  auto Bb = random_device_half(static_cast<size_t>(s * s), 4, DType::BF16);
  auto run = [&](const std::string& name, int64_t m, int64_t n, int64_t k, DType bt, gpu::GemmKernel kern, const std::string& peak) {
    GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = A->as<float>();
    g.lda = k;
    g.b = bt == DType::F32 ? Bf->as<void>() : bt == DType::F16 ? Bh->as<void>() : Bb->as<void>();
    g.b_dtype = bt;
    g.trans_b = true;  // [n, k] weights, as every Linear
    g.ldb = k;
    g.c = C->as<float>();
    g.ldc = n;
    const double bytes = 4.0 * m * k + double(dtype_size(bt)) * n * k + 4.0 * m * n;
    b.run("gemm", name, peak.empty() || m <= 8 ? bytes : 0, 2.0 * m * n * k, peak, [=]() { gpu::gemm(g, 1, 0, 0, 0, kern); });
  };
  run("tensor 4096^3 B f32 (TF32)", s, s, s, DType::F32, gpu::GemmKernel::Tensor, "tf32 tensor");
  run("tensor 4096^3 B bf16", s, s, s, DType::BF16, gpu::GemmKernel::Tensor, "bf16 tensor");
  run("tensor 4096^3 B f16", s, s, s, DType::F16, gpu::GemmKernel::Tensor, "f16 tensor");
  run("simt 4096^3 B f32", s, s, s, DType::F32, gpu::GemmKernel::Simt, "fp32");
  run("tensor Llama 512x4096x4096 B bf16", 512, s, s, DType::BF16, gpu::GemmKernel::Tensor, "bf16 tensor");
  // Decode: the weight stream dominates; reported against HBM bandwidth.
  run("skinny decode m=1 4096x4096 B bf16", 1, s, s, DType::BF16, gpu::GemmKernel::Skinny, "");
  run("skinny decode m=1 4096x4096 B f32", 1, s, s, DType::F32, gpu::GemmKernel::Skinny, "");
  run("skinny decode m=8 4096x4096 B f32", 8, s, s, DType::F32, gpu::GemmKernel::Skinny, "");
}

void sgmv_benches(Bench& b) {
  // Punica's shapes: h = 4096, rank 16; 64 rows as 64 distinct adapters (one row each) or one adapter (Identical).
  const int64_t h = 4096, r = 16, rows = 64;
  auto x = random_device(static_cast<size_t>(rows * h), 10), v = random_device(static_cast<size_t>(rows * r), 11);
  auto ys = std::make_unique<DevMem>(static_cast<size_t>(rows * r) * 4), ye = std::make_unique<DevMem>(static_cast<size_t>(rows * h) * 4);
  cudaMemset(ys->as<void>(), 0, static_cast<size_t>(rows * r) * 4);
  cudaMemset(ye->as<void>(), 0, static_cast<size_t>(rows * h) * 4);
  auto wA = random_device(static_cast<size_t>(rows * r * h), 12, -0.01f, 0.01f), wB = random_device(static_cast<size_t>(rows * r * h), 13, -0.01f, 0.01f);
  const int64_t chunks = (h + kSgmvChunk - 1) / kSgmvChunk;
  for (bool distinct : {true, false}) {
    const int64_t n_groups = distinct ? rows : 1, per = distinct ? 1 : rows;
    std::vector<gpu::SgmvGpuGroup> ga, gb;
    int64_t parts = 0;
    for (int64_t g = 0; g < n_groups; ++g) {
      ga.push_back({wA->as<float>() + g * r * h, r, g * per, per, parts, 1.f});
      gb.push_back({wB->as<float>() + g * r * h, r, g * per, per, 0, 1.f});
      parts += per * r * chunks;
    }
    auto ta = upload(ga), tb = upload(gb);
    auto partials = std::make_unique<DevMem>(static_cast<size_t>(parts) * 4);
    gpu::SgmvLaunch ls{x->as<float>(), ys->as<float>(), h, r, ta->as<gpu::SgmvGpuGroup>(), n_groups, per, r, nullptr, partials->as<float>()};
    gpu::SgmvLaunch le{v->as<float>(), ye->as<float>(), h, r, tb->as<gpu::SgmvGpuGroup>(), n_groups, per, r, nullptr, nullptr};
    const double w_bytes = 4.0 * n_groups * r * h;
    const double flops = 2.0 * rows * r * h;
    const std::string tag = distinct ? "64 rows x 64 adapters (Distinct)" : "64 rows x 1 adapter (Identical)";
    b.run("sgmv", "shrink h4096 r16 " + tag, w_bytes + 4.0 * rows * h + 8.0 * rows * r, distinct ? 0 : flops, distinct ? "" : "fp32",
          [=]() { gpu::sgmv_shrink(ls, false); });
    b.run("sgmv", "expand h4096 r16 " + tag, w_bytes + 4.0 * rows * r + 8.0 * rows * h, distinct ? 0 : flops, distinct ? "" : "fp32",
          [=]() { gpu::sgmv_expand(le, false); });
  }
}

void attention_benches(Bench& b) {
  // Decode: 32 sequences x 2048 tokens of context, 32 query heads over 8 KV heads, d = 128: the KV cache read once.
  {
    const int64_t batch = 32, ctx = 2048, nh = 32, nkv = 8, d = 128;
    const int64_t pages_per = ctx / kPageSize, pages = batch * pages_per;
    auto q = random_device(static_cast<size_t>(batch * nh * d), 20);
    auto k = random_device(static_cast<size_t>(pages * kPageSize * nkv * d), 21), v = random_device(static_cast<size_t>(pages * kPageSize * nkv * d), 22);
    auto out = std::make_unique<DevMem>(static_cast<size_t>(batch * nh * d) * 4);
    std::vector<int32_t> table(static_cast<size_t>(pages)), lens(static_cast<size_t>(batch), static_cast<int32_t>(ctx));
    for (int64_t i = 0; i < pages; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % pages);  // scattered pages
    auto dt = upload(table), dl = upload(lens);
    DecodeAttentionArgs a;
    a.q = q->as<float>();
    a.k_cache = k->as<float>();
    a.v_cache = v->as<float>();
    a.out = out->as<float>();
    a.block_table = dt->as<int32_t>();
    a.context_lens = dl->as<int32_t>();
    a.batch = batch;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.num_pages = pages;
    a.max_pages = pages_per;
    a.scale = 1.f / std::sqrt(static_cast<float>(d));
    const double kv_bytes = 2.0 * batch * ctx * nkv * d * 4;
    b.run("attention", "decode 32 seqs x 2048 ctx, heads 32/8, d128", kv_bytes, 0, "", [=]() { gpu::attention_decode(a, false); });
  }
  // Prefill: 4 sequences of 1024 tokens, causal, heads 32/8, d = 128 (SIMT kernel: against the FP32 peak).
  {
    const int64_t batch = 4, seq = 1024, nh = 32, nkv = 8, d = 128;
    auto q = random_device(static_cast<size_t>(batch * seq * nh * d), 23), out = std::make_unique<DevMem>(static_cast<size_t>(batch * seq * nh * d) * 4);
    auto k = random_device(static_cast<size_t>(batch * seq * nkv * d), 24), v = random_device(static_cast<size_t>(batch * seq * nkv * d), 25);
    PrefillAttentionArgs a;
    a.q = q->as<float>();
    a.k = k->as<float>();
    a.v = v->as<float>();
    a.out = out->as<float>();
    a.batch = batch;
    a.seq = seq;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.causal = true;
    a.scale = 1.f / std::sqrt(static_cast<float>(d));
    const double flops = 4.0 * batch * nh * (seq * (seq + 1) / 2.0) * d;  // QK^T and PV over the causal triangle
    b.run("attention", "prefill causal 4 x 1024, heads 32/8, d128", 0, flops, "fp32", [=]() { gpu::attention_prefill(a, false); },
          "SIMT (not tensor-core) kernel");
  }
}

void pet_benches(Bench& b) {
  // One site of 4096 rows x 1024 features; each op kind over all rows.
  const int64_t rows = 4096, d = 1024, in = 1024, m = 64;
  auto x = random_device(static_cast<size_t>(rows * in), 30), y = random_device(static_cast<size_t>(rows * d), 31);
  // CSR S [d, in] at 5% density (a MaskBert / Diff-Pruning delta).
  std::vector<int32_t> indptr = {0}, indices;
  Rng rng(32);
  for (int64_t o = 0; o < d; ++o) {
    for (int64_t i = 0; i < in; ++i)
      if (rng.below(20) == 0) indices.push_back(static_cast<int32_t>(i));
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  const int64_t nnz = static_cast<int64_t>(indices.size());
  auto dip = upload(indptr), dind = upload(indices), dval = random_device(static_cast<size_t>(nnz), 33, -1e-3f, 1e-3f);
  // Small adapter weights and biases: the ops run in place thousands of times, and y must stay finite.
  auto bias = random_device(static_cast<size_t>(d), 34, -1e-3f, 1e-3f), down = random_device(static_cast<size_t>(m * d), 35, -1e-3f, 1e-3f),
       down_b = random_device(static_cast<size_t>(m), 36, -1e-3f, 1e-3f), up = random_device(static_cast<size_t>(d * m), 37, -1e-3f, 1e-3f),
       up_b = random_device(static_cast<size_t>(d), 38, -1e-3f, 1e-3f), gamma = random_device(static_cast<size_t>(d), 39),
       beta = random_device(static_cast<size_t>(d), 40);
  PetOpArgs base;
  base.rows = {0, 1, 0, rows};
  base.y = y->as<float>();
  base.out = d;
  const double y_rw = 8.0 * rows * d;
  auto site = [](std::vector<PetOpArgs> ops, int streams) {
    return [ops, streams]() { gpu::pet_site({ops.data(), static_cast<int64_t>(ops.size()), streams}, false); };
  };
  PetOpArgs csr = base;
  csr.kind = PetOpKind::Csr;
  csr.x = x->as<float>();
  csr.in = in;
  csr.indptr = dip->as<int32_t>();
  csr.indices = dind->as<int32_t>();
  csr.values = dval->as<float>();
  csr.nnz = nnz;
  csr.scale = -1.f;
  b.run("pet", "csr 4096 rows, S 1024x1024 at 5%", y_rw + 4.0 * rows * in + 8.0 * nnz, 2.0 * rows * nnz, "fp32", site({csr}, 1));
  PetOpArgs bo = base;
  bo.kind = PetOpKind::Bias;
  bo.bias = bias->as<float>();
  b.run("pet", "bias 4096 x 1024", y_rw, 0, "", site({bo}, 1));
  PetOpArgs ad = base;
  ad.kind = PetOpKind::Adapter;
  ad.down = down->as<float>();
  ad.down_bias = down_b->as<float>();
  ad.up = up->as<float>();
  ad.up_bias = up_b->as<float>();
  ad.m = m;
  b.run("pet", "adapter 4096 x 1024, bottleneck 64", y_rw + 8.0 * m * d, 4.0 * rows * m * d, "fp32", site({ad}, 1));
  PetOpArgs ln = base;
  ln.kind = PetOpKind::LayerNorm;
  ln.x = y->as<float>();
  ln.in = d;
  ln.gamma = gamma->as<float>();
  ln.beta = beta->as<float>();
  ln.eps = 1e-12f;
  b.run("pet", "layernorm 4096 x 1024", y_rw, 0, "", site({ln}, 1));
  // 16 tasks of 256 rows each, on 4 streams: bias then LayerNorm per task.
  std::vector<PetOpArgs> ops;
  for (int task = 0; task < 16; ++task) {
    PetOpArgs t1 = bo, t2 = ln;
    t1.rows = t2.rows = {task * 256, 1, 0, 256};
    t1.stream = t2.stream = task % 4;
    ops.push_back(t1);
    ops.push_back(t2);
  }
  b.run("pet", "16 tasks x (bias, layernorm) on 4 streams", 2 * y_rw, 0, "", site(ops, 4));
}

}  // namespace

void run_cuda_benchmarks(Report& r, const CudaDeviceFacts& f) {
  Bench b(r, f);
  {
    const size_t bytes = size_t(1) << 30;
    DevMem src(bytes), dst(bytes);
    check_cuda(cudaMemset(src.as<void>(), 1, bytes), "cudaMemset");
    b.run("memory", "cudaMemcpy device to device 1 GiB", 2.0 * bytes, 0, "",
          [&]() { check_cuda(cudaMemcpyAsync(dst.as<void>(), src.as<void>(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync"); },
          "read + write: the bandwidth reachable at all");
  }
  {
    const int64_t n = int64_t(64) << 20;
    auto a = random_device(static_cast<size_t>(n), 5), c = random_device(static_cast<size_t>(n), 6);
    DevMem out(static_cast<size_t>(n) * 4);
    b.run("elementwise", "add 64M floats", 12.0 * n, 0, "", [&]() { gpu::binary(BinaryOp::Add, a->as<float>(), n, c->as<float>(), n, out.as<float>(), false); });
    b.run("norm", "layer_norm 65536 x 1024", 8.0 * n, 0, "",
          [&]() { gpu::layer_norm(a->as<float>(), 65536, 1024, nullptr, nullptr, 1e-5f, out.as<float>(), false); });
  }
  gemm_benches(b);
  sgmv_benches(b);
  attention_benches(b);
  pet_benches(b);
}

}  // namespace tessera::gpucheck

// The CUDA device as a check target: cudaMalloc'd memory and the launchers of cuda/cuda_kernels.h (the same .cu
// files tessera_cuda.node links), called as cuda/backend_ops_cuda.cc calls them. That file's host-side glue (the
// SGMV group table, the training kernels' scratch) needs the N-API device, so it is restated here in a few lines;
// everything that runs on the GPU is the addon's own code.
#include "cuda_target.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "../../cpp/core/error.h"
#include "../../cpp/cuda/cuda_check.h"
#include "../../cpp/cuda/cuda_kernels.h"

namespace tessera::gpucheck {

namespace {

using gpu::check_cuda;

class CudaTarget final : public Target {
 public:
  std::string part() const override { return "cuda"; }
  std::string name() const override { return "cuda"; }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    // Never null, like the addon's allocator (a zero-byte tensor still has an address).
    check_cuda(cudaMalloc(&p, std::max<size_t>(bytes, 64)), ("cudaMalloc(" + std::to_string(bytes) + ")").c_str());
    return p;
  }
  void release(void* p) override {
    if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(host to device)");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    // Waits for the kernels queued before it, and reports their faults.
    if (bytes) check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(device to host)");
  }
  void sync() override {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check_cuda(cudaGetLastError(), "cudaGetLastError");
  }

  std::vector<Variant> variants() const override { return {{"fast", false}, {"reference", true}}; }

  std::vector<GemmVariant> gemm_variants(int64_t m, int64_t n, int64_t k) const override {
    const gpu::GemmKernel a = gpu::gemm_auto_kernel(m, n, k);
    const char* resolved = a == gpu::GemmKernel::Skinny ? "skinny" : a == gpu::GemmKernel::Simt ? "simt" : a == gpu::GemmKernel::Tensor ? "tensor" : "?";
    std::vector<GemmVariant> v = {
        {std::string("auto(") + resolved + ")", static_cast<int>(gpu::GemmKernel::Auto), false, a == gpu::GemmKernel::Tensor},
        {"reference", static_cast<int>(gpu::GemmKernel::Reference), true, false},
        {"simt", static_cast<int>(gpu::GemmKernel::Simt), false, false},
        {"tensor", static_cast<int>(gpu::GemmKernel::Tensor), false, true},
    };
    if (m <= gpu::kSkinnyMaxRows) v.push_back({"skinny", static_cast<int>(gpu::GemmKernel::Skinny), false, false});
    return v;
  }

  void gemm(const GemmArgs& a, int64_t batch, int64_t sa, int64_t sb, int64_t sc, const GemmVariant& v) override {
    gpu::gemm(a, batch, sa, sb, sc, static_cast<gpu::GemmKernel>(v.kernel));
  }
  void embedding(const void* table, DType dt, int64_t dim, const int32_t* ids, int64_t n, float* out, bool ref) override {
    gpu::embedding(table, dt, dim, ids, n, out, ref);
  }
  void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst) override {
    gpu::gather_rows(src, row_bytes, idx, n, dst);
  }
  // backend_ops_cuda.cc's scatter: parallel writes to one row would race, so repeated destinations are reduced to
  // their last source first and the kernel gets explicit (source, destination) lists.
  void scatter_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst, const std::vector<int32_t>& host_idx) override {
    std::unordered_map<int32_t, int32_t> last;
    for (size_t i = 0; i < host_idx.size(); ++i) last[host_idx[i]] = static_cast<int32_t>(i);
    if (last.size() == host_idx.size()) {
      gpu::scatter_rows(src, row_bytes, nullptr, idx, n, dst);
      return;
    }
    std::vector<int32_t> pairs;  // [src rows..., dst rows...], in source order
    for (size_t i = 0; i < host_idx.size(); ++i)
      if (last[host_idx[i]] == static_cast<int32_t>(i)) pairs.push_back(static_cast<int32_t>(i));
    const int64_t kept = static_cast<int64_t>(pairs.size());
    for (int64_t i = 0; i < kept; ++i) pairs.push_back(host_idx[static_cast<size_t>(pairs[static_cast<size_t>(i)])]);
    Buf list = put(*this, pairs);
    gpu::scatter_rows(src, row_bytes, list.as<int32_t>(), list.as<int32_t>() + kept, kept, dst);
    sync();  // the list is freed on return
  }
  void convert(const void* src, DType sd, void* dst, DType dd, int64_t n, bool ref) override { gpu::convert(src, sd, dst, dd, n, ref); }
  void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t bn, float* out, bool ref) override {
    gpu::binary(op, a, n, b, bn, out, ref);
  }
  void scale(const float* x, int64_t n, float s, float* out, bool ref) override { gpu::scale(x, n, s, out, ref); }
  void activation(Activation act, const float* x, int64_t n, float* out, bool ref) override { gpu::activation(act, x, n, out, ref); }
  void silu_mul(const float* g, const float* u, int64_t n, float* out, bool ref) override { gpu::silu_mul(g, u, n, out, ref); }
  void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out, bool ref) override {
    gpu::layer_norm(x, rows, dim, gamma, beta, eps, out, ref);
  }
  void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out, bool ref) override {
    gpu::rms_norm(x, rows, dim, gamma, eps, out, ref);
  }
  void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out, bool ref) override { gpu::softmax(x, rows, dim, scale, out, ref); }
  void rope(float* x, int64_t tokens, int64_t heads, int64_t hd, int64_t rot, const int32_t* pos, float base, bool inverse, bool ref) override {
    gpu::rope(x, tokens, heads, hd, rot, pos, base, inverse, ref);
  }
  void attention_prefill(const PrefillAttentionArgs& a, bool ref) override { gpu::attention_prefill(a, ref); }
  void attention_decode(const DecodeAttentionArgs& a, bool ref) override { gpu::attention_decode(a, ref); }
  void sgmv_shrink(const SgmvArgs& a, bool ref) override { run_sgmv(a, ref, false); }
  void sgmv_expand(const SgmvArgs& a, bool ref) override { run_sgmv(a, ref, true); }
  void pet_site(const PetSiteArgs& a, bool ref) override { gpu::pet_site(a, ref); }

  void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                      float* dbeta, bool accumulate, bool ref) override {
    Buf stats(*this, static_cast<size_t>(std::max<int64_t>(1, rows)) * 2 * sizeof(double));
    gpu::layer_norm_bwd(x, dy, rows, dim, gamma, eps, dx, dgamma, dbeta, accumulate, stats.as<double>(), ref);
    sync();  // the scratch is freed on return
  }
  void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                    bool accumulate, bool ref) override {
    Buf stats(*this, static_cast<size_t>(std::max<int64_t>(1, rows)) * 2 * sizeof(double));
    gpu::rms_norm_bwd(x, dy, rows, dim, gamma, eps, dx, dgamma, accumulate, stats.as<double>(), ref);
    sync();
  }
  void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx, bool ref) override {
    gpu::softmax_bwd(y, dy, rows, dim, scale, dx, ref);
  }
  void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx, bool ref) override {
    gpu::activation_bwd(act, x, dy, n, dx, ref);
  }
  void silu_mul_bwd(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du, bool ref) override {
    gpu::silu_mul_bwd(g, u, dy, n, dg, du, ref);
  }
  void cross_entropy(const CrossEntropyArgs& a, bool ref) override { gpu::cross_entropy(a, ref); }
  void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate, bool ref) override {
    gpu::column_sum(x, rows, cols, out, accumulate, ref);
  }
  void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate, bool ref) override {
    gpu::embedding_bwd(dy, ids, n, dim, vocab, dtable, accumulate, ref);
  }
  void attention_prefill_bwd(const PrefillAttentionBwdArgs& args, bool ref) override {
    const int64_t rows = args.batch * args.seq * args.n_heads;
    const size_t width = ref ? sizeof(double) : sizeof(float);
    Buf lse(*this, static_cast<size_t>(std::max<int64_t>(1, rows)) * width), delta(*this, static_cast<size_t>(std::max<int64_t>(1, rows)) * width);
    PrefillAttentionBwdArgs a = args;
    a.row_lse = lse.as<float>();
    a.row_delta = delta.as<float>();
    gpu::attention_prefill_bwd(a, ref);
    sync();
  }
  void adamw(const AdamWArgs& a, bool ref) override { gpu::adamw(a, ref); }
  double sum_squares(const float* x, int64_t n, bool ref) override {
    const int64_t count = gpu::sum_squares_partials_count(n, ref);
    if (count == 0) return 0.0;
    Buf partials(*this, static_cast<size_t>(count) * sizeof(double));
    gpu::sum_squares_partials(x, n, partials.as<double>(), ref);
    std::vector<double> host = get<double>(*this, partials, static_cast<size_t>(count));
    double s = 0;
    for (double p : host) s += p;  // in chunk order, as the addon sums them
    return s;
  }

 private:
  // backend_ops_cuda.cc's run_sgmv: the group table (with each group's shrink partials offset) and the row list go to
  // the device, the shrink partials are allocated, and the launcher runs.
  void run_sgmv(const SgmvArgs& a, bool reference, bool expand) {
    const int64_t chunks = (a.h + kSgmvChunk - 1) / kSgmvChunk;
    std::vector<gpu::SgmvGpuGroup> groups(static_cast<size_t>(a.n_segments));
    int64_t parts = 0, max_rows = 0, max_r = 0, ids = 0;
    for (int64_t g = 0; g < a.n_segments; ++g) {
      const SgmvSegment& s = a.segments[g];
      groups[static_cast<size_t>(g)] = {s.w, s.r, s.row_begin, s.rows, parts, s.scale};
      if (!expand && !reference) parts += s.rows * s.r * chunks;
      max_rows = std::max(max_rows, s.rows);
      max_r = std::max(max_r, s.r);
      ids = std::max(ids, s.row_begin + s.rows);
    }
    if (groups.empty()) return;
    Buf table = put(*this, groups);
    Buf row_ids, partials;
    if (a.row_ids) row_ids = put(*this, std::vector<int32_t>(a.row_ids, a.row_ids + ids));
    if (parts > 0) partials = Buf(*this, static_cast<size_t>(parts) * sizeof(float));
    gpu::SgmvLaunch l;
    l.x = a.x;
    l.y = a.y;
    l.h = a.h;
    l.r_max = a.r_max;
    l.groups = table.as<gpu::SgmvGpuGroup>();
    l.n_groups = static_cast<int64_t>(groups.size());
    l.max_rows = max_rows;
    l.max_r = max_r;
    l.row_ids = a.row_ids ? row_ids.as<int32_t>() : nullptr;
    l.partials = parts > 0 ? partials.as<float>() : nullptr;
    if (expand) gpu::sgmv_expand(l, reference);
    else gpu::sgmv_shrink(l, reference);
    sync();  // the tables are freed on return
  }
};

}  // namespace

std::unique_ptr<Target> make_cuda_target() { return std::make_unique<CudaTarget>(); }

std::string cuda_select_device(CudaDeviceFacts* facts, bool make_current) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  }
  if (count == 0) return "cudaGetDeviceCount: no CUDA device is visible";
  int index = 0;
  if (const char* v = std::getenv("TESSERA_CUDA_DEVICE")) index = std::max(0, std::atoi(v));
  if (index >= count) return "TESSERA_CUDA_DEVICE=" + std::to_string(index) + " but " + std::to_string(count) + " device(s) are visible";
  // cudaSetDevice creates the device's context (CUDA 12+): only the process that runs kernels does it, so the parent
  // holds no context while its children run (a GPU in exclusive-process mode admits one).
  if (make_current) {
    err = cudaSetDevice(index);
    if (err != cudaSuccess) return std::string("cudaSetDevice: ") + cudaGetErrorString(err);
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err);
  CudaDeviceFacts f;
  f.index = index;
  f.name = prop.name;
  f.major = prop.major;
  f.minor = prop.minor;
  f.sms = prop.multiProcessorCount;
  f.total_memory = prop.totalGlobalMem;
  f.l2_bytes = prop.l2CacheSize;
  // cudaDeviceProp lost its clock fields in CUDA 13; the attributes remain (kHz).
  int clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, index);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index);
  (void)cudaGetLastError();
  f.sm_clock_hz = clock_khz * 1e3;
  f.mem_clock_hz = mem_clock_khz * 1e3;
  f.bus_bits = bus_bits;
  cudaDriverGetVersion(&f.driver_version);
  cudaRuntimeGetVersion(&f.runtime_version);
  if (facts) *facts = f;
  if (f.major < 8)
    return f.name + " has compute capability " + std::to_string(f.major) + "." + std::to_string(f.minor) +
           "; the kernels are built for 8.0 and 9.0 (sm_80, sm_90)";
  return "";
}

}  // namespace tessera::gpucheck

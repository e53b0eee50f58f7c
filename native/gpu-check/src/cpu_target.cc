// The CPU as a check target: host memory, and the dispatching cpu:: kernels at the active ISA (cpu/kernels.h), so the
// checks compare each optimized path with the scalar references exactly as native/test/*.test.ts do through the addon.
#include "cpu_target.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "../../cpp/core/cpu_features.h"
#include "../../cpp/cpu/kernels.h"

namespace tessera::gpucheck {

namespace {

class CpuTarget final : public Target {
 public:
  explicit CpuTarget(std::string fault_family) : fault_family_(std::move(fault_family)) {}
  std::string part() const override { return "cpu"; }
  std::string name() const override { return std::string("cpu ") + isa_name(active_isa()); }

  void* alloc(size_t bytes) override {
    // 64-byte aligned and never null, like the addon's HostAllocator (zero-byte tensors get a valid pointer).
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    if (!fault_family_.empty() && bytes >= 4 && current_check().rfind(fault_family_ + ":", 0) == 0) {
      unsigned char* b = static_cast<unsigned char*>(dst);
      b[3] ^= 0x40;  // the first f32's exponent (or the first word's high byte): far outside any tolerance
    }
  }
  void sync() override {}

  // The scalar references are the oracle, so the CPU target offers its dispatching path only.
  std::vector<Variant> variants() const override { return {{"fast", false}}; }
  // Beside it, the bf16-compute kernels (GemmArgs::bf16_kernel): the rounded path at every ISA, and at AVX-512 each
  // tile kernel this CPU runs, the AMX one also emulated (its tiling checked where the CPU has no AMX).
  std::vector<GemmVariant> gemm_variants(int64_t, int64_t, int64_t) const override {
    std::vector<GemmVariant> v = {{"fast", 0, false, false}};
    auto bf16 = [&](Bf16Kernel k) {
      GemmVariant g{std::string("bf16c ") + cpu::bf16_kernel_name(k), static_cast<int>(k), false, false};
      g.bf16_compute = true;
      v.push_back(g);
    };
    bf16(Bf16Kernel::Rounded);
    if (active_isa() == Isa::Avx512) {
      for (Bf16Kernel k : {Bf16Kernel::Avx512Bf16, Bf16Kernel::Amx, Bf16Kernel::AmxEmulated})
        if (cpu::bf16_kernel_available(k)) bf16(k);
    }
    return v;
  }

  void gemm(const GemmArgs& args, int64_t batch, int64_t sa, int64_t sb, int64_t sc, const GemmVariant& v) override {
    GemmArgs a = args;
    a.bf16_compute = v.bf16_compute;
    a.bf16_kernel = v.bf16_compute ? static_cast<Bf16Kernel>(v.kernel) : Bf16Kernel::Auto;
    if (batch == 1 && sa == 0 && sb == 0 && sc == 0) cpu::gemm(a);
    else cpu::gemm_batched(a, batch, sa, sb, sc);
  }
  void embedding(const void* table, DType dt, int64_t dim, const int32_t* ids, int64_t n, float* out, bool ref) override {
    (ref ? cpu::embedding_ref : cpu::embedding)(table, dt, dim, ids, n, out);
  }
  void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst) override {
    cpu::gather_rows(src, row_bytes, idx, n, dst);
  }
  void scatter_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst, const std::vector<int32_t>&) override {
    cpu::scatter_rows(src, row_bytes, idx, n, dst);
  }
  void convert(const void* src, DType sd, void* dst, DType dd, int64_t n, bool ref) override {
    (ref ? cpu::convert_ref : cpu::convert)(src, sd, dst, dd, n);
  }
  void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t bn, float* out, bool ref) override {
    (ref ? cpu::binary_ref : cpu::binary)(op, a, n, b, bn, out);
  }
  void scale(const float* x, int64_t n, float s, float* out, bool ref) override { (ref ? cpu::scale_ref : cpu::scale)(x, n, s, out); }
  void activation(Activation act, const float* x, int64_t n, float* out, bool ref) override {
    (ref ? cpu::activation_ref : cpu::activation)(act, x, n, out);
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out, bool ref) override { (ref ? cpu::silu_mul_ref : cpu::silu_mul)(g, u, n, out); }
  void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out, bool ref) override {
    (ref ? cpu::layer_norm_ref : cpu::layer_norm)(x, rows, dim, gamma, beta, eps, out);
  }
  void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out, bool ref) override {
    (ref ? cpu::rms_norm_ref : cpu::rms_norm)(x, rows, dim, gamma, eps, out);
  }
  void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out, bool ref) override {
    (ref ? cpu::softmax_ref : cpu::softmax)(x, rows, dim, scale, out);
  }
  void rope(float* x, int64_t tokens, int64_t heads, int64_t hd, int64_t rot, const int32_t* pos, float base, bool inverse, bool ref) override {
    (ref ? cpu::rope_ref : cpu::rope)(x, tokens, heads, hd, rot, pos, base, inverse);
  }
  void attention_prefill(const PrefillAttentionArgs& a, bool ref) override { (ref ? cpu::attention_prefill_ref : cpu::attention_prefill)(a); }
  void attention_decode(const DecodeAttentionArgs& a, bool ref) override { (ref ? cpu::attention_decode_ref : cpu::attention_decode)(a); }
  void sgmv_shrink(const SgmvArgs& a, bool ref) override { (ref ? cpu::sgmv_shrink_ref : cpu::sgmv_shrink)(a); }
  void sgmv_expand(const SgmvArgs& a, bool ref) override { (ref ? cpu::sgmv_expand_ref : cpu::sgmv_expand)(a); }
  void pet_site(const PetSiteArgs& a, bool ref) override { (ref ? cpu::pet_site_ref : cpu::pet_site)(a); }
  void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                      float* dbeta, bool accumulate, bool ref) override {
    (ref ? cpu::layer_norm_bwd_ref : cpu::layer_norm_bwd)(x, dy, rows, dim, gamma, eps, dx, dgamma, dbeta, accumulate);
  }
  void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx, float* dgamma,
                    bool accumulate, bool ref) override {
    (ref ? cpu::rms_norm_bwd_ref : cpu::rms_norm_bwd)(x, dy, rows, dim, gamma, eps, dx, dgamma, accumulate);
  }
  void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx, bool ref) override {
    (ref ? cpu::softmax_bwd_ref : cpu::softmax_bwd)(y, dy, rows, dim, scale, dx);
  }
  void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx, bool ref) override {
    (ref ? cpu::activation_bwd_ref : cpu::activation_bwd)(act, x, dy, n, dx);
  }
  void silu_mul_bwd(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du, bool ref) override {
    (ref ? cpu::silu_mul_bwd_ref : cpu::silu_mul_bwd)(g, u, dy, n, dg, du);
  }
  void cross_entropy(const CrossEntropyArgs& a, bool ref) override { (ref ? cpu::cross_entropy_ref : cpu::cross_entropy)(a); }
  void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate, bool ref) override {
    (ref ? cpu::column_sum_ref : cpu::column_sum)(x, rows, cols, out, accumulate);
  }
  void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate, bool ref) override {
    (ref ? cpu::embedding_bwd_ref : cpu::embedding_bwd)(dy, ids, n, dim, vocab, dtable, accumulate);
  }
  void attention_prefill_bwd(const PrefillAttentionBwdArgs& a, bool ref) override {
    (ref ? cpu::attention_prefill_bwd_ref : cpu::attention_prefill_bwd)(a);
  }
  void adamw(const AdamWArgs& a, bool ref) override { (ref ? cpu::adamw_ref : cpu::adamw)(a); }
  double sum_squares(const float* x, int64_t n, bool ref) override {
    const double s = (ref ? cpu::sum_squares_ref : cpu::sum_squares)(x, n);
    return !fault_family_.empty() && current_check().rfind(fault_family_ + ":", 0) == 0 ? s * 1.5 + 1 : s;
  }

 private:
  std::string fault_family_;
};

}  // namespace

std::unique_ptr<Target> make_cpu_target(const std::string& fault_family) { return std::make_unique<CpuTarget>(fault_family); }

}  // namespace tessera::gpucheck

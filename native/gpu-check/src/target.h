// A Target is where the kernels under test run: the CPU (its optimized, dispatching kernels at one ISA) or a CUDA
// device (its fast and reference kernels). The checks (checks.cc) are written once against this interface and
// compare every kernel a target runs with the CPU's scalar `_ref` kernels (cpu/kernels.h) on host copies.
// Pointers handed to a target's kernels are its own memory (Buf); argument structs use the shared types of
// core/op_args.h and cpu/pet_args.h, so both targets take exactly what the addons' backends take.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../../cpp/core/op_args.h"
#include "../../cpp/cpu/pet_args.h"
#include "report.h"

namespace tessera::gpucheck {

// A kernel path a target offers: CPU "fast" (the dispatching entry at the active ISA); CUDA "fast" and "reference"
// (its double-accumulating oracle kernels, which must agree with the CPU's references too).
struct Variant {
  std::string name;
  bool reference = false;
};

// GEMM kernels by name, with the CUDA launcher's GemmKernel value (cuda_kernels.h); the CPU has "fast" and its
// bf16-compute kernels.
struct GemmVariant {
  std::string name;
  int kernel = 0;
  bool reference = false;  // double accumulation, rounded once: the tight tolerance applies
  bool tensor = false;     // inputs rounded to TF32 / f16 / bf16: the tensor-core tolerance applies
  bool bf16_compute = false;  // CPU: GemmArgs::bf16_compute through kernel (a Bf16Kernel); checked against the
                              // reference on the bf16-rounded operands
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string part() const = 0;  // "cpu" | "cuda"
  virtual std::string name() const = 0;  // e.g. "cpu avx512", "cuda"

  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Waits for queued work and throws if it faulted (CUDA's asynchronous errors surface here).
  virtual void sync() = 0;

  virtual std::vector<Variant> variants() const = 0;
  // The GEMM kernels that accept these sizes (CUDA's skinny only for m <= 8), each with the path it resolves to.
  virtual std::vector<GemmVariant> gemm_variants(int64_t m, int64_t n, int64_t k) const = 0;

  virtual void gemm(const GemmArgs& a, int64_t batch, int64_t sa, int64_t sb, int64_t sc, const GemmVariant& v) = 0;
  virtual void embedding(const void* table, DType dt, int64_t dim, const int32_t* ids, int64_t n, float* out, bool ref) = 0;
  virtual void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst) = 0;
  // dst[idx[i]] = src[i]; with repeated destinations the last source row wins. host_idx is idx on the host (the
  // CUDA backend removes the repeats there before its launch, as backend_ops_cuda.cc does).
  virtual void scatter_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst,
                            const std::vector<int32_t>& host_idx) = 0;
  virtual void convert(const void* src, DType sd, void* dst, DType dd, int64_t n, bool ref) = 0;
  virtual void binary(BinaryOp op, const float* a, int64_t n, const float* b, int64_t bn, float* out, bool ref) = 0;
  virtual void scale(const float* x, int64_t n, float s, float* out, bool ref) = 0;
  virtual void activation(Activation act, const float* x, int64_t n, float* out, bool ref) = 0;
  virtual void silu_mul(const float* g, const float* u, int64_t n, float* out, bool ref) = 0;
  virtual void layer_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out,
                          bool ref) = 0;
  virtual void rms_norm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out, bool ref) = 0;
  virtual void softmax(const float* x, int64_t rows, int64_t dim, float scale, float* out, bool ref) = 0;
  virtual void rope(float* x, int64_t tokens, int64_t heads, int64_t hd, int64_t rot, const int32_t* pos, float base, bool inverse,
                    bool ref) = 0;
  virtual void attention_prefill(const PrefillAttentionArgs& a, bool ref) = 0;
  virtual void attention_decode(const DecodeAttentionArgs& a, bool ref) = 0;
  // a.segments / a.row_ids are host memory (as the bindings pass them); x, y and the weights are target memory.
  virtual void sgmv_shrink(const SgmvArgs& a, bool ref) = 0;
  virtual void sgmv_expand(const SgmvArgs& a, bool ref) = 0;
  // a.ops is host memory; the pointers inside are target memory.
  virtual void pet_site(const PetSiteArgs& a, bool ref) = 0;
  virtual void layer_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                              float* dgamma, float* dbeta, bool accumulate, bool ref) = 0;
  virtual void rms_norm_bwd(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps, float* dx,
                            float* dgamma, bool accumulate, bool ref) = 0;
  virtual void softmax_bwd(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx, bool ref) = 0;
  virtual void activation_bwd(Activation act, const float* x, const float* dy, int64_t n, float* dx, bool ref) = 0;
  virtual void silu_mul_bwd(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du, bool ref) = 0;
  virtual void cross_entropy(const CrossEntropyArgs& a, bool ref) = 0;
  virtual void column_sum(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate, bool ref) = 0;
  virtual void embedding_bwd(const float* dy, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab, float* dtable, bool accumulate,
                             bool ref) = 0;
  virtual void attention_prefill_bwd(const PrefillAttentionBwdArgs& a, bool ref) = 0;
  virtual void adamw(const AdamWArgs& a, bool ref) = 0;
  virtual double sum_squares(const float* x, int64_t n, bool ref) = 0;
};

// Target memory owned by one Buf (move-only).
class Buf {
 public:
  Buf() = default;
  Buf(Target& t, size_t bytes) : t_(&t), bytes_(bytes), p_(t.alloc(bytes)) {}
  ~Buf() { reset(); }
  Buf(Buf&& o) noexcept : t_(o.t_), bytes_(o.bytes_), p_(o.p_) { o.p_ = nullptr; }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      reset();
      t_ = o.t_;
      bytes_ = o.bytes_;
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;

  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  void* raw() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (p_ && t_) t_->release(p_);
    p_ = nullptr;
  }
  Target* t_ = nullptr;
  size_t bytes_ = 0;
  void* p_ = nullptr;
};

template <typename T>
Buf put(Target& t, const std::vector<T>& host) {
  Buf b(t, host.size() * sizeof(T));
  if (!host.empty()) t.upload(b.raw(), host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> get(Target& t, const Buf& b, size_t n) {
  std::vector<T> host(n);
  if (n) t.download(host.data(), b.raw(), n * sizeof(T));
  return host;
}

// Runs every check of one kernel family on a target, recording into the report (checks.cc). Throws only when the
// target itself fails (a CUDA error), which the caller records against the check that was running.
void run_family_checks(Target& t, Report& r, const std::string& family, const std::string& name_prefix);

// The check that is running now (for the report when a target throws or a child process dies).
const std::string& current_check();
// Called as each check starts and with each result (the CUDA child process streams them to its parent).
void set_check_listener(std::function<void(const std::string&)> fn);
void set_result_listener(std::function<void(const CheckResult&)> fn);

}  // namespace tessera::gpucheck

// The CPU backend's "device": host memory under a byte budget, copies are memcpy, plus CPU-only controls
// (thread count, ISA cap) that tests use to compare paths.
#include <napi.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "../binding/device.h"
#include "../binding/napi_util.h"
#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"

namespace tessera::binding {

namespace {

class CpuDevice final : public Device {
 public:
  // Default budget: 16 GiB, more than a CI machine should ever use for tests; apps set their own.
  CpuDevice() : alloc_(budget_from_env(16ull << 30)) {}
  const char* name() const override { return "cpu"; }
  Allocator& allocator() override { return alloc_; }
  void upload(void* dst, const void* src, uint64_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, uint64_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, uint64_t bytes) override { if (bytes) std::memmove(dst, src, bytes); }
  void describe(Napi::Env env, Napi::Object out) override {
    const CpuFeatures& f = cpu_features();
    out.Set("isa", Napi::String::New(env, isa_name(active_isa())));
    out.Set("bestIsa", Napi::String::New(env, isa_name(best_supported_isa())));
    out.Set("threads", Napi::Number::New(env, global_pool().size()));
    out.Set("hardwareThreads", Napi::Number::New(env, std::thread::hardware_concurrency()));
    Napi::Object feats = Napi::Object::New(env);
    feats.Set("avx2", f.avx2);
    feats.Set("fma", f.fma);
    feats.Set("f16c", f.f16c);
    feats.Set("avx512f", f.avx512f);
    feats.Set("avx512bw", f.avx512bw);
    feats.Set("avx512vl", f.avx512vl);
    feats.Set("avx512dq", f.avx512dq);
    feats.Set("avx512bf16", f.avx512bf16);
    feats.Set("amxtile", f.amx_tile);
    feats.Set("amxbf16", f.amx_bf16);
    feats.Set("amxint8", f.amx_int8);
    out.Set("features", feats);
    // What gemm's compute 'bf16' runs on bf16 weights (amx needs the kernel's tile-state grant as well as CPUID).
    out.Set("bf16Kernel", Napi::String::New(env, cpu::bf16_kernel_name(cpu::bf16_auto_kernel())));
  }

 private:
  HostAllocator alloc_;
};

}  // namespace

Device& device() {
  static CpuDevice* d = new CpuDevice();  // never destroyed: tensors may be finalized during teardown
  return *d;
}

}  // namespace tessera::binding

using namespace tessera;
using namespace tessera::binding;

TESSERA_REGISTER_OPS(cpu_controls) {
  export_fn(env, exports, "setThreads", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const int n = info[0].As<Napi::Number>().Int32Value();
    if (n < 1 || n > 1024) fail(ErrorCode::InvalidArgument, "setThreads: thread count must be 1..1024");
    set_global_threads(n);
    return Napi::Number::New(info.Env(), global_pool().size());
  });
  // Diagnostic for tests: runs `tasks` pool tasks of which task `throw_at` throws, and returns how many ran.
  // Proves a failing task surfaces as a JS error on the caller and leaves the pool usable.
  export_fn(env, exports, "_poolFailureProbe", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const int64_t tasks = info[0].As<Napi::Number>().Int64Value();
    const int64_t throw_at = info[1].As<Napi::Number>().Int64Value();
    std::atomic<int64_t> ran{0};
    global_pool().parallel_for(tasks, [&](int64_t t) {
      if (t == throw_at) fail(ErrorCode::InvalidArgument, "pool task " + std::to_string(t) + " failed on purpose");
      ran.fetch_add(1, std::memory_order_relaxed);
    });
    return Napi::Number::New(info.Env(), static_cast<double>(ran.load()));
  });
  export_fn(env, exports, "setIsa", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string want = info[0].As<Napi::String>().Utf8Value();
    Isa isa;
    if (want == "scalar") isa = Isa::Scalar;
    else if (want == "avx2") isa = Isa::Avx2;
    else if (want == "avx512") isa = Isa::Avx512;
    else if (want == "best") isa = best_supported_isa();
    else fail(ErrorCode::InvalidArgument, "setIsa: expected scalar, avx2, avx512 or best, got " + want);
    set_active_isa(isa);
    return Napi::String::New(info.Env(), isa_name(active_isa()));
  });
}

// The CUDA backend's "device": device memory under a byte budget, copies through cudaMemcpy on the legacy
// default stream (so they are ordered with every kernel), and the cudaDeviceCount probe the loader uses.
//
// The module must load on a machine without a GPU or driver (the loader then falls back to CPU), so nothing here
// touches the CUDA runtime at load time: the device is initialised on first use (the first allocation, copy,
// stats query or info()), and a failure there becomes a DeviceError for that call.
#include <napi.h>

#include <cuda_runtime.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "../binding/device.h"
#include "../binding/napi_util.h"
#include "cuda_check.h"
#include "device_cuda.h"

namespace tessera::binding {

namespace {

// Device memory under the byte budget. When the device supports memory pools, allocations are stream-ordered
// (cudaMallocAsync / cudaFreeAsync on the legacy default stream, the stream every op and copy here runs on): a free
// is queued behind the kernels that may still use the memory instead of synchronising the device as cudaFree does,
// and freed blocks are kept in the pool for reuse (the budget, not the pool, bounds what is held). Otherwise, or
// with TESSERA_CUDA_MALLOC=sync, it is plain cudaMalloc / cudaFree.
class CudaAllocator final : public Allocator {
 public:
  // The real budget is set when the device is first initialised (it depends on the device's memory).
  CudaAllocator() : Allocator(0) {}
  const char* name() const override { return "cuda"; }

  void use_pool(cudaMemPool_t pool) { pool_ = pool; }
  bool pooled() const { return pool_ != nullptr; }

 protected:
  void* raw_allocate(uint64_t bytes) override {
    gpu::ensure_current_device();
    void* p = nullptr;
    const std::string call = std::string(pool_ ? "cudaMallocAsync(" : "cudaMalloc(") + std::to_string(bytes) + " bytes)";
    if (!pool_) {
      gpu::check_cuda(cudaMalloc(&p, static_cast<size_t>(bytes)), call.c_str());
      return p;
    }
    cudaError_t err = cudaMallocAsync(&p, static_cast<size_t>(bytes), 0);
    if (err == cudaErrorMemoryAllocation) {
      // The pool may hold freed blocks that do not fit this request: wait for pending frees, return every unused
      // block to the device, and try once more.
      (void)cudaGetLastError();
      gpu::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      gpu::check_cuda(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo");
      err = cudaMallocAsync(&p, static_cast<size_t>(bytes), 0);
    }
    gpu::check_cuda(err, call.c_str());
    return p;
  }
  void raw_free(void* p, uint64_t) override {
    // Frees also run from finalizers during process teardown, when the runtime may already be unloading; an error
    // there must not throw out of a destructor. The stream-ordered free goes to the current device's default
    // stream, so make sure that is this backend's device on whatever thread drops the last reference.
    try {
      gpu::ensure_current_device();
    } catch (...) {
    }
    const cudaError_t err = pool_ ? cudaFreeAsync(p, 0) : cudaFree(p);
    if (err != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  cudaMemPool_t pool_ = nullptr;
};

struct DeviceFacts {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;
  uint64_t total_memory = 0;
  int multiprocessors = 0;
  int driver_version = 0, runtime_version = 0;
};

// TESSERA_CUDA_DEVICE picks the GPU (default 0); CUDA_VISIBLE_DEVICES still applies underneath.
int device_index_from_env() {
  if (const char* v = std::getenv("TESSERA_CUDA_DEVICE")) {
    const int i = std::atoi(v);
    if (i >= 0) return i;
  }
  return 0;
}

class CudaDevice final : public Device {
 public:
  const char* name() const override { return "cuda"; }

  Allocator& allocator() override {
    init();
    return alloc_;
  }

  void upload(void* dst, const void* host_src, uint64_t bytes) override {
    // May run on a libuv worker thread: the current device is per host thread.
    init();
    gpu::ensure_current_device();
    if (bytes) gpu::check_cuda(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(host to device)");
  }

  void download(void* host_dst, const void* src, uint64_t bytes) override {
    init();
    gpu::ensure_current_device();
    // Waits for every kernel queued before it on the default stream, so a read sees finished results.
    if (bytes) gpu::check_cuda(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(device to host)");
  }

  void copy(void* dst, const void* src, uint64_t bytes) override {
    init();
    gpu::ensure_current_device();
    if (!bytes || dst == src) return;
    const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
    if (d < s + bytes && s < d + bytes) {
      // Overlapping views of one storage: cudaMemcpy's result is undefined there, so stage through a scratch buffer
      // (the CPU backend's memmove semantics), charged to the budget like any allocation.
      void* tmp = alloc_.allocate(bytes);
      const cudaError_t e1 = cudaMemcpy(tmp, src, bytes, cudaMemcpyDeviceToDevice);
      const cudaError_t e2 = e1 == cudaSuccess ? cudaMemcpy(dst, tmp, bytes, cudaMemcpyDeviceToDevice) : e1;
      alloc_.deallocate(tmp, bytes);  // stream-ordered (or synchronising) free: after both copies
      gpu::check_cuda(e2, "cudaMemcpy(device to device)");
      return;
    }
    gpu::check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy(device to device)");
  }

  void synchronize() override {
    init();
    gpu::ensure_current_device();
    gpu::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  void describe(Napi::Env env, Napi::Object out) override {
    init();
    out.Set("name", Napi::String::New(env, facts_.name));
    out.Set("computeCapability", Napi::String::New(env, std::to_string(facts_.major) + "." + std::to_string(facts_.minor)));
    out.Set("totalMemory", Napi::Number::New(env, double(facts_.total_memory)));
    out.Set("multiprocessors", Napi::Number::New(env, facts_.multiprocessors));
    out.Set("deviceIndex", Napi::Number::New(env, facts_.index));
    out.Set("driverVersion", Napi::Number::New(env, facts_.driver_version));
    out.Set("runtimeVersion", Napi::Number::New(env, facts_.runtime_version));
    out.Set("allocator", Napi::String::New(env, alloc_.pooled() ? "cudaMallocAsync" : "cudaMalloc"));
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      out.Set("freeMemory", Napi::Number::New(env, double(free_bytes)));
    } else {
      (void)cudaGetLastError();
    }
  }

  int index() {
    init();
    return facts_.index;
  }

 private:
  // Initialises once; a failure is remembered and rethrown on every later use (CUDA initialisation errors are
  // sticky for the process anyway).
  void init() {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::Ready) return;
    if (state_ == State::Failed) throw Error(ErrorCode::Device, failure_);
    try {
      facts_.index = device_index_from_env();
      int count = 0;
      gpu::check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      if (facts_.index >= count)
        fail(ErrorCode::Device, "cuda: device " + std::to_string(facts_.index) + " requested (TESSERA_CUDA_DEVICE) but " +
                                    std::to_string(count) + " device(s) are visible");
      gpu::check_cuda(cudaSetDevice(facts_.index), "cudaSetDevice");
      cudaDeviceProp prop{};
      gpu::check_cuda(cudaGetDeviceProperties(&prop, facts_.index), "cudaGetDeviceProperties");
      facts_.name = prop.name;
      facts_.major = prop.major;
      facts_.minor = prop.minor;
      facts_.total_memory = prop.totalGlobalMem;
      facts_.multiprocessors = prop.multiProcessorCount;
      cudaDriverGetVersion(&facts_.driver_version);
      cudaRuntimeGetVersion(&facts_.runtime_version);
      if (facts_.major < 8)
        fail(ErrorCode::Device, "cuda: " + facts_.name + " has compute capability " + std::to_string(facts_.major) + "." +
                                    std::to_string(facts_.minor) + "; tessera_cuda.node is built for 8.0 and 9.0 (sm_80, sm_90)");
      // Default budget: 90% of the device's memory, leaving room for the CUDA context and kernels' scratch.
      alloc_.set_budget(budget_from_env(facts_.total_memory / 10 * 9));
      int pools = 0;
      const char* mode = std::getenv("TESSERA_CUDA_MALLOC");
      const bool want_pool = !(mode && std::string(mode) == "sync");
      if (want_pool && cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, facts_.index) == cudaSuccess && pools) {
        // Keep freed memory in the pool across synchronisations (the default threshold of 0 would hand it back to
        // the driver at every sync, and re-mapping it is slow); the budget bounds what is held. If the pool cannot
        // be set up, plain cudaMalloc still works.
        cudaMemPool_t pool = nullptr;
        uint64_t keep = ~0ull;
        if (cudaDeviceGetDefaultMemPool(&pool, facts_.index) == cudaSuccess &&
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess) {
          alloc_.use_pool(pool);
        } else {
          (void)cudaGetLastError();
        }
      } else {
        (void)cudaGetLastError();
      }
      state_ = State::Ready;
    } catch (const std::exception& e) {
      state_ = State::Failed;
      failure_ = e.what();
      throw Error(ErrorCode::Device, failure_);
    }
  }

  enum class State { Uninitialised, Ready, Failed };
  std::mutex mu_;
  State state_ = State::Uninitialised;
  std::string failure_;
  DeviceFacts facts_;
  CudaAllocator alloc_;
};

CudaDevice& cuda_device() {
  static CudaDevice* d = new CudaDevice();  // never destroyed: tensors may be finalized during teardown
  return *d;
}

}  // namespace

Device& device() { return cuda_device(); }

}  // namespace tessera::binding

namespace tessera::gpu {

void ensure_current_device() {
  // The runtime's current device is per host thread; remember per thread that it was set.
  thread_local int current = -1;
  const int want = binding::cuda_device().index();
  if (current != want) {
    check_cuda(cudaSetDevice(want), "cudaSetDevice");
    current = want;
  }
}

}  // namespace tessera::gpu

using namespace tessera;
using namespace tessera::binding;

TESSERA_REGISTER_OPS(cuda_controls) {
  // cudaDeviceCount() -> {count, error}: the loader's probe. It initialises the runtime but creates no context, and
  // on a machine without a driver it reports the runtime's reason instead of throwing.
  export_fn(env, exports, "cudaDeviceCount", [](const Napi::CallbackInfo& info) -> Napi::Value {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    Napi::Object o = Napi::Object::New(info.Env());
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      o.Set("count", Napi::Number::New(info.Env(), 0));
      o.Set("error", Napi::String::New(info.Env(), std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err)));
    } else {
      o.Set("count", Napi::Number::New(info.Env(), count));
      o.Set("error", count > 0 ? info.Env().Null() : Napi::String::New(info.Env(), "cudaGetDeviceCount: no CUDA device is visible"));
    }
    return o;
  });
}

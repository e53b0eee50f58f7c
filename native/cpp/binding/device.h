// What a backend (cpu or cuda addon) provides to the shared binding code: its budgeted allocator and the
// copies between host memory and its memory. One implementation per addon: cpu/device_cpu.cc, cuda/device_cuda.cc.
#pragma once
#include <napi.h>

#include <cstdint>

#include "../core/allocator.h"

namespace tessera::binding {

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;  // "cpu" | "cuda"
  virtual Allocator& allocator() = 0;
  // Copies are synchronous with respect to the caller; upload may run on a background thread.
  virtual void upload(void* dst, const void* host_src, uint64_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, uint64_t bytes) = 0;
  virtual void copy(void* dst, const void* src, uint64_t bytes) = 0;  // within device memory
  virtual void synchronize() {}
  // Facts for `info()`: ISA, threads, device name, compute capability, ...
  virtual void describe(Napi::Env env, Napi::Object out) = 0;
};

// Defined once per addon.
Device& device();

// The default budget when none is configured: TESSERA_BUDGET_BYTES (or _MB / _GB), else the backend's own default.
uint64_t budget_from_env(uint64_t fallback);

}  // namespace tessera::binding

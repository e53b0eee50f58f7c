// CUDA error handling shared by the device code (.cu) and the bindings (.cc): every failing runtime call becomes
// tessera::Error(ErrorCode::Device, "<call>: <cudaGetErrorString>") so JS sees a DeviceError, never an abort.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../core/error.h"

namespace tessera::gpu {

inline void check_cuda(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  // Clears the non-sticky error state so the next call does not report this failure again.
  (void)cudaGetLastError();
  throw Error(ErrorCode::Device, std::string(call) + ": " + cudaGetErrorString(err));
}

// After a <<<>>> launch: configuration errors are reported at once; faults inside the kernel surface later at the
// next synchronising call (read(), synchronize()), also as a DeviceError.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// Blocks in a 1-D grid-stride launch: enough to fill every SM several times over, never zero.
inline unsigned grid_for(int64_t work, int threads, int64_t max_blocks = 65535LL * 8) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

}  // namespace tessera::gpu

// Helpers shared by the CUDA bindings (bind_*.cc): option parsing and host-side index validation.
// Index tensors (ids, row indices, block tables, context lengths) live in device memory; an out-of-range index would
// make a kernel fault and poison the CUDA context, so the bindings copy them to the host and check them before any
// launch. That copy waits for queued work (it is a device-to-host cudaMemcpy): the price of never crashing.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../binding/device.h"
#include "../binding/napi_util.h"
#include "../core/tensor.h"
#include "device_cuda.h"

namespace tessera::gpu {

inline bool use_reference(const Napi::CallbackInfo& info, size_t opts_index) {
  return binding::bool_opt(binding::object_arg(info, opts_index), "reference", false);
}

// Makes this thread's current device the backend's (and initialises it); every launching binding calls this first.
inline void ready() { ensure_current_device(); }

inline std::vector<int32_t> download_i32(const Tensor& t) {
  std::vector<int32_t> host(static_cast<size_t>(t.numel()));
  binding::device().download(host.data(), t.raw(), t.nbytes());
  return host;
}

// Every index in [0, limit); `what` and `limit_what` name them in the message.
inline void expect_indices_below(const std::vector<int32_t>& idx, int64_t limit, const char* op, const char* what, const std::string& limit_what) {
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || idx[i] >= limit)
      fail(ErrorCode::InvalidArgument, std::string(op) + ": " + what + "[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                                           " is outside " + limit_what + " (" + std::to_string(limit) + ")");
  }
}

// Product of dims 1.. (the element count of one row along dim 0), correct for empty tensors too.
inline int64_t row_elements(const Tensor& t) {
  int64_t n = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) n *= t.shape[i];
  return n;
}

inline void expect_float_dtype(const Tensor& t, const char* op, const char* what) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail(ErrorCode::DTypeMismatch, std::string(op) + ": " + what + " " + shape_str(t.shape) + " must be f32, f16 or bf16, got " + dtype_name(t.dtype));
}

}  // namespace tessera::gpu

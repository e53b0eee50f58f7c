// The one part of the backend interface both addons share: reading index tensors back to the host for validation.
#include "backend_ops.h"

#include "../core/error.h"
#include "device.h"

namespace tessera::backend {

std::vector<int32_t> read_indices(const Tensor& t) {
  if (t.dtype != DType::I32) fail(ErrorCode::DTypeMismatch, std::string("index tensor ") + shape_str(t.shape) + " must be i32, got " + dtype_name(t.dtype));
  std::vector<int32_t> host(static_cast<size_t>(t.numel()));
  binding::device().download(host.data(), t.raw(), t.nbytes());
  return host;
}

}  // namespace tessera::backend

// N-API binding for rotary position embedding: rope(x, positions, {rotDim, base, inverse, reference}), in place.
// inverse rotates by -angle: the backward of rope (ropeBackward in TS).
// Shared by both addons: validation here, the kernel call in backend_ops_{cpu,cuda}.cc.
#include <cmath>
#include <string>

#include "../backend_ops.h"
#include "../napi_util.h"
#include "checks.h"

using namespace tessera;
using namespace tessera::binding;

TESSERA_REGISTER_OPS(rope) {
  // x f32 [tokens, heads, headDim] (headDim even); positions i32 [tokens]; rotDim even in [0, headDim]
  // (default headDim); base > 0 (default 10000).
  export_fn(env, exports, "rope", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& positions = tensor_arg(info[1], "positions");
    const Napi::Object opts = object_arg(info, 2);
    expect_dtype(x, DType::F32, "x");
    expect_dtype(positions, DType::I32, "positions");
    expect_rank(x, 3, "x");
    const int64_t tokens = x.dim(0), head_dim = x.dim(2);
    if (positions.shape != Shape{tokens})
      fail(ErrorCode::ShapeMismatch, "rope: positions " + shape_str(positions.shape) + " must be [tokens] for x " + shape_str(x.shape));
    if (head_dim % 2 != 0) fail(ErrorCode::ShapeMismatch, "rope: x " + shape_str(x.shape) + " has an odd head dimension");
    const double rot = number_opt(opts, "rotDim", static_cast<double>(head_dim));
    if (!(rot >= 0 && rot <= static_cast<double>(head_dim)) || std::floor(rot) != rot || std::fmod(rot, 2.0) != 0)
      fail(ErrorCode::InvalidArgument, "rope: rotDim must be an even integer in [0, " + std::to_string(head_dim) + "] for x " +
                                           shape_str(x.shape) + ", got " + number_str(rot));
    const double base = finite_opt(opts, "base", 10000.0, 0.0, true, "rope");
    expect_disjoint("rope", x, "x", positions, "positions");
    backend::rope(x, positions, static_cast<int64_t>(rot), static_cast<float>(base), bool_opt(opts, "inverse", false), reference_opt(opts));
    return info.Env().Undefined();
  });
}

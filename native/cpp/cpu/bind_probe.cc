// N-API bindings for the machine probes the bench roofline uses: streamTriad, readSumProbe, fmaPeakProbe.
// They run synchronously on the calling thread (the caller times them) and use the kernel thread pool.
#include <cmath>

#include "../binding/napi_util.h"
#include "kernels.h"

using namespace tessera;
using namespace tessera::binding;

namespace {
// 2^40 rounds of 16 x 16-lane FMAs would take hours; anything above is a caller bug, not a measurement.
constexpr double kMaxFmaIters = 1099511627776.0;

double number_arg(const Napi::Value& v, const char* what) {
  if (!v.IsNumber()) fail(ErrorCode::InvalidArgument, std::string(what) + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}
}  // namespace

TESSERA_REGISTER_OPS(probe) {
  // streamTriad(a, b, c, s): a = b + s * c elementwise over same-shaped f32 tensors.
  export_fn(env, exports, "streamTriad", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& a = tensor_arg(info[0], "a");
    Tensor& b = tensor_arg(info[1], "b");
    Tensor& c = tensor_arg(info[2], "c");
    const double s = number_arg(info[3], "streamTriad: s");
    expect_dtype(a, DType::F32, "a");
    expect_dtype(b, DType::F32, "b");
    expect_dtype(c, DType::F32, "c");
    expect_shape(b, a.shape, "b");
    expect_shape(c, a.shape, "c");
    cpu::stream_triad(a.data<float>(), b.data<float>(), c.data<float>(), static_cast<float>(s), a.numel());
    return info.Env().Undefined();
  });

  // readSumProbe(x): the sum of an f32 tensor's elements (as a double).
  export_fn(env, exports, "readSumProbe", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& x = tensor_arg(info[0], "x");
    expect_dtype(x, DType::F32, "x");
    return Napi::Number::New(info.Env(), cpu::read_sum_probe(x.data<float>(), x.numel()));
  });

  // fmaPeakProbe(iters): runs iters rounds of register FMA chains on every pool thread; returns the flops done.
  export_fn(env, exports, "fmaPeakProbe", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const double iters = number_arg(info[0], "fmaPeakProbe: iters");
    if (!(iters >= 0) || iters != std::floor(iters) || iters > kMaxFmaIters)
      fail(ErrorCode::InvalidArgument, "fmaPeakProbe: iters must be an integer in [0, 2^40], got " + std::to_string(iters));
    return Napi::Number::New(info.Env(), cpu::fma_peak_probe(static_cast<int64_t>(iters)));
  });
}

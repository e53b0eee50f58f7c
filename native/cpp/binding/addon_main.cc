// Module entry shared by both addons: the tensor class, allocator controls, and every registered op group.
#include <napi.h>

#include <cstdlib>
#include <string>

#include "device.h"
#include "napi_util.h"

namespace tessera::binding {

uint64_t budget_from_env(uint64_t fallback) {
  auto read = [](const char* name, double unit, uint64_t* out) {
    if (const char* v = std::getenv(name)) {
      const double x = std::atof(v);
      if (x > 0) { *out = static_cast<uint64_t>(x * unit); return true; }
    }
    return false;
  };
  uint64_t b = fallback;
  if (read("TESSERA_BUDGET_BYTES", 1.0, &b) || read("TESSERA_BUDGET_MB", 1024.0 * 1024.0, &b) ||
      read("TESSERA_BUDGET_GB", 1024.0 * 1024.0 * 1024.0, &b))
    return b;
  return fallback;
}

Napi::Object Init(Napi::Env env, Napi::Object exports);

namespace {

Napi::Object stats_object(Napi::Env env) {
  const AllocatorStats s = device().allocator().stats();
  Napi::Object o = Napi::Object::New(env);
  o.Set("inUse", Napi::Number::New(env, double(s.in_use)));
  o.Set("peak", Napi::Number::New(env, double(s.peak)));
  o.Set("budget", Napi::Number::New(env, double(s.budget)));
  o.Set("allocations", Napi::Number::New(env, double(s.allocations)));
  o.Set("totalAllocations", Napi::Number::New(env, double(s.total_allocations)));
  o.Set("failed", Napi::Number::New(env, double(s.failed)));
  return o;
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("device", Napi::String::New(env, device().name()));
  exports.Set("NativeTensor", NativeTensor::Init(env));
  export_fn(env, exports, "empty", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const DType dt = dtype_arg(info[0], "dtype");
    Shape shape = shape_arg(info[1], "shape");
    return NativeTensor::Wrap(info.Env(), Tensor::empty(device().allocator(), dt, std::move(shape)));
  });
  export_fn(env, exports, "allocatorStats", [](const Napi::CallbackInfo& info) -> Napi::Value {
    return stats_object(info.Env());
  });
  export_fn(env, exports, "setBudget", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const double b = info[0].As<Napi::Number>().DoubleValue();
    if (!(b >= 0)) fail(ErrorCode::InvalidArgument, "budget must be a non-negative number of bytes");
    device().allocator().set_budget(static_cast<uint64_t>(b));
    return stats_object(info.Env());
  });
  export_fn(env, exports, "resetPeak", [](const Napi::CallbackInfo& info) -> Napi::Value {
    device().allocator().reset_peak();
    return stats_object(info.Env());
  });
  export_fn(env, exports, "synchronize", [](const Napi::CallbackInfo& info) -> Napi::Value {
    device().synchronize();
    return info.Env().Undefined();
  });
  export_fn(env, exports, "info", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("device", Napi::String::New(info.Env(), device().name()));
    device().describe(info.Env(), o);
    return o;
  });
  // copy(src, dst): same dtype and element count, device to device.
  export_fn(env, exports, "copy", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& dst = tensor_arg(info[1], "dst");
    expect_dtype(dst, src.dtype, "dst");
    if (src.numel() != dst.numel())
      fail(ErrorCode::ShapeMismatch, "copy: src " + shape_str(src.shape) + " and dst " + shape_str(dst.shape) +
                                         " differ in element count");
    device().copy(dst.raw(), src.raw(), src.nbytes());
    return info.Env().Undefined();
  });
  register_all_ops(env, exports);
  return exports;
}

}  // namespace tessera::binding

static Napi::Object InitTessera(Napi::Env env, Napi::Object exports) { return tessera::binding::Init(env, exports); }
NODE_API_MODULE(tessera, InitTessera)

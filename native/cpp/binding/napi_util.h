// Shared helpers for the N-API bindings: tensor unwrapping, option parsing, and turning tessera::Error into a
// JS Error whose `code` the TS layer maps to a typed error class.
#pragma once
#include <napi.h>

#include <functional>
#include <string>
#include <vector>

#include "../core/error.h"
#include "../core/tensor.h"

namespace tessera::binding {

// The JS-visible tensor handle. Holds the Tensor until dispose() or garbage collection.
class NativeTensor : public Napi::ObjectWrap<NativeTensor> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::Object Wrap(Napi::Env env, Tensor t);  // new JS handle owning t
  static bool Is(const Napi::Value& v);

  explicit NativeTensor(const Napi::CallbackInfo& info);
  ~NativeTensor() override;

  Tensor& tensor(const char* what);  // throws Disposed
  bool disposed() const { return !tensor_.storage; }

 private:
  Napi::Value Dtype(const Napi::CallbackInfo& info);
  Napi::Value ShapeGetter(const Napi::CallbackInfo& info);
  Napi::Value Nbytes(const Napi::CallbackInfo& info);
  Napi::Value Disposed(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value Read(const Napi::CallbackInfo& info);
  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value WriteAsync(const Napi::CallbackInfo& info);
  Napi::Value RowsView(const Napi::CallbackInfo& info);
  Napi::Value Reshape(const Napi::CallbackInfo& info);
  Napi::Value SameStorage(const Napi::CallbackInfo& info);
  void release(Napi::Env env);

  Tensor tensor_;
  int64_t external_bytes_ = 0;  // reported to V8 so GC pressure reflects native memory
};

// Unwraps argument `v` as a live tensor; `what` names it in error messages.
Tensor& tensor_arg(const Napi::Value& v, const char* what);
// Like tensor_arg but null/undefined gives nullptr.
Tensor* optional_tensor_arg(const Napi::Value& v, const char* what);

Shape shape_arg(const Napi::Value& v, const char* what);
DType dtype_arg(const Napi::Value& v, const char* what);

double number_opt(const Napi::Object& opts, const char* key, double fallback);
bool bool_opt(const Napi::Object& opts, const char* key, bool fallback);
Napi::Object object_arg(const Napi::CallbackInfo& info, size_t i);  // an options object, or {} when absent

// Native-side guards (the TS layer validates first; these keep a bad direct call from crashing the process).
void expect_dtype(const Tensor& t, DType want, const char* what);
void expect_shape(const Tensor& t, const Shape& want, const char* what);
void expect_rank(const Tensor& t, size_t rank, const char* what);

// Converts C++ exceptions into JS errors with `code` set. Every exported function body goes through this.
Napi::Value guarded(const Napi::CallbackInfo& info, const std::function<Napi::Value()>& body);
Napi::Error to_js_error(Napi::Env env, const std::exception& e);

// Op registry: each binding file registers its exports with TESSERA_REGISTER_OPS, so adding an op group touches
// no central list. The addon's Init runs every registrar.
using OpRegistrar = void (*)(Napi::Env env, Napi::Object exports);
struct RegisterOps {
  RegisterOps(const char* group, OpRegistrar fn);
};
void register_all_ops(Napi::Env env, Napi::Object exports);

// Adds exports[name] = fn wrapped in guarded().
void export_fn(Napi::Env env, Napi::Object exports, const char* name,
               std::function<Napi::Value(const Napi::CallbackInfo&)> fn);

}  // namespace tessera::binding

#define TESSERA_REGISTER_OPS(group)                                                               \
  static void tessera_register_##group(Napi::Env env, Napi::Object exports);                      \
  static ::tessera::binding::RegisterOps tessera_registrar_##group(#group, tessera_register_##group); \
  static void tessera_register_##group(Napi::Env env, Napi::Object exports)

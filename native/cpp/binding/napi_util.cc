#include "napi_util.h"

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "device.h"

namespace tessera::binding {

namespace {

// The NativeTensor constructor belongs to one JS environment (the main thread or one worker thread), so it is
// kept as that environment's instance data, never in a process-wide static: a static would hand a worker the
// main thread's constructor (or a dead worker's), which corrupts memory.
Napi::FunctionReference& tensor_ctor(Napi::Env env) {
  auto* ctor = env.GetInstanceData<Napi::FunctionReference>();
  if (ctor == nullptr) throw std::logic_error("tessera: NativeTensor used before the addon initialised this environment");
  return *ctor;
}

// Every NativeTensor is type-tagged at construction, and a tensor argument is recognised by its tag: one private
// property check, where InstanceOf looked up Symbol.hasInstance and walked the prototype chain on every tensor of
// every call. The tag differs per addon (it hashes the device name), so a tensor of the other addon never passes
// as one of this addon's.
const napi_type_tag& tensor_type_tag() {
  static const napi_type_tag tag = [] {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (const char* p = device().name(); *p; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 1099511628211ull;
    return napi_type_tag{0x74657373657261ull /* "tessera" */, h};
  }();
  return tag;
}

struct Registrar {
  const char* group;
  OpRegistrar fn;
};
std::vector<Registrar>& registrars() {
  static std::vector<Registrar> list;
  return list;
}

void set_code(Napi::Error& err, const char* code) { err.Set("code", Napi::String::New(err.Env(), code)); }

// Background upload for write_async: the JS buffer is kept alive by a reference until the copy completes.
class UploadWorker : public Napi::AsyncWorker {
 public:
  UploadWorker(Napi::Env env, Tensor target, Napi::Object holder, const void* src, uint64_t bytes)
      : Napi::AsyncWorker(env, "tessera.upload"),
        deferred_(Napi::Promise::Deferred::New(env)),
        target_(std::move(target)),
        src_(src),
        bytes_(bytes) {
    holder_ = Napi::Persistent(holder);
  }
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      device().upload(target_.raw(), src_, bytes_);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnOK() override {
    holder_.Reset();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    holder_.Reset();
    Napi::Error err = Napi::Error::New(Env(), e.Message());
    set_code(err, error_code_name(ErrorCode::Device));
    deferred_.Reject(err.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  Tensor target_;  // holds the storage alive while the copy runs, even if JS disposes the handle
  Napi::ObjectReference holder_;
  const void* src_;
  uint64_t bytes_;
};

struct BytesView {
  const void* data = nullptr;
  void* mutable_data = nullptr;
  uint64_t bytes = 0;
};

BytesView bytes_of(const Napi::Value& v, const char* what) {
  if (v.IsTypedArray()) {
    Napi::TypedArray ta = v.As<Napi::TypedArray>();
    auto* base = static_cast<char*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
    return {base, base, static_cast<uint64_t>(ta.ByteLength())};
  }
  if (v.IsBuffer()) {
    auto buf = v.As<Napi::Buffer<char>>();
    return {buf.Data(), buf.Data(), static_cast<uint64_t>(buf.Length())};
  }
  if (v.IsArrayBuffer()) {
    auto ab = v.As<Napi::ArrayBuffer>();
    return {ab.Data(), ab.Data(), static_cast<uint64_t>(ab.ByteLength())};
  }
  fail(ErrorCode::InvalidArgument, std::string(what) + " must be a TypedArray, Buffer or ArrayBuffer");
}

}  // namespace

// ---------------------------------------------------------------- NativeTensor

Napi::Function NativeTensor::Init(Napi::Env env) {
  Napi::Function fn = DefineClass(env, "NativeTensor",
                                  {
                                      InstanceAccessor<&NativeTensor::Dtype>("dtype"),
                                      InstanceAccessor<&NativeTensor::ShapeGetter>("shape"),
                                      InstanceAccessor<&NativeTensor::Nbytes>("nbytes"),
                                      InstanceAccessor<&NativeTensor::Disposed>("disposed"),
                                      InstanceMethod<&NativeTensor::Dispose>("dispose"),
                                      InstanceMethod<&NativeTensor::Read>("read"),
                                      InstanceMethod<&NativeTensor::Write>("write"),
                                      InstanceMethod<&NativeTensor::WriteAsync>("writeAsync"),
                                      InstanceMethod<&NativeTensor::RowsView>("rowsView"),
                                      InstanceMethod<&NativeTensor::Reshape>("reshape"),
                                      InstanceMethod<&NativeTensor::SameStorage>("sameStorage"),
                                  });
  env.SetInstanceData<Napi::FunctionReference>(new Napi::FunctionReference(Napi::Persistent(fn)));
  return fn;
}

// Constructed from JS only as `new NativeTensor(dtype, shape)` (an uninitialised allocation) or internally by
// Wrap (an External carrying the Tensor to adopt).
NativeTensor::NativeTensor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeTensor>(info) {
  try {
    if (info.Length() == 1 && info[0].IsExternal()) {
      // Move, not copy: the External lives until GC, and a copy would pin the storage until then.
      tensor_ = std::move(*info[0].As<Napi::External<Tensor>>().Data());
    } else {
      const DType dt = dtype_arg(info[0], "dtype");
      Shape shape = shape_arg(info[1], "shape");
      tensor_ = Tensor::empty(device().allocator(), dt, std::move(shape));
    }
  } catch (const std::exception& e) {
    to_js_error(info.Env(), e).ThrowAsJavaScriptException();
    return;
  }
  info.This().As<Napi::Object>().TypeTag(&tensor_type_tag());
  // Views share storage; only the owner of the allocation reports it, so V8's view of memory stays exact. A view
  // (rowsView, reshape) is made while its source still holds the storage, so the sole holder is the allocation.
  if (tensor_.storage && tensor_.storage.use_count() == 1 && std::string(device().name()) == "cpu") {
    external_bytes_ = static_cast<int64_t>(tensor_.storage->bytes());
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), external_bytes_);
  }
}

NativeTensor::~NativeTensor() {
  // Finalizer path: storage is released with the last reference (views keep it alive).
  tensor_.storage.reset();
}

void NativeTensor::release(Napi::Env env) {
  tensor_.storage.reset();
  if (external_bytes_) {
    Napi::MemoryManagement::AdjustExternalMemory(env, -external_bytes_);
    external_bytes_ = 0;
  }
}

Napi::Object NativeTensor::Wrap(Napi::Env env, Tensor t) {
  Tensor* heap = new Tensor(std::move(t));
  Napi::External<Tensor> ext = Napi::External<Tensor>::New(env, heap, [](Napi::Env, Tensor* p) { delete p; });
  return tensor_ctor(env).New({ext});
}

bool NativeTensor::Is(const Napi::Value& v) {
  return v.IsObject() && v.As<Napi::Object>().CheckTypeTag(&tensor_type_tag());
}

Tensor& NativeTensor::tensor(const char* what) {
  if (!tensor_.storage) fail(ErrorCode::Disposed, std::string(what) + " was disposed");
  return tensor_;
}

Napi::Value NativeTensor::Dtype(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), dtype_name(tensor_.dtype));
}

Napi::Value NativeTensor::ShapeGetter(const Napi::CallbackInfo& info) {
  Napi::Array arr = Napi::Array::New(info.Env(), tensor_.shape.size());
  for (size_t i = 0; i < tensor_.shape.size(); ++i) arr.Set(i, Napi::Number::New(info.Env(), double(tensor_.shape[i])));
  return arr;
}

Napi::Value NativeTensor::Nbytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), double(tensor_.nbytes()));
}

Napi::Value NativeTensor::Disposed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), disposed());
}

Napi::Value NativeTensor::Dispose(const Napi::CallbackInfo& info) {
  release(info.Env());
  return info.Env().Undefined();
}

// read(dst): copies the tensor's bytes into a TypedArray of exactly nbytes.
Napi::Value NativeTensor::Read(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Tensor& t = tensor("tensor");
    BytesView dst = bytes_of(info[0], "read() target");
    TESSERA_CHECK(dst.bytes == t.nbytes(), ErrorCode::InvalidArgument,
                  "read() target holds " + std::to_string(dst.bytes) + " bytes, tensor " + shape_str(t.shape) + " " +
                      dtype_name(t.dtype) + " holds " + std::to_string(t.nbytes()));
    device().download(dst.mutable_data, t.raw(), t.nbytes());
    return info.Env().Undefined();
  });
}

// write(src): copies exactly nbytes from a TypedArray into the tensor, synchronously.
Napi::Value NativeTensor::Write(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Tensor& t = tensor("tensor");
    BytesView src = bytes_of(info[0], "write() source");
    TESSERA_CHECK(src.bytes == t.nbytes(), ErrorCode::InvalidArgument,
                  "write() source holds " + std::to_string(src.bytes) + " bytes, tensor " + shape_str(t.shape) + " " +
                      dtype_name(t.dtype) + " holds " + std::to_string(t.nbytes()));
    device().upload(t.raw(), src.data, t.nbytes());
    return info.Env().Undefined();
  });
}

// writeAsync(src): the same copy on a background thread; returns a Promise. The caller must not modify
// `src` until it settles (the TS layer copies or documents this).
Napi::Value NativeTensor::WriteAsync(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Tensor& t = tensor("tensor");
    BytesView src = bytes_of(info[0], "writeAsync() source");
    TESSERA_CHECK(src.bytes == t.nbytes(), ErrorCode::InvalidArgument,
                  "writeAsync() source holds " + std::to_string(src.bytes) + " bytes, tensor " + shape_str(t.shape) +
                      " " + dtype_name(t.dtype) + " holds " + std::to_string(t.nbytes()));
    auto* worker = new UploadWorker(info.Env(), t, info[0].As<Napi::Object>(), src.data, src.bytes);
    Napi::Promise p = worker->promise();
    worker->Queue();
    return p;
  });
}

Napi::Value NativeTensor::RowsView(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Tensor& t = tensor("tensor");
    TESSERA_CHECK(!t.shape.empty(), ErrorCode::ShapeMismatch, "rowsView() needs a tensor of rank >= 1");
    const int64_t start = info[0].As<Napi::Number>().Int64Value();
    const int64_t count = info[1].As<Napi::Number>().Int64Value();
    TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= t.shape[0], ErrorCode::InvalidArgument,
                  "rowsView(" + std::to_string(start) + ", " + std::to_string(count) + ") is outside " +
                      shape_str(t.shape));
    return Wrap(info.Env(), t.rows_view(start, count));
  });
}

// reshape(shape): a view with the same element count and storage.
Napi::Value NativeTensor::Reshape(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Tensor& t = tensor("tensor");
    Shape shape = shape_arg(info[0], "shape");
    TESSERA_CHECK(shape_numel(shape) == t.numel(), ErrorCode::ShapeMismatch,
                  "reshape: " + shape_str(t.shape) + " and " + shape_str(shape) + " differ in element count");
    Tensor v = t;
    v.shape = std::move(shape);
    return Wrap(info.Env(), v);
  });
}

Napi::Value NativeTensor::SameStorage(const Napi::CallbackInfo& info) {
  Tensor* other = optional_tensor_arg(info[0], "other");
  return Napi::Boolean::New(info.Env(), other && other->storage == tensor_.storage);
}

// ---------------------------------------------------------------- argument helpers

Tensor& tensor_arg(const Napi::Value& v, const char* what) {
  if (!NativeTensor::Is(v)) fail(ErrorCode::InvalidArgument, std::string(what) + " must be a native tensor");
  return NativeTensor::Unwrap(v.As<Napi::Object>())->tensor(what);
}

Tensor* optional_tensor_arg(const Napi::Value& v, const char* what) {
  if (v.IsNull() || v.IsUndefined()) return nullptr;
  return &tensor_arg(v, what);
}

Shape shape_arg(const Napi::Value& v, const char* what) {
  if (!v.IsArray()) fail(ErrorCode::InvalidArgument, std::string(what) + " must be an array of dimensions");
  Napi::Array arr = v.As<Napi::Array>();
  Shape s;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Value d = arr.Get(i);
    const double x = d.IsNumber() ? d.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= 0) || std::floor(x) != x || x > 9.0e15)
      fail(ErrorCode::InvalidArgument, std::string(what) + "[" + std::to_string(i) + "] is not a non-negative integer");
    s.push_back(static_cast<int64_t>(x));
  }
  return s;
}

DType dtype_arg(const Napi::Value& v, const char* what) {
  DType dt;
  if (!v.IsString() || !dtype_from_name(v.As<Napi::String>().Utf8Value(), &dt))
    fail(ErrorCode::InvalidArgument, std::string(what) + " must be one of f32, f16, bf16, i32, i64, u8");
  return dt;
}

double number_opt(const Napi::Object& opts, const char* key, double fallback) {
  Napi::Value v = opts.Get(key);
  if (v.IsUndefined() || v.IsNull()) return fallback;
  if (!v.IsNumber()) fail(ErrorCode::InvalidArgument, std::string("option ") + key + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

bool bool_opt(const Napi::Object& opts, const char* key, bool fallback) {
  Napi::Value v = opts.Get(key);
  if (v.IsUndefined() || v.IsNull()) return fallback;
  return v.ToBoolean().Value();
}

Napi::Object object_arg(const Napi::CallbackInfo& info, size_t i) {
  if (i < info.Length() && info[i].IsObject()) return info[i].As<Napi::Object>();
  return Napi::Object::New(info.Env());
}

void expect_dtype(const Tensor& t, DType want, const char* what) {
  if (t.dtype != want)
    fail(ErrorCode::DTypeMismatch, std::string(what) + " must be " + dtype_name(want) + ", got " + dtype_name(t.dtype));
}

void expect_shape(const Tensor& t, const Shape& want, const char* what) {
  if (t.shape != want)
    fail(ErrorCode::ShapeMismatch, std::string(what) + " has shape " + shape_str(t.shape) + ", expected " + shape_str(want));
}

void expect_rank(const Tensor& t, size_t rank, const char* what) {
  if (t.shape.size() != rank)
    fail(ErrorCode::ShapeMismatch, std::string(what) + " must have rank " + std::to_string(rank) + ", got shape " +
                                       shape_str(t.shape));
}

// ---------------------------------------------------------------- errors, registry

Napi::Error to_js_error(Napi::Env env, const std::exception& e) {
  Napi::Error err = Napi::Error::New(env, e.what());
  if (auto* te = dynamic_cast<const Error*>(&e)) {
    set_code(err, error_code_name(te->code()));
  } else {
    set_code(err, "TESSERA_NATIVE_ERROR");
  }
  return err;
}

Napi::Value guarded(const Napi::CallbackInfo& info, const std::function<Napi::Value()>& body) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw to_js_error(info.Env(), e);
  }
}

RegisterOps::RegisterOps(const char* group, OpRegistrar fn) { registrars().push_back({group, fn}); }

void register_all_ops(Napi::Env env, Napi::Object exports) {
  for (const Registrar& r : registrars()) r.fn(env, exports);
}

void export_fn(Napi::Env env, Napi::Object exports, const char* name,
               std::function<Napi::Value(const Napi::CallbackInfo&)> fn) {
  exports.Set(name, Napi::Function::New(
                        env,
                        [fn = std::move(fn)](const Napi::CallbackInfo& info) -> Napi::Value {
                          return guarded(info, [&]() { return fn(info); });
                        },
                        name));
}

}  // namespace tessera::binding

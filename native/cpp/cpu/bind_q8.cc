// N-API bindings for Q8_0 int8 weights (q8_simd.h): q8Quantize, q8Dequantize, q8Gemm, q8Kernels.
// CPU-only exports (like bind_probe.cc): the CUDA backend has no Q8_0 kernel yet, so these live with the CPU backend
// instead of binding/ops/ (whose bindings both addons link); the TS layer refuses them on a backend without them.
// A Q8_0 weight [n, k] is a u8 tensor [n, k/32 * 34] (llama.cpp's block_q8_0 rows); k must be a multiple of 32.
#include <string>

#include "../binding/napi_util.h"
#include "../binding/ops/checks.h"
#include "q8_simd.h"

using namespace tessera;
using namespace tessera::binding;

namespace {

// The k of a Q8_0 weight [n, cols] (cols a multiple of 34).
int64_t q8_k(const Tensor& w, const std::string& op, const char* what) {
  expect_dtype(w, DType::U8, what);
  expect_rank(w, 2, what);
  if (w.dim(1) % cpu::kQ8BlockBytes != 0)
    fail(ErrorCode::ShapeMismatch, op + ": " + what + " " + shape_str(w.shape) + " is not rows of Q8_0 blocks (its last dimension " +
                                       std::to_string(w.dim(1)) + " is not a multiple of 34 bytes)");
  return w.dim(1) / cpu::kQ8BlockBytes * cpu::kQ8Block;
}

void expect_k_multiple(int64_t k, const std::string& op, const char* what, const Tensor& t) {
  if (k % cpu::kQ8Block != 0)
    fail(ErrorCode::ShapeMismatch, op + ": " + what + " " + shape_str(t.shape) + " has " + std::to_string(k) +
                                       " columns, not a multiple of the Q8_0 block (32); pad k to a multiple of 32");
}

}  // namespace

TESSERA_REGISTER_OPS(q8) {
  // q8Quantize(src, dst): src f32/f16/bf16 [n, k] (k % 32 == 0) -> dst u8 [n, k/32 * 34].
  export_fn(env, exports, "q8Quantize", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "q8Quantize";
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& dst = tensor_arg(info[1], "dst");
    if (!is_float_dtype(src.dtype)) fail(ErrorCode::DTypeMismatch, op + ": src must be f32, f16 or bf16, got " + dtype_name(src.dtype));
    expect_rank(src, 2, "src");
    const int64_t n = src.dim(0), k = src.dim(1);
    expect_k_multiple(k, op, "src", src);
    expect_dtype(dst, DType::U8, "dst");
    expect_shape(dst, Shape{n, k / cpu::kQ8Block * cpu::kQ8BlockBytes}, "dst");
    expect_disjoint(op, dst, "dst", src, "src");
    const int64_t bad = cpu::q8_quantize(src.raw(), src.dtype, n, k, static_cast<uint8_t*>(dst.raw()));
    if (bad > 0)
      fail(ErrorCode::InvalidArgument, op + ": " + std::to_string(bad) + " block(s) of src " + shape_str(src.shape) +
                                           " hold a NaN or an infinity, or a value above 65504 * 127 (the f16 scale's range)");
    return info.Env().Undefined();
  });

  // q8Dequantize(src, dst): src u8 [n, nb * 34] -> dst f32 [n, nb * 32].
  export_fn(env, exports, "q8Dequantize", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "q8Dequantize";
    Tensor& src = tensor_arg(info[0], "src");
    Tensor& dst = tensor_arg(info[1], "dst");
    const int64_t k = q8_k(src, op, "src");
    expect_dtype(dst, DType::F32, "dst");
    expect_shape(dst, Shape{src.dim(0), k}, "dst");
    expect_disjoint(op, dst, "dst", src, "src");
    cpu::q8_dequantize(static_cast<const uint8_t*>(src.raw()), src.dim(0), k, dst.data<float>());
    return info.Env().Undefined();
  });

  // q8Gemm(x, w, y, {bias, reference, kernel}): y f32 [m, n] = x f32 [m, k] · wᵀ (+ bias f32 [n]), w Q8_0 [n, k].
  export_fn(env, exports, "q8Gemm", [](const Napi::CallbackInfo& info) -> Napi::Value {
    const std::string op = "q8Gemm";
    Tensor& x = tensor_arg(info[0], "x");
    Tensor& w = tensor_arg(info[1], "w");
    Tensor& y = tensor_arg(info[2], "y");
    const Napi::Object opts = object_arg(info, 3);
    Tensor* bias = optional_tensor_arg(opts.Get("bias"), "bias");
    expect_dtype(x, DType::F32, "x");
    expect_rank(x, 2, "x");
    const int64_t k = q8_k(w, op, "w");
    const int64_t m = x.dim(0), n = w.dim(0);
    if (x.dim(1) != k)
      fail(ErrorCode::ShapeMismatch, op + ": x " + shape_str(x.shape) + " and w " + shape_str(w.shape) + " (Q8_0, k = " +
                                         std::to_string(k) + ") disagree on k");
    expect_dtype(y, DType::F32, "y");
    expect_shape(y, Shape{m, n}, "y");
    if (bias) {
      expect_dtype(*bias, DType::F32, "bias");
      expect_shape(*bias, Shape{n}, "bias");
      expect_disjoint(op, y, "y", *bias, "bias");
    }
    expect_disjoint(op, y, "y", x, "x");
    expect_disjoint(op, y, "y", w, "w");
    cpu::Q8Kernel kernel = cpu::Q8Kernel::Auto;
    const Napi::Value kv = opts.Get("kernel");
    if (!kv.IsUndefined() && !kv.IsNull()) {
      const std::string name = kv.IsString() ? kv.As<Napi::String>().Utf8Value() : "";
      if (!cpu::q8_kernel_from_name(name, &kernel))
        fail(ErrorCode::InvalidArgument, op + ": option kernel must be auto, scalar, avx2, avx2-vnni, avx512 or avx512-vnni, got \"" + name + "\"");
      if (!cpu::q8_kernel_available(kernel))
        fail(ErrorCode::Unsupported, op + ": kernel " + name + " needs an instruction set this CPU lacks");
    }
    const float* b = bias ? bias->data<float>() : nullptr;
    const uint8_t* wp = static_cast<const uint8_t*>(w.raw());
    if (reference_opt(opts)) cpu::q8_gemm_ref(x.data<float>(), m, k, wp, n, b, y.data<float>());
    else cpu::q8_gemm(x.data<float>(), m, k, wp, n, b, y.data<float>(), kernel);
    return info.Env().Undefined();
  });

  // q8Kernels(): { available: names of the kernels this CPU runs, auto: what `auto` picks now }.
  export_fn(env, exports, "q8Kernels", [](const Napi::CallbackInfo& info) -> Napi::Value {
    Napi::Env e = info.Env();
    Napi::Array list = Napi::Array::New(e);
    uint32_t i = 0;
    for (int k = static_cast<int>(cpu::Q8Kernel::Scalar); k <= static_cast<int>(cpu::Q8Kernel::Avx512Vnni); ++k) {
      if (cpu::q8_kernel_available(static_cast<cpu::Q8Kernel>(k))) list.Set(i++, Napi::String::New(e, cpu::q8_kernel_name(static_cast<cpu::Q8Kernel>(k))));
    }
    Napi::Object out = Napi::Object::New(e);
    out.Set("available", list);
    out.Set("auto", Napi::String::New(e, cpu::q8_kernel_name(cpu::q8_auto_kernel())));
    return out;
  });
}

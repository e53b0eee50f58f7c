// Q8_0 int8 weights: quantize / dequantize (llama.cpp's block layout), the double-accumulating reference GEMM, the
// scalar fast path, the kernel choice and the task schedule. SIMD bodies are in q8_avx2.cc / q8_avx512.cc (loops in
// q8_body.inl); q8_simd.h fixes the layout and the arithmetic every fast path shares.
//
// Schedule (decode: m <= 32 rows, a pure stream over W): the activations are quantized once on the calling thread,
// then tasks over ranges of output columns each run every row against their W rows, which they read once from
// memory (a few columns at a time are packed column-interleaved in cache, and register tiles of rows x columns walk
// all blocks of that copy).
// Every output is computed by one task with the canonical arithmetic, so the bits never depend on the split.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "q8_simd.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kColumnAlign = 16;                  // task column ranges start at multiples of this
constexpr int64_t kTargetTasks = 32;                  // enough tasks to balance a pool (shape-only split)
constexpr int64_t kInlineBytes = int64_t(64) << 10;   // calls streaming less W than this run on the calling thread
constexpr int64_t kQuantizeRowGrain = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

template <typename T>
T* thread_scratch(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

float read_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

float load_elem(const void* src, DType dt, int64_t i) {
  switch (dt) {
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
    default: return static_cast<const float*>(src)[i];
  }
}

// One weight block; returns false when it cannot be represented (written as d = NaN, q = 0).
bool quantize_block(const float* v, uint8_t* out) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < kQ8Block; ++i) {
    const float a = std::fabs(v[i]);
    if (!(a <= std::numeric_limits<float>::max())) finite = false;
    amax = std::max(amax, a);
  }
  int8_t* q = reinterpret_cast<int8_t*>(out + 2);
  uint16_t h = 0;
  bool ok = finite;
  if (ok && amax > 0.0f) {
    const float t = amax / 127.0f;
    h = f32_to_f16(t);
    if (f16_to_f32(h) < t) ++h;                    // round the scale up: |v| / d <= 127 for every v of the block
    if ((h & 0x7c00u) == 0x7c00u) ok = false;      // above the largest f16
  }
  if (!ok) {
    h = 0x7e00u;  // NaN
    std::memset(q, 0, kQ8Block);
  } else if (amax == 0.0f) {
    std::memset(q, 0, kQ8Block);
  } else {
    const float d = f16_to_f32(h);
    for (int i = 0; i < kQ8Block; ++i) {
      const float r = std::nearbyint(v[i] / d);
      q[i] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, r)));
    }
  }
  std::memcpy(out, &h, 2);
  return ok;
}

// Which ISA family a kernel belongs to (its activation quantizer; all give the same bits).
Isa kernel_isa(Q8Kernel k) {
  switch (k) {
    case Q8Kernel::Avx512:
    case Q8Kernel::Avx512Vnni: return Isa::Avx512;
    case Q8Kernel::Avx2:
    case Q8Kernel::Avx2Vnni: return Isa::Avx2;
    default: return Isa::Scalar;
  }
}

bool has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return v;
#else
  return false;
#endif
}

bool has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avxvnni") != 0;
  }();
  return v;
#else
  return false;
#endif
}

void quantize_act(Q8Kernel k, const float* x, int64_t nb, int64_t m, int8_t* xq, float* xd) {
  switch (kernel_isa(k)) {
    case Isa::Avx512: q8_quantize_act_avx512(x, nb, 0, m, xq, xd); break;
    case Isa::Avx2: q8_quantize_act_avx2(x, nb, 0, m, xq, xd); break;
    default: q8_quantize_act_scalar(x, nb, 0, m, xq, xd);
  }
}

void run_cols(Q8Kernel k, const Q8GemmArgs& a, int64_t c0, int64_t c1) {
  switch (k) {
    case Q8Kernel::Avx512Vnni: q8_gemm_cols_avx512_vnni(a, c0, c1); break;
    case Q8Kernel::Avx512: q8_gemm_cols_avx512(a, c0, c1); break;
    case Q8Kernel::Avx2Vnni: q8_gemm_cols_avx2_vnni(a, c0, c1); break;
    case Q8Kernel::Avx2: q8_gemm_cols_avx2(a, c0, c1); break;
    default: q8_gemm_cols_scalar(a, c0, c1);
  }
}

}  // namespace

// ---------------------------------------------------------------- kernel choice

const char* q8_kernel_name(Q8Kernel k) {
  switch (k) {
    case Q8Kernel::Auto: return "auto";
    case Q8Kernel::Scalar: return "scalar";
    case Q8Kernel::Avx2: return "avx2";
    case Q8Kernel::Avx2Vnni: return "avx2-vnni";
    case Q8Kernel::Avx512: return "avx512";
    case Q8Kernel::Avx512Vnni: return "avx512-vnni";
  }
  return "?";
}

bool q8_kernel_from_name(const std::string& name, Q8Kernel* out) {
  for (int i = 0; i <= static_cast<int>(Q8Kernel::Avx512Vnni); ++i) {
    if (name == q8_kernel_name(static_cast<Q8Kernel>(i))) {
      *out = static_cast<Q8Kernel>(i);
      return true;
    }
  }
  return false;
}

// A named kernel runs when the CPU has its ISA (best_supported_isa, not the active cap: tests name each one).
bool q8_kernel_available(Q8Kernel k) {
  const Isa best = best_supported_isa();
  switch (k) {
    case Q8Kernel::Auto:
    case Q8Kernel::Scalar: return true;
    case Q8Kernel::Avx2: return best >= Isa::Avx2;
    case Q8Kernel::Avx2Vnni: return best >= Isa::Avx2 && has_avx_vnni();
    case Q8Kernel::Avx512: return best >= Isa::Avx512;
    case Q8Kernel::Avx512Vnni: return best >= Isa::Avx512 && has_avx512_vnni();
  }
  return false;
}

Q8Kernel q8_auto_kernel() {
  switch (active_isa()) {
    case Isa::Avx512: return has_avx512_vnni() ? Q8Kernel::Avx512Vnni : Q8Kernel::Avx512;
    case Isa::Avx2: return has_avx_vnni() ? Q8Kernel::Avx2Vnni : Q8Kernel::Avx2;
    default: return Q8Kernel::Scalar;
  }
}

// ---------------------------------------------------------------- weights

int64_t q8_quantize(const void* src, DType dtype, int64_t rows, int64_t k, uint8_t* dst) {
  const int64_t nb = k / kQ8Block;
  if (rows <= 0 || nb <= 0) return 0;
  std::atomic<int64_t> bad{0};
  global_pool().parallel_range(rows, kQuantizeRowGrain, [&](int64_t r0, int64_t r1) {
    float v[kQ8Block];
    int64_t count = 0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t base = r * k + b * kQ8Block;
        if (dtype == DType::F32) std::memcpy(v, static_cast<const float*>(src) + base, sizeof v);
        else for (int i = 0; i < kQ8Block; ++i) v[i] = load_elem(src, dtype, base + i);
        if (!quantize_block(v, dst + (r * nb + b) * kQ8BlockBytes)) ++count;
      }
    }
    bad += count;
  });
  return bad.load();
}

void q8_dequantize(const uint8_t* src, int64_t rows, int64_t k, float* dst) {
  const int64_t nb = k / kQ8Block;
  for (int64_t i = 0; i < rows * nb; ++i) {
    const uint8_t* blk = src + i * kQ8BlockBytes;
    const float d = read_f16(blk);
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    for (int j = 0; j < kQ8Block; ++j) dst[i * kQ8Block + j] = static_cast<float>(q[j]) * d;
  }
}

// ---------------------------------------------------------------- activations and the scalar bodies

void q8_quantize_act_scalar(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + (r * nb + b) * kQ8Block;
      int8_t* q = xq + (r * nb + b) * kQ8Block;
      float amax = 0.0f;
      bool bad = false;
      for (int i = 0; i < kQ8Block; ++i) {
        const float a = std::fabs(p[i]);
        if (!(a <= std::numeric_limits<float>::max())) bad = true;
        amax = std::max(amax, a);
      }
      if (bad) {
        xd[r * nb + b] = std::numeric_limits<float>::quiet_NaN();
        std::memset(q, 0, kQ8Block);
        continue;
      }
      xd[r * nb + b] = amax / 127.0f;
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (int i = 0; i < kQ8Block; ++i) q[i] = static_cast<int8_t>(std::nearbyint(p[i] * id));
    }
  }
}

void q8_gemm_cols_scalar(const Q8GemmArgs& a, int64_t c0, int64_t c1) {
  const int64_t nb = a.nb;
  for (int64_t r = 0; r < a.m; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      float acc = 0.0f;  // one chain over the blocks (q8_simd.h)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = a.w + (c * nb + b) * kQ8BlockBytes;
        const int8_t* qw = reinterpret_cast<const int8_t*>(blk + 2);
        const int8_t* qx = a.xq + (r * nb + b) * kQ8Block;
        int32_t isum = 0;
        for (int i = 0; i < kQ8Block; ++i) isum += int32_t(qw[i]) * int32_t(qx[i]);
        acc = std::fma(static_cast<float>(isum) * read_f16(blk), a.xd[r * nb + b], acc);
      }
      a.y[r * a.n + c] = a.bias ? acc + a.bias[c] : acc;
    }
  }
}

// ---------------------------------------------------------------- GEMM entries

void q8_gemm_ref(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, const float* bias, float* y) {
  const int64_t nb = k / kQ8Block;
  if (m <= 0 || n <= 0) return;
  std::vector<int8_t> xq(static_cast<size_t>(m * nb * kQ8Block));
  std::vector<float> xd(static_cast<size_t>(m * nb));
  q8_quantize_act_scalar(x, nb, 0, m, xq.data(), xd.data());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w + (c * nb + b) * kQ8BlockBytes;
        const int8_t* qw = reinterpret_cast<const int8_t*>(blk + 2);
        const int8_t* qx = xq.data() + (r * nb + b) * kQ8Block;
        int64_t isum = 0;
        for (int i = 0; i < kQ8Block; ++i) isum += int64_t(qw[i]) * int64_t(qx[i]);
        acc += static_cast<double>(read_f16(blk)) * static_cast<double>(xd[static_cast<size_t>(r * nb + b)]) * static_cast<double>(isum);
      }
      if (bias) acc += bias[c];
      y[r * n + c] = static_cast<float>(acc);
    }
  }
}

void q8_gemm(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, const float* bias, float* y, Q8Kernel kernel) {
  if (m <= 0 || n <= 0) return;
  const int64_t nb = k / kQ8Block;
  if (nb <= 0) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) y[r * n + c] = bias ? bias[c] : 0.0f;
    return;
  }
  if (kernel == Q8Kernel::Auto || !q8_kernel_available(kernel)) kernel = q8_auto_kernel();
  thread_local std::vector<int8_t> xq_scratch;
  thread_local std::vector<float> xd_scratch;
  thread_local std::vector<int32_t> xsum_scratch;
  int8_t* xq = thread_scratch(xq_scratch, m * nb * kQ8Block);
  float* xd = thread_scratch(xd_scratch, m * nb);
  // Only the VNNI bodies read xsum (the offset of their w + 128 operand).
  const bool vnni = kernel == Q8Kernel::Avx512Vnni || kernel == Q8Kernel::Avx2Vnni;
  int32_t* xsum = vnni ? thread_scratch(xsum_scratch, m * nb) : nullptr;
  quantize_act(kernel, x, nb, m, xq, xd);
  for (int64_t i = 0; vnni && i < m * nb; ++i) {
    int32_t s = 0;
    for (int j = 0; j < kQ8Block; ++j) s += xq[i * kQ8Block + j];
    xsum[i] = s;
  }

  Q8GemmArgs a;
  a.m = m;
  a.n = n;
  a.nb = nb;
  a.xq = xq;
  a.xd = xd;
  a.xsum = xsum;
  a.w = w;
  a.bias = bias;
  a.y = y;
  const int64_t per = std::max(kColumnAlign, round_up(ceil_div(n, kTargetTasks), kColumnAlign));
  const int64_t tasks = ceil_div(n, per);
  const bool small = n * nb * kQ8BlockBytes < kInlineBytes;
  global_pool().parallel_for_or_inline(tasks, small, [&](int64_t t) {
    const int64_t c0 = t * per, c1 = std::min(n, c0 + per);
    run_cols(kernel, a, c0, c1);
  });
}

}  // namespace tessera::cpu

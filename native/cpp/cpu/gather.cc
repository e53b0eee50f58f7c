// Embedding lookup, row gather/scatter and f32/f16/bf16 conversion: references, scalar paths and dispatch.
// SIMD conversion bodies are in gather_avx2.cc / gather_avx512.cc.
//
// Conversion semantics (every path is bitwise equal to convert_ref, NaNs included):
//   f16 -> f32, bf16 -> f32   exact; NaNs come out quiet (quiet bit set, payload kept), as F16C does.
//   f32 -> f16                round to nearest even, subnormals kept, overflow -> inf, NaN -> sign | 0x7e00.
//   f32 -> bf16               round to nearest even (subnormals too), NaN -> its top half with the quiet bit.
//   f16 <-> bf16              through f32 (exact), so rounded once.
//   same dtype (any dtype)    a byte copy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/error.h"
#include "../core/thread_pool.h"
#include "gather_simd.h"
#include "kernels.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kConvertGrain = 1 << 15;       // elements per task
constexpr int64_t kCopyGrainBytes = 1 << 16;     // bytes per task for row copies
constexpr int64_t kParallelScatterBytes = 1 << 20;  // below this, scatter is one sequential pass

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void check_convertible(DType s, DType d) {
  if (s != d && (!is_float_dtype(s) || !is_float_dtype(d)))
    fail(ErrorCode::Unsupported, std::string("convert: no conversion from ") + dtype_name(s) + " to " + dtype_name(d) +
                                     " (conversions are between f32, f16 and bf16)");
}

float f16_to_f32_quiet(f16_t h) {
  const float f = f16_to_f32(h);
  return std::isnan(f) ? bits_f32(f32_bits(f) | 0x00400000u) : f;
}

float load_as_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F16: return f16_to_f32_quiet(static_cast<const f16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const bf16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store_from_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F16: static_cast<f16_t*>(p)[i] = f32_to_f16(v); break;
    case DType::BF16: static_cast<bf16_t*>(p)[i] = f32_to_bf16(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// One conversion of n elements on the active ISA (src_dtype != dst_dtype).
void convert_span(Isa isa, const void* src, DType s, void* dst, DType d, int64_t n) {
  switch (isa) {
    case Isa::Avx512: convert_avx512(src, s, dst, d, n); break;
    case Isa::Avx2: convert_avx2(src, s, dst, d, n); break;
    default:
      for (int64_t i = 0; i < n; ++i) store_from_f32(dst, d, i, load_as_f32(src, s, i));
  }
}

const char* byte_ptr(const void* p, int64_t offset) { return static_cast<const char*>(p) + offset; }
char* byte_ptr(void* p, int64_t offset) { return static_cast<char*>(p) + offset; }

}  // namespace

// ---------------------------------------------------------------- convert

void convert_ref(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  check_convertible(src_dtype, dst_dtype);
  if (n <= 0) return;
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_f32(dst, dst_dtype, i, load_as_f32(src, src_dtype, i));
}

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  check_convertible(src_dtype, dst_dtype);
  if (n <= 0) return;
  const int64_t s_bytes = static_cast<int64_t>(dtype_size(src_dtype));
  const int64_t d_bytes = static_cast<int64_t>(dtype_size(dst_dtype));
  if (src_dtype == dst_dtype) {
    global_pool().parallel_range(n * s_bytes, kCopyGrainBytes * 4, [&](int64_t b, int64_t e) {
      std::memcpy(byte_ptr(dst, b), byte_ptr(src, b), static_cast<size_t>(e - b));
    });
    return;
  }
  const Isa isa = active_isa();
  global_pool().parallel_range(n, kConvertGrain, [&](int64_t b, int64_t e) {
    convert_span(isa, byte_ptr(src, b * s_bytes), src_dtype, byte_ptr(dst, b * d_bytes), dst_dtype, e - b);
  });
}

// ---------------------------------------------------------------- embedding

void embedding_ref(const void* table, DType table_dtype, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  check_convertible(table_dtype, DType::F32);
  const int64_t row_bytes = dim * static_cast<int64_t>(dtype_size(table_dtype));
  for (int64_t i = 0; i < n; ++i) {
    const void* row = byte_ptr(table, ids[i] * row_bytes);
    for (int64_t j = 0; j < dim; ++j) out[i * dim + j] = load_as_f32(row, table_dtype, j);
  }
}

void embedding(const void* table, DType table_dtype, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  check_convertible(table_dtype, DType::F32);
  if (n <= 0 || dim <= 0) return;
  const int64_t row_bytes = dim * static_cast<int64_t>(dtype_size(table_dtype));
  const Isa isa = active_isa();
  const int64_t grain = std::max<int64_t>(1, kConvertGrain / dim);
  global_pool().parallel_range(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const void* row = byte_ptr(table, ids[i] * row_bytes);
      if (table_dtype == DType::F32) std::memcpy(out + i * dim, row, static_cast<size_t>(row_bytes));
      else convert_span(isa, row, table_dtype, out + i * dim, DType::F32, dim);
    }
  });
}

// ---------------------------------------------------------------- row gather / scatter

void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst) {
  if (n <= 0 || row_bytes <= 0) return;
  const int64_t grain = std::max<int64_t>(1, kCopyGrainBytes / row_bytes);
  global_pool().parallel_range(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      std::memcpy(byte_ptr(dst, i * row_bytes), byte_ptr(src, idx[i] * row_bytes), static_cast<size_t>(row_bytes));
    }
  });
}

// Duplicate indices: the last write wins, exactly as a sequential pass in index order would leave dst. Small
// scatters are that sequential pass; large ones keep only the last occurrence of each index (found by a
// stable sort) and copy those rows in parallel, which gives the same bytes.
void scatter_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst) {
  if (n <= 0 || row_bytes <= 0) return;
  if (n * row_bytes < kParallelScatterBytes || global_pool().size() == 1) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(byte_ptr(dst, idx[i] * row_bytes), byte_ptr(src, i * row_bytes), static_cast<size_t>(row_bytes));
    }
    return;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  std::vector<int64_t> winners;  // for each distinct index, its last position in idx
  winners.reserve(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    if (k + 1 == order.size() || idx[order[k + 1]] != idx[order[k]]) winners.push_back(order[k]);
  }
  const int64_t grain = std::max<int64_t>(1, kCopyGrainBytes / row_bytes);
  global_pool().parallel_range(static_cast<int64_t>(winners.size()), grain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t i = winners[static_cast<size_t>(k)];
      std::memcpy(byte_ptr(dst, idx[i] * row_bytes), byte_ptr(src, i * row_bytes), static_cast<size_t>(row_bytes));
    }
  });
}

}  // namespace tessera::cpu

// Per-ISA dtype conversion bodies (gather_avx2.cc with F16C, gather_avx512.cc). Used by convert() and by
// embedding() for f16/bf16 tables.
#pragma once
#include <cstdint>

#include "../core/dtype.h"

namespace tessera::cpu {

// n elements from src_dtype to dst_dtype, both in {f32, f16, bf16} and different. Bitwise equal to
// convert_ref for every input, NaNs included.
void convert_avx2(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
void convert_avx512(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

}  // namespace tessera::cpu

// Attention's per-ISA inner step, shared by prefill and decode. attention.cc owns the task loops (which
// rows, which key blocks) and picks one of these per call; the SIMD bodies live in attention_kernel.inl,
// compiled once per ISA by attention_avx2.cc / attention_avx512.cc.
#pragma once
#include <cstdint>

#include "kernels.h"

namespace tessera::cpu {

// Keys are folded into a query row in blocks of this many (one KV-cache page for decode), so the running
// max/sum are rescaled once per block rather than once per key.
constexpr int64_t kKeyBlock = kPageSize;

// Online-softmax state of one query row: the largest visible score so far (-inf before any), and the sum
// of exp(score - max) over the visible keys. The matching acc[d] holds sum exp(score - max) * v.
struct SoftmaxRow {
  float max;
  float sum;
};

// Folds keys [0, nk) of one block (nk <= kKeyBlock) into a query row: K row j is at k + j * kv_stride, V row j
// at v + j * kv_stride, d floats each. key_mask (may be null) holds one byte per key; 0 gives the key no
// weight. Every (row, block) pair is computed the same way whichever task runs it, so results never depend
// on how rows are grouped into tasks.
using AttendBlockFn = void (*)(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t nk,
                               int64_t d, float scale, const uint8_t* key_mask, SoftmaxRow& row, float* acc);

void attend_block_scalar(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t nk, int64_t d,
                         float scale, const uint8_t* key_mask, SoftmaxRow& row, float* acc);
void attend_block_avx2(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t nk, int64_t d,
                       float scale, const uint8_t* key_mask, SoftmaxRow& row, float* acc);
void attend_block_avx512(const float* q, const float* k, const float* v, int64_t kv_stride, int64_t nk, int64_t d,
                         float scale, const uint8_t* key_mask, SoftmaxRow& row, float* acc);

}  // namespace tessera::cpu

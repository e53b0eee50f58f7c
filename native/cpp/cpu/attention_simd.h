// Attention's per-ISA inner step, shared by prefill and decode. attention.cc owns the task loops (which rows,
// which key blocks) and picks one of these per call; the SIMD bodies are in attention_kernel.inl, compiled once
// per ISA by attention_avx2.cc / attention_avx512.cc.
#pragma once
#include <cstdint>

#include "kernels.h"

namespace tessera::cpu {

// Keys are folded into query rows in blocks of this many (one KV-cache page for decode), so a row's running
// max and sum are rescaled once per block rather than once per key.
constexpr int64_t kKeyBlock = kPageSize;

// Online-softmax state of one query row: the largest visible score so far (-inf before any), and the sum of
// exp(score - max) over the visible keys. The row's accumulator acc[d] holds sum exp(score - max) * v.
struct SoftmaxRow {
  float max;
  float sum;
};

// One key block and the query rows that read it (e.g. the query heads of a GQA group, and for prefill a run of
// consecutive queries), so each K/V row is brought in once and reused from L1 by every row.
struct AttendBlock {
  // K row j of the block is at k + j * kv_stride, V row j at v + j * kv_stride; d floats each.
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t kv_stride = 0;
  const uint8_t* key_mask = nullptr;  // one byte per key of the block, 0 = no weight; may be null
  int64_t d = 0;
  float scale = 1.0f;
  int64_t rows = 0;
  const float* const* q = nullptr;  // q[r]: row r's query (d floats)
  const int64_t* nk = nullptr;      // row r may see keys [0, nk[r]) of the block (nk[r] <= kKeyBlock; 0 skips it)
  SoftmaxRow* state = nullptr;      // state[r]
  float* acc = nullptr;             // row r's accumulator at acc + r * d
};

// Folds the block into every row. A row's arithmetic is the same whichever rows it is processed with, so
// results depend only on (row, block), never on how rows were grouped into tasks or calls.
using AttendBlockFn = void (*)(const AttendBlock& block);

void attend_block_scalar(const AttendBlock& block);
void attend_block_avx2(const AttendBlock& block);
void attend_block_avx512(const AttendBlock& block);

}  // namespace tessera::cpu

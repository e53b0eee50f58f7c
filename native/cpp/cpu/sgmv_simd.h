// Per-ISA bodies of the SGMV / BGMV kernels (sgmv_avx2.cc / sgmv_avx512.cc, compiled with those ISA flags; the
// loops are in sgmv_body.inl) and the scalar fast path in sgmv.cc. sgmv.cc schedules the tasks; each body works on
// one group of rows and a range of K-chunks (shrink) or output columns (expand). Every body computes each output
// with the arithmetic core/op_args.h fixes for SgmvArgs, whatever rows it is given together, so the result does not
// depend on the schedule.
#pragma once
#include <cstdint>

#include "kernels.h"

namespace tessera::cpu {

// The activation rows of one group: row j is ids[j] when ids is set (BGMV), else base + j (an SGMV segment).
struct SgmvRows {
  const int32_t* ids = nullptr;
  int64_t base = 0;
  int64_t at(int64_t j) const { return ids ? static_cast<int64_t>(ids[j]) : base + j; }
};

// Shrink partials of one group (n_rows rows, weight W [r, h]) for its rows [j0, j1) and K-chunks [c0, c1):
//   part[(c * n_rows + j) * r + k] = f32 dot(x[row j, chunk c], W[k, chunk c]), chunks of kSgmvChunk elements.
// x is [*, h] (row stride h).
struct ShrinkTile {
  const float* x = nullptr;
  int64_t h = 0;
  SgmvRows rows;
  int64_t n_rows = 0, j0 = 0, j1 = 0;
  const float* w = nullptr;
  int64_t r = 0;
  int64_t c0 = 0, c1 = 0;
  float* part = nullptr;
};
void sgmv_shrink_tile_scalar(const ShrinkTile& t);
void sgmv_shrink_tile_avx2(const ShrinkTile& t);
void sgmv_shrink_tile_avx512(const ShrinkTile& t);

// Expand of one group (weight W [r, h], h = h_out) for its rows [j0, j1) and output columns [col0, col1):
//   y[row j, col] += scale * acc,  acc = multiply-add chain over k = 0..r-1 of v[row j, k] * W[k, col].
// v is [*, r_max], y is [*, h].
struct ExpandTile {
  const float* v = nullptr;
  int64_t r_max = 0;
  SgmvRows rows;
  int64_t j0 = 0, j1 = 0;
  const float* w = nullptr;
  int64_t r = 0, h = 0;
  int64_t col0 = 0, col1 = 0;
  float scale = 1.0f;
  float* y = nullptr;
};
void sgmv_expand_tile_scalar(const ExpandTile& t);
void sgmv_expand_tile_avx2(const ExpandTile& t);
void sgmv_expand_tile_avx512(const ExpandTile& t);

}  // namespace tessera::cpu

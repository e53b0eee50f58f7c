// Per-ISA bodies of the PET operators (pet_avx2.cc / pet_avx512.cc, compiled with those ISA flags; the loops are in
// pet_body.inl) and the scalar fast path in pet.cc. pet.cc splits each op into tiles; a body computes every output of
// its tile with the arithmetic fixed below, whatever else the tile holds, so results never depend on the schedule.
// Scratch is allocated by pet.cc (baseline ISA: nothing with external linkage may be compiled with AVX flags).
#pragma once
#include <algorithm>
#include <cstdint>

#include "pet_args.h"

namespace tessera::cpu {

// The widest SIMD body's row block for CSR (AVX-512: 16 rows, one per lane) and adapter (4 rows); scratch is sized
// for them whatever the ISA.
constexpr int64_t kPetCsrBlockMax = 16;
constexpr int64_t kPetAdapterRowsMax = 4;

// CSR: the op's logical rows [j0, j1) against outputs [o0, o1).
//   acc = f32 multiply-add chain over e = indptr[o] .. indptr[o+1]-1 of values[e] * x[row, indices[e]] (fused on the
//   SIMD paths), then y[row, o] = y + scale * acc (one fused multiply-add on the SIMD paths).
// The SIMD bodies put one row per lane (x rows transposed into scratch), so a lane's arithmetic is that chain.
// scratch: in * kPetCsrBlockMax + (o1 - o0) * kPetCsrBlockMax floats.
struct PetCsrTile {
  const PetOpArgs* op = nullptr;
  int64_t j0 = 0, j1 = 0, o0 = 0, o1 = 0;
  float* scratch = nullptr;
};
void pet_csr_tile_scalar(const PetCsrTile& t);

// Output o's nonzeros [e0, e1), clamped to [0, nnz] and empty when x has no columns. The binding validates a matrix
// on its first use only (bind_pet.cc), so the fast kernels clamp what they read: a matrix written afterwards gives
// wrong numbers, never an out-of-bounds access. Columns are clamped to in - 1 where they are read.
static inline void pet_csr_range(const PetOpArgs& op, int64_t o, int64_t& e0, int64_t& e1) {
  e0 = std::min<int64_t>(std::max<int64_t>(op.indptr[o], 0), op.nnz);
  e1 = op.in == 0 ? e0 : std::min<int64_t>(std::max<int64_t>(op.indptr[o + 1], e0), op.nnz);
}
void pet_csr_tile_avx2(const PetCsrTile& t);
void pet_csr_tile_avx512(const PetCsrTile& t);

// Adapter: the op's logical rows [j0, j1), whole rows (in place):
//   pre[k] = dot(y[row], down[k]) ; h[k] = act(pre[k] + down_bias[k])      k < m
//   y[row, c] = y + (dot(h, up[c]) + up_bias[c])                            c < d
// dot = lane-wise f32 FMA chain over the vector length (a masked tail last), then the ISA's horizontal sum; the
// scalar path sums sequentially. scratch: kPetAdapterRowsMax * m floats (h never leaves it).
struct PetAdapterTile {
  const PetOpArgs* op = nullptr;
  int64_t j0 = 0, j1 = 0;
  float* scratch = nullptr;
};
void pet_adapter_tile_scalar(const PetAdapterTile& t);
void pet_adapter_tile_avx2(const PetAdapterTile& t);
void pet_adapter_tile_avx512(const PetAdapterTile& t);

}  // namespace tessera::cpu

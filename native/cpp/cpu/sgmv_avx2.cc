// SGMV / BGMV tile bodies compiled for AVX2 + FMA (16 vector registers); the loops are in sgmv_body.inl.
#include <algorithm>

#include "sgmv_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {

// Shrink: a lone row streams 8 W rows at once (8 accumulators); blocks of 3 rows x 4 W rows (12 accumulators, the
// 3 x vectors and one W vector: all 16 registers).
constexpr int kShrinkK1 = 8;
constexpr int kShrinkRows = 3, kShrinkK = 4;
// Expand: blocks of 4 rows x 3 vectors (24 columns; 12 accumulators, 3 W vectors and one broadcast); a lone row:
// 4 W rows x 8 vectors at a time.
constexpr int kExpandRows = 4, kExpandCols = 3, kExpandK1 = 4, kExpandCols1 = 8;

#include "sgmv_body.inl"

}  // namespace avx2

void sgmv_shrink_tile_avx2(const ShrinkTile& t) { avx2::shrink_tile(t); }
void sgmv_expand_tile_avx2(const ExpandTile& t) { avx2::expand_tile(t); }

}  // namespace tessera::cpu

// SGMV / BGMV tile bodies compiled for AVX-512 (32 vector registers); the loops are in sgmv_body.inl.
#include <algorithm>

#include "sgmv_simd.h"
#include "vec_avx512.h"

namespace tessera::cpu {
namespace avx512 {

// Shrink: a lone row streams 8 W rows at once; blocks of 6 rows x 4 W rows (24 accumulators, 6 x vectors, one W).
constexpr int kShrinkK1 = 8;
constexpr int kShrinkRows = 6, kShrinkK = 4;
// Expand: blocks of 6 rows x 4 vectors (64 columns; 24 accumulators, 4 W vectors, one broadcast); a lone row: 4 W
// rows x 8 vectors at a time.
constexpr int kExpandRows = 6, kExpandCols = 4, kExpandK1 = 4, kExpandCols1 = 8;

// GCC 12 warns inside its own _mm512_reduce_add_ps (an intentionally undefined upper half): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "sgmv_body.inl"
#pragma GCC diagnostic pop

}  // namespace avx512

void sgmv_shrink_tile_avx512(const ShrinkTile& t) { avx512::shrink_tile(t); }
void sgmv_expand_tile_avx512(const ExpandTile& t) { avx512::expand_tile(t); }

}  // namespace tessera::cpu

// PET operator bodies compiled for AVX2 + FMA (16 vector registers); the loops are in pet_body.inl.
#include <algorithm>
#include <cstdint>

#include "pet_simd.h"
#include "vec_avx2.h"

namespace tessera::cpu {
namespace avx2 {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // vec_math.inl also defines the elementwise loops
#include "vec_math.inl"
#pragma GCC diagnostic pop

// CSR: 8 rows per block (one per lane). Adapter: 2 rows x 4 weight rows (8 accumulators).
constexpr int64_t kCsrBlock = kLanes;
constexpr int kAdapterRows = 2, kAdapterK = 4;
static_assert(kCsrBlock % 8 == 0, "CSR blocks are transposed in 8 x 8 tiles");
static_assert(kCsrBlock <= kPetCsrBlockMax && kAdapterRows <= kPetAdapterRowsMax, "pet.cc sizes scratch for the widest body");

#include "pet_body.inl"

}  // namespace avx2

void pet_csr_tile_avx2(const PetCsrTile& t) { avx2::csr_tile(t); }
void pet_adapter_tile_avx2(const PetAdapterTile& t) { avx2::adapter_tile(t); }

}  // namespace tessera::cpu

// PET operator bodies compiled for AVX-512 (32 vector registers); the loops are in pet_body.inl.
#include <algorithm>
#include <cstdint>

#include "pet_simd.h"
#include "vec_avx512.h"

namespace tessera::cpu {
namespace avx512 {

// GCC 12 warns inside its own _mm512_reduce_add_ps (an intentionally undefined upper half): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wunused-function"  // vec_math.inl also defines the elementwise loops
#include "vec_math.inl"

// CSR: 16 rows per block (one per lane). Adapter: 4 rows x 4 weight rows (16 accumulators).
constexpr int64_t kCsrBlock = kLanes;
constexpr int kAdapterRows = 4, kAdapterK = 4;
static_assert(kCsrBlock % 8 == 0, "CSR blocks are transposed in 8 x 8 tiles");
static_assert(kCsrBlock <= kPetCsrBlockMax && kAdapterRows <= kPetAdapterRowsMax, "pet.cc sizes scratch for the widest body");

#include "pet_body.inl"
#pragma GCC diagnostic pop

}  // namespace avx512

void pet_csr_tile_avx512(const PetCsrTile& t) { avx512::csr_tile(t); }
void pet_adapter_tile_avx512(const PetAdapterTile& t) { avx512::adapter_tile(t); }

}  // namespace tessera::cpu

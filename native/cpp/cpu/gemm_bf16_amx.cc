// The bf16-compute GEMM on AMX-BF16 tiles (Sapphire Rapids and later): the body is gemm_bf16_amx_body.inl, here
// bound to the tile instructions. Called only when amx_ready() (core/cpu_features.h): the CPU has AMX and Linux
// granted the process its tile state. Compiled with the AVX-512 flags too (the epilogue transposes in zmm).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm_simd.h"

namespace tessera::cpu {
namespace {

// GCC's tile intrinsics are asm statements that name no memory operand: the barriers keep the compiler from moving
// the padded copies (plain stores) past a tile load, or reading the C tiles before the tile store.
inline void compiler_barrier() { __asm__ __volatile__("" ::: "memory"); }
#define AMX_CONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_RELEASE() _tile_release()
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, ptr, stride) \
  do {                           \
    compiler_barrier();          \
    _tile_loadd(t, ptr, stride); \
  } while (0)
#define AMX_STORE(t, ptr, stride)  \
  do {                             \
    _tile_stored(t, ptr, stride);  \
    compiler_barrier();            \
  } while (0)
#define AMX_DP(c, a, b) _tile_dpbf16ps(c, a, b)

#include "gemm_tile_avx512.inl"
#include "gemm_bf16_amx_body.inl"

}  // namespace

void gemm_bf16_task_amx(const GemmBf16Plan& plan, int64_t task) { amx_task(plan, task); }

}  // namespace tessera::cpu

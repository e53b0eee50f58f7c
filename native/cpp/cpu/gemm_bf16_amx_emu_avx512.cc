// The AMX bf16-compute body (gemm_bf16_amx_body.inl) over a plain C++ emulation of the tile instructions, as the
// SDM defines them (TDPBF16PS: per output, the even then the odd product of each pair added in f32, pairs in order;
// the denormal flushing of the real unit is not emulated). It checks the tiling, the tails and the epilogue on every
// AVX-512 machine; gemm_bf16_amx.cc runs the same body on the real tiles. Slow: for tests only (Bf16Kernel::AmxEmulated).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../core/dtype.h"
#include "gemm_simd.h"

namespace tessera::cpu {
namespace {

void emu_config(const void* cfg);
void emu_zero(int t);
void emu_load(int t, const void* p, int64_t stride);
void emu_store(int t, void* p, int64_t stride);
void emu_dp(int c, int a, int b);
#define AMX_CONFIG(cfg) emu_config(cfg)
#define AMX_RELEASE() ((void)0)
#define AMX_ZERO(t) emu_zero(t)
#define AMX_LOAD(t, ptr, stride) emu_load(t, ptr, stride)
#define AMX_STORE(t, ptr, stride) emu_store(t, ptr, stride)
#define AMX_DP(c, a, b) emu_dp(c, a, b)

#include "gemm_tile_avx512.inl"
#include "gemm_bf16_amx_body.inl"

struct EmulatedTiles {
  TileConfig cfg;
  alignas(64) uint8_t t[8][16][64];
};
thread_local EmulatedTiles emu;

void emu_config(const void* cfg) {
  std::memcpy(&emu.cfg, cfg, sizeof(TileConfig));
  std::memset(emu.t, 0, sizeof emu.t);  // LDTILECFG zeroes every tile
}
void emu_zero(int t) { std::memset(emu.t[t], 0, sizeof emu.t[t]); }
void emu_load(int t, const void* p, int64_t stride) {
  emu_zero(t);
  for (int r = 0; r < emu.cfg.rows[t]; ++r) std::memcpy(emu.t[t][r], static_cast<const uint8_t*>(p) + r * stride, emu.cfg.colsb[t]);
}
void emu_store(int t, void* p, int64_t stride) {
  for (int r = 0; r < emu.cfg.rows[t]; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, emu.t[t][r], emu.cfg.colsb[t]);
}
float emu_bf16(const uint8_t* row, int i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  return bf16_to_f32(h);
}
void emu_dp(int c, int a, int b) {
  const int rows = emu.cfg.rows[c], cols = emu.cfg.colsb[c] / 4, pairs = emu.cfg.colsb[a] / 4;
  for (int m = 0; m < rows; ++m) {
    for (int n = 0; n < cols; ++n) {
      float acc;
      std::memcpy(&acc, emu.t[c][m] + 4 * n, 4);
      for (int i = 0; i < pairs; ++i) {
        acc += emu_bf16(emu.t[a][m], 2 * i) * emu_bf16(emu.t[b][i], 2 * n);
        acc += emu_bf16(emu.t[a][m], 2 * i + 1) * emu_bf16(emu.t[b][i], 2 * n + 1);
      }
      std::memcpy(emu.t[c][m] + 4 * n, &acc, 4);
    }
  }
}

}  // namespace

void gemm_bf16_task_amx_emulated(const GemmBf16Plan& plan, int64_t task) { amx_task(plan, task); }

}  // namespace tessera::cpu

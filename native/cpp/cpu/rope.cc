// Rotary position embedding (in place), HF Llama / GPT-NeoX "rotate_half" layout: reference, scalar path and
// dispatch. SIMD rotation bodies are in rope_avx2.cc / rope_avx512.cc.
//
// Angles: inv_freq_i = base^(-2i/rot_dim) and angle = pos * inv_freq_i are computed in double and reduced
// modulo 2*pi in double before a float sincos, so cos/sin are accurate to ~2e-7 at any position (an f32 angle,
// as in HF's reference code, is already up to ~2e-4 rad off at position 4096). The reference does it all in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "rope_simd.h"

namespace tessera::cpu {

namespace {

std::vector<double> inverse_frequencies(int64_t rot_dim, float base) {
  std::vector<double> inv(static_cast<size_t>(rot_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
  }
  return inv;
}

// cos/sin of pos * inv_freq[i] for one token. Cody-Waite reduction: 2*pi = kTwoPiHi + kTwoPiLo with kTwoPiHi
// holding 24 significant bits, so k * kTwoPiHi is exact for |k| < 2^29 (|angle| < 3.3e9 covers every i32
// position with inv_freq <= 1).
void token_cos_sin(int32_t pos, const std::vector<double>& inv_freq, bool inverse, float* cos, float* sin) {
  constexpr double kTwoPiHi = 6.2831854820251465;               // float(2*pi)
  constexpr double kTwoPiLo = -1.7484556025237907e-07;          // 2*pi - kTwoPiHi (double)
  constexpr double kInvTwoPi = 0.15915494309189535;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double k = std::floor(angle * kInvTwoPi + 0.5);
    const float reduced = static_cast<float>((angle - k * kTwoPiHi) - k * kTwoPiLo);
    cos[i] = std::cos(reduced);  // GCC fuses the pair into one sincosf call
    sin[i] = inverse ? -std::sin(reduced) : std::sin(reduced);  // sin(-a) = -sin(a), exactly
  }
}

void rope_rotate_scalar(float* x, int64_t heads, int64_t head_dim, int64_t half, const float* cos, const float* sin) {
  for (int64_t h = 0; h < heads; ++h) {
    float* x1 = x + h * head_dim;
    float* x2 = x1 + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cos[i] - b * sin[i];
      x2[i] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace

void rope_ref(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base,
              bool inverse) {
  const int64_t half = rot_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
      const double angle = static_cast<double>(positions[t]) * inv_freq;
      const double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* x1 = x + (t * heads + h) * head_dim;
        const double a = x1[i], b = x1[i + half];
        x1[i] = static_cast<float>(a * c - b * s);
        x1[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base,
          bool inverse) {
  const int64_t half = rot_dim / 2;
  if (tokens <= 0 || heads <= 0 || half <= 0) return;
  const Isa isa = active_isa();
  const std::vector<double> inv_freq = inverse_frequencies(rot_dim, base);
  // Tokens per task: ~8k rotated elements; each token's cos/sin table is built once and reused by its heads.
  const int64_t grain = std::max<int64_t>(1, 8192 / (heads * rot_dim));
  global_pool().parallel_range(tokens, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> table(static_cast<size_t>(2 * half));
    float* cos = table.data();
    float* sin = cos + half;
    for (int64_t t = t0; t < t1; ++t) {
      token_cos_sin(positions[t], inv_freq, inverse, cos, sin);
      float* xt = x + t * heads * head_dim;
      switch (isa) {
        case Isa::Avx512: rope_rotate_avx512(xt, heads, head_dim, half, cos, sin); break;
        case Isa::Avx2: rope_rotate_avx2(xt, heads, head_dim, half, cos, sin); break;
        default: rope_rotate_scalar(xt, heads, head_dim, half, cos, sin);
      }
    }
  });
}

}  // namespace tessera::cpu

// The bf16-compute GEMM body on AVX512-BF16 (plan and layout: GemmBf16Plan in gemm_simd.h). Micro-kernel: 8 weight
// rows broadcast as bf16 pairs against up to 3 zmm of packed op(A)^T pairs = an 8 x 48 tile in 24 f32 accumulators,
// one VDPBF16PS (32 multiply-adds) per accumulator and pair, where the f32 path's FMA does 16.
// GCC 12's intrinsic headers trip -W(maybe-)uninitialized once inlined (see gemm_avx512.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "gemm_simd.h"

namespace tessera::cpu {
namespace {

constexpr int kMr = 8;
constexpr int kNv = kBf16Nr / 16;

#include "gemm_tile_avx512.inl"

// Lanes of x rounded to bf16 (round to nearest even, NaNs kept quiet: f32_to_bf16 in core/dtype.h), in the low
// half of each 32-bit lane.
inline __m512i round_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}

// 32 consecutive f32 of one row (k from 2 * i0; `valid` of them, the rest zero) as 16 pair words.
inline __m512 row_pairs(const float* src, int64_t valid) {
  const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(valid), src);
  const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(valid - 16), src + 16);
  const __m256i lo16 = _mm512_cvtepi32_epi16(round_bf16(lo));
  const __m256i hi16 = _mm512_cvtepi32_epi16(round_bf16(hi));
  return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo16), hi16, 1));
}

inline uint32_t pair_word(float even, float odd) {
  return static_cast<uint32_t>(f32_to_bf16(even)) | (static_cast<uint32_t>(f32_to_bf16(odd)) << 16);
}

// acc[r][v] (f32 lanes = rows q + 16 v .. of op(A)) += W row p + r · op(A)^T over kc pairs; with `half_tail` the
// last pair holds only its even element (k odd), which is read as one bf16 so the row's end is never overrun.
template <int R, int NV>
void micro_tile(int cols, int64_t kc, bool half_tail, const uint16_t* w, int64_t ldw, const uint32_t* y, int64_t ys,
                const GemmPlan& plan, int64_t p, int64_t q, bool first) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int64_t full = half_tail ? kc - 1 : kc;
  for (int64_t i = 0; i < full; ++i) {
    __m512i yv[NV];
    for (int v = 0; v < NV; ++v) yv[v] = _mm512_loadu_si512(y + i * ys + v * 16);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, w + r * ldw + 2 * i, sizeof(pair));
      const __m512i b = _mm512_set1_epi32(pair);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)yv[v], (__m512bh)b);
    }
  }
  if (half_tail) {
    __m512i yv[NV];
    for (int v = 0; v < NV; ++v) yv[v] = _mm512_loadu_si512(y + full * ys + v * 16);
    for (int r = 0; r < R; ++r) {
      const __m512i b = _mm512_set1_epi32(static_cast<int32_t>(w[r * ldw + 2 * full]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)yv[v], (__m512bh)b);
    }
  }
  store_tile<R, NV>(acc, cols, plan, p, q, first);
}

using MicroFn = void (*)(int, int64_t, bool, const uint16_t*, int64_t, const uint32_t*, int64_t, const GemmPlan&, int64_t, int64_t,
                         bool);

template <int R>
constexpr MicroFn micro_for(int nv) {
  return nv == 1 ? &micro_tile<R, 1> : nv == 2 ? &micro_tile<R, 2> : &micro_tile<R, 3>;
}
constexpr MicroFn kMicro[kMr][kNv] = {
    {micro_for<1>(1), micro_for<1>(2), micro_for<1>(3)}, {micro_for<2>(1), micro_for<2>(2), micro_for<2>(3)},
    {micro_for<3>(1), micro_for<3>(2), micro_for<3>(3)}, {micro_for<4>(1), micro_for<4>(2), micro_for<4>(3)},
    {micro_for<5>(1), micro_for<5>(2), micro_for<5>(3)}, {micro_for<6>(1), micro_for<6>(2), micro_for<6>(3)},
    {micro_for<7>(1), micro_for<7>(2), micro_for<7>(3)}, {micro_for<8>(1), micro_for<8>(2), micro_for<8>(3)},
};

}  // namespace

// One panel: `rows` rows of op(A) starting at `a` (a column of A when trans_a), rounded and packed as pair words.
void gemm_bf16_pack_avx512(const float* a, int64_t lda, bool trans_a, int64_t rows, int64_t k, uint32_t* panel) {
  const int64_t pairs = (k + 1) / 2;
  const int64_t width = gemm_detail::gemm_round_up(rows, 16);
  if (trans_a) {  // op(A) = A^T: element (q, p) at a[p * lda + q], read column by column (rare: no model path)
    for (int64_t i = 0; i < pairs; ++i) {
      uint32_t* dst = panel + i * width;
      for (int64_t r = 0; r < width; ++r) {
        const float odd = r < rows && 2 * i + 1 < k ? a[(2 * i + 1) * lda + r] : 0.0f;
        dst[r] = r < rows ? pair_word(a[2 * i * lda + r], odd) : 0u;
      }
    }
    return;
  }
  // 16 rows x 16 pairs at a time: each row's 32 floats become one vector of pair words, and a 16 x 16 transpose
  // of those words gives one vector of 16 rows per pair.
  for (int64_t r0 = 0; r0 < width; r0 += 16) {
    for (int64_t i0 = 0; i0 < pairs; i0 += 16) {
      __m512 block[16];
      const int64_t valid = k - 2 * i0;
      for (int t = 0; t < 16; ++t)
        block[t] = r0 + t < rows ? row_pairs(a + (r0 + t) * lda + 2 * i0, valid) : _mm512_setzero_ps();
      transpose16(block);
      const int64_t n_pairs = std::min<int64_t>(16, pairs - i0);
      for (int64_t s = 0; s < n_pairs; ++s) _mm512_storeu_ps(reinterpret_cast<float*>(panel + (i0 + s) * width + r0), block[s]);
    }
  }
}

void gemm_bf16_task_avx512(const GemmBf16Plan& pl, int64_t task) {
  const int64_t pb = task / pl.q_blocks, qb = task % pl.q_blocks;
  const int64_t p0 = pb * pl.p_block, p1 = std::min(pl.n, p0 + pl.p_block);
  const int64_t q0 = qb * pl.q_block, q1 = std::min(pl.m, q0 + pl.q_block);
  if (p0 >= p1 || q0 >= q1) return;
  const bool odd_k = (pl.k & 1) != 0;
  // k blocks outermost (usually one): a block of 8 weight rows stays in L2 while it meets every panel of the task.
  for (int64_t k0 = 0; k0 < pl.pairs; k0 += pl.kc_pairs) {
    const int64_t kc = std::min(pl.kc_pairs, pl.pairs - k0);
    const bool half_tail = odd_k && k0 + kc == pl.pairs;
    for (int64_t p = p0; p < p1; p += kMr) {
      const int rows = static_cast<int>(std::min<int64_t>(kMr, p1 - p));
      const uint16_t* w = pl.w + p * pl.ldw + 2 * k0;
      for (int64_t q = q0; q < q1; q += kBf16Nr) {
        const int64_t j = q / kBf16Nr;
        const int64_t width = gemm_detail::gemm_bf16_panel_width(pl.m, j);
        const int cols = static_cast<int>(std::min<int64_t>(kBf16Nr, pl.m - q));
        const uint32_t* y = pl.y + gemm_detail::gemm_bf16_panel_offset(j, pl.pairs) + k0 * width;
        kMicro[rows - 1][width / 16 - 1](cols, kc, half_tail, w, pl.ldw, y, width, pl.out, p, q, k0 == 0);
      }
    }
  }
}

}  // namespace tessera::cpu

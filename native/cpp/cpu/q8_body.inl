// Q8_0 GEMM and activation-quantization loops, included by q8_avx2.cc and q8_avx512.cc inside their ISA namespace
// (q8_simd.h fixes the arithmetic). The including file defines, before the include:
//   kRowsMax, kColsMax   the register tile: up to kRowsMax activation rows x kColsMax weight rows (output columns);
//   kCols1               the columns of a one-row tile (decode, m = 1);
//   dot_u8s8(xabs, sw)   8 int32 lanes, lane j = sum over t < 4 of xabs[4j + t] * sw[4j + t] (u8 x s8, exact:
//                        maddubs + madd on AVX2, one vpdpbusd with VNNI).
// The loops use 256-bit operations, two accumulators per output (even and odd blocks: q8_simd.h). q8_avx512.cc has
// its own 512-bit tile (both halves of a block pair in one register) and uses only the helpers and the activation
// quantizer from here.
//
// Sign trick (as llama.cpp, with the roles chosen so no value overflows): qw * qx == |qw| * (qx with qw's sign), and
// _mm256_sign_epi8 applies it; |qx| <= 127, so the signed operand never wraps, and |qw| <= 128 fits the unsigned one
// (a -128 weight works too); u8 x s8 pairs never saturate the int16 of maddubs (2 * 128 * 127 < 32767).

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as q8_simd.h fixes it.
static inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // [a0+a4, a1+a5, a2+a6, a3+a7]
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                   // [s0+s2, s1+s3, ...]
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

static inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

#ifndef TESSERA_Q8_OWN_TILE  // q8_avx512.cc defines its own 512-bit gemm_tile before including this file
// One block BB of a register tile into acc[H] (H = 0: the even lanes of q8_simd.h's canonical order, 1: the odd
// ones). The u8 operand is |w| (once per column, shared by the rows), the s8 operand x with w's sign
// (_mm256_sign_epi8: also zero where w is, which changes nothing since |w| is zero there). A macro, not a helper
// taking the accumulators by reference: GCC then keeps them on the stack.
#define TESSERA_Q8_BLOCK(H, BB)                                                                                   \
  for (int c = 0; c < C; ++c) {                                                                                  \
    const uint8_t* blk = wrow[c] + (BB) * kQ8BlockBytes;                                                         \
    const __m256 dw = _mm256_set1_ps(load_f16(blk));                                                             \
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));                            \
    const __m256i wabs = _mm256_abs_epi8(wq);                                                                    \
    for (int r = 0; r < R; ++r) {                                                                                \
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xrow + (r * nb + (BB)) * kQ8Block)); \
      const __m256i isum = dot_u8s8(wabs, _mm256_sign_epi8(xv, wq));                                             \
      /* float(isum) * dw, then fused * dx + acc: the canonical order; dx is a broadcast load */                 \
      const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), dw);                                              \
      acc[H][r][c] = _mm256_fmadd_ps(t, _mm256_broadcast_ss(drow + r * nb + (BB)), acc[H][r][c]);                \
    }                                                                                                            \
  }

// A register tile: rows [r0, r0 + R) x columns [c0, c0 + C), over every block: even blocks into acc[0], odd into
// acc[1].
template <int R, int C>
static void gemm_tile(const Q8GemmArgs& a, int64_t r0, int64_t c0) {
  const int64_t nb = a.nb;
  __m256 acc[2][R][C];
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[h][r][c] = _mm256_setzero_ps();
  const uint8_t* wrow[C];
  for (int c = 0; c < C; ++c) wrow[c] = a.w + (c0 + c) * nb * kQ8BlockBytes;
  const int8_t* xrow = a.xq + r0 * nb * kQ8Block;
  const float* drow = a.xd + r0 * nb;
  // The tile's W rows are short (k/32 blocks): prefetch the rows two tiles on at the same block, which bridges the
  // jump the hardware prefetchers only pick up after a few misses. The first row tile only: the later ones read the
  // same W rows again from cache.
  const bool prefetch = r0 == 0;
  const int64_t ahead = 2 * C * nb * kQ8BlockBytes;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    if (prefetch)
      for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(wrow[c] + ahead + b * kQ8BlockBytes), _MM_HINT_T0);
    TESSERA_Q8_BLOCK(0, b)
    TESSERA_Q8_BLOCK(1, b + 1)
  }
  if (b < nb) {  // an odd last block: the even lanes
    TESSERA_Q8_BLOCK(0, b)
  }
  for (int r = 0; r < R; ++r) {
    float* yr = a.y + (r0 + r) * a.n + c0;
    for (int c = 0; c < C; ++c) {
      const float s = hsum8(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
      yr[c] = a.bias ? s + a.bias[c0 + c] : s;
    }
  }
}
#undef TESSERA_Q8_BLOCK

#endif  // TESSERA_Q8_OWN_TILE

template <int R>
static void gemm_rows(const Q8GemmArgs& a, int64_t r0, int64_t c0, int64_t c1) {
  constexpr int C = R == 1 ? kCols1 : kColsMax;
  int64_t c = c0;
  for (; c + C <= c1; c += C) gemm_tile<R, C>(a, r0, c);
  for (; c < c1; ++c) gemm_tile<R, 1>(a, r0, c);  // the last columns of a range, one at a time
}

static void gemm_cols(const Q8GemmArgs& a, int64_t c0, int64_t c1) {
  static_assert(kRowsMax >= 1 && kRowsMax <= 4 && kColsMax >= 1 && kColsMax <= 8, "tile shapes instantiated below");
  int64_t r = 0;
  for (; r + kRowsMax <= a.m; r += kRowsMax) gemm_rows<kRowsMax>(a, r, c0, c1);
  switch (a.m - r) {
    case 1: gemm_rows<1>(a, r, c0, c1); break;
    case 2: if constexpr (kRowsMax > 2) gemm_rows<2>(a, r, c0, c1); break;
    case 3: if constexpr (kRowsMax > 3) gemm_rows<3>(a, r, c0, c1); break;
    default: break;
  }
}

// Activation rows [r0, r1) of x [m, nb * 32] -> xq, xd (q8_simd.h). cvtps_epi32 rounds to nearest even (the default
// MXCSR mode, as std::nearbyint in the scalar path).
static void quantize_act(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* p = x + (r * nb + b) * kQ8Block;
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps(), unord = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(p + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
        unord = _mm256_or_ps(unord, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float am = _mm_cvtss_f32(m4);
      int8_t* q = xq + (r * nb + b) * kQ8Block;
      if (_mm256_movemask_ps(unord) != 0 || am > 3.4028234663852886e38f) {
        xd[r * nb + b] = std::numeric_limits<float>::quiet_NaN();
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_setzero_si256());
        continue;
      }
      xd[r * nb + b] = am / 127.0f;
      const __m256 id = _mm256_set1_ps(am > 0.0f ? 127.0f / am : 0.0f);
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], id));
      const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], id));
      const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], id));
      const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], id));
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(packed, order));
    }
  }
}

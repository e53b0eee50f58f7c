// AVX-512 register-tile helpers shared by the f32 GEMM (gemm_avx512.cc) and the bf16-compute GEMM
// (gemm_bf16_avx512.cc): lane masks, in-register transposes and the tile epilogue (alpha, beta, bias, and the
// transposing update of C when Z = C^T). Included inside each file's anonymous namespace, so every ISA file keeps
// its own copy (see gemm_simd.h on why nothing here may be merged across target flags).

inline __mmask16 lane_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1u);
}

// ---------------------------------------------------------------- 16 x 16 transposes

// In place: r[i] lane j  <-  r[j] lane i.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // s[4g + j]: 128-bit lane L holds column 4L + j of rows 4g..4g+3.
  __m512 s[16];
  for (int g = 0; g < 4; ++g) {
    s[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    s[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    s[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    s[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 u0 = _mm512_shuffle_f32x4(s[j], s[4 + j], 0x44);
    const __m512 u1 = _mm512_shuffle_f32x4(s[j], s[4 + j], 0xEE);
    const __m512 u2 = _mm512_shuffle_f32x4(s[8 + j], s[12 + j], 0x44);
    const __m512 u3 = _mm512_shuffle_f32x4(s[8 + j], s[12 + j], 0xEE);
    r[0 + j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    r[4 + j] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    r[8 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
}

// 8 rows of 16 -> 16 columns of 8: col[c] = (r[0][c], ..., r[7][c]).
inline void transpose8x16(const __m512 r[8], __m256 col[16]) {
  __m512 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 s[8];  // s[4g + j]: lane L holds column 4L + j of rows 4g..4g+3
  for (int g = 0; g < 2; ++g) {
    s[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    s[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    s[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    s[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int j = 0; j < 4; ++j) {
    const __m512 a = _mm512_permutex2var_ps(s[j], lo_idx, s[4 + j]);  // columns j (low half), 4 + j (high half)
    const __m512 b = _mm512_permutex2var_ps(s[j], hi_idx, s[4 + j]);  // columns 8 + j, 12 + j
    col[j] = _mm512_castps512_ps256(a);
    col[4 + j] = _mm512_extractf32x8_ps(a, 1);
    col[8 + j] = _mm512_castps512_ps256(b);
    col[12 + j] = _mm512_extractf32x8_ps(b, 1);
  }
}

// Writes one finished register tile: acc[r][v] holds Z(p + r, q + 16 v ..) for k block [k0, k0 + kc).
template <int R, int NV>
__attribute__((always_inline)) inline void store_tile(__m512 (&acc)[R][NV], int cols, const GemmPlan& plan, int64_t p, int64_t q,
                                                      bool first) {
  const __m512 alpha = _mm512_set1_ps(plan.alpha);
  if (!plan.z_trans) {
    const bool use_beta = first && plan.beta != 0.0f;
    const __m512 beta = _mm512_set1_ps(plan.beta);
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = lane_mask(cols - v * 16);
      const __m512 bias = first && plan.bias ? _mm512_maskz_loadu_ps(m, plan.bias + q + v * 16) : _mm512_setzero_ps();
      for (int r = 0; r < R; ++r) {
        float* c = plan.c + (p + r) * plan.ldc + q + v * 16;
        __m512 out;
        if (first) {
          out = _mm512_mul_ps(alpha, acc[r][v]);
          if (use_beta) out = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c), out);
          out = _mm512_add_ps(out, bias);
        } else {
          out = _mm512_fmadd_ps(alpha, acc[r][v], _mm512_maskz_loadu_ps(m, c));
        }
        _mm512_mask_storeu_ps(c, m, out);
      }
    }
    return;
  }

  // Z = C^T: tile row r is C's column p + r, tile column j is C's row q + j. Transpose 8 x 16 blocks in
  // registers so each C row gets one masked 8-lane update.
  const __mmask8 rmask = static_cast<__mmask8>((1u << R) - 1u);
  const __m256 alpha8 = _mm256_set1_ps(plan.alpha);
  const __m256 beta8 = _mm256_set1_ps(plan.beta);
  const bool use_beta = first && plan.beta != 0.0f;
  const __m256 bias8 = first && plan.bias ? _mm256_maskz_loadu_ps(rmask, plan.bias + p) : _mm256_setzero_ps();
  for (int v = 0; v < NV; ++v) {
    __m512 rowsv[8];
    for (int r = 0; r < 8; ++r) rowsv[r] = r < R ? acc[r][v] : _mm512_setzero_ps();
    __m256 col[16];
    transpose8x16(rowsv, col);
    const int n_here = std::min(16, cols - v * 16);
    for (int j = 0; j < n_here; ++j) {
      float* c = plan.c + (q + v * 16 + j) * plan.ldc + p;
      __m256 out;
      if (first) {
        out = _mm256_mul_ps(alpha8, col[j]);
        if (use_beta) out = _mm256_fmadd_ps(beta8, _mm256_maskz_loadu_ps(rmask, c), out);
        out = _mm256_add_ps(out, bias8);
      } else {
        out = _mm256_fmadd_ps(alpha8, col[j], _mm256_maskz_loadu_ps(rmask, c));
      }
      _mm256_mask_storeu_ps(c, rmask, out);
    }
  }
}


// Q8_0 GEMM and activation-quantization loops, included by q8_avx2.cc and q8_avx512.cc inside their ISA namespace
// (q8_simd.h fixes the arithmetic). The including file defines, before the include:
//   kRowsMax, kColsMax   the register tile: up to kRowsMax activation rows x kColsMax weight rows (output columns);
//   dot_u8s8(xabs, sw)   8 int32 lanes, lane j = sum over t < 4 of xabs[4j + t] * sw[4j + t] (u8 x s8, exact:
//                        maddubs + madd on AVX2, one vpdpbusd with VNNI).
// Only 256-bit integer and float operations are used, so the AVX-512 build differs from the AVX2 one only in its
// register count (32: bigger tiles) and, with VNNI, in the fused dot; the bits are the same.
//
// Sign trick (as llama.cpp): qw * qx == |qx| * (qw with qx's sign applied), and _mm256_sign_epi8 applies it; the
// u8 x s8 pairs never saturate the int16 of maddubs because |qx| <= 127 and |qw| <= 128 (2 * 127 * 128 < 32767).

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

// A register tile: rows [r0, r0 + R) x columns [c0, c0 + C), over every block.
template <int R, int C>
static void gemm_tile(const Q8GemmArgs& a, int64_t r0, int64_t c0) {
  const int64_t nb = a.nb;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const uint8_t* wrow[C];
  for (int c = 0; c < C; ++c) wrow[c] = a.w + (c0 + c) * nb * kQ8BlockBytes;
  const int8_t* xrow = a.xq + r0 * nb * kQ8Block;
  const float* drow = a.xd + r0 * nb;
  // The tile's W rows are short (k/32 blocks): prefetch the next tile's rows (C rows further on) at the same block,
  // which bridges the jump the hardware prefetchers only pick up after a few misses. The first row tile only: the
  // later ones read the same W rows again from cache.
  const bool prefetch = r0 == 0;
  const int64_t ahead = 2 * C * nb * kQ8BlockBytes;
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch)
      for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(wrow[c] + ahead + b * kQ8BlockBytes), _MM_HINT_T0);
    __m256i xv[R], xabs[R];
    for (int r = 0; r < R; ++r) {
      xv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xrow + (r * nb + b) * kQ8Block));
      xabs[r] = _mm256_abs_epi8(xv[r]);
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = wrow[c] + b * kQ8BlockBytes;
      const __m256 dw = _mm256_set1_ps(load_f16(blk));
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      for (int r = 0; r < R; ++r) {
        const __m256i isum = dot_u8s8(xabs[r], _mm256_sign_epi8(wq, xv[r]));
        // (float(isum) * dw) then fused * dx + acc: the canonical order of q8_simd.h; dx is a broadcast load.
        const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), dw);
        acc[r][c] = _mm256_fmadd_ps(t, _mm256_broadcast_ss(drow + r * nb + b), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* yr = a.y + (r0 + r) * a.n + c0;
    for (int c = 0; c < C; ++c) {
      const float s = hsum8(acc[r][c]);
      yr[c] = a.bias ? s + a.bias[c0 + c] : s;
    }
  }
}

template <int R>
static void gemm_rows(const Q8GemmArgs& a, int64_t r0, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + kColsMax <= c1; c += kColsMax) gemm_tile<R, kColsMax>(a, r0, c);
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

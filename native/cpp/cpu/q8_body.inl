// Q8_0 GEMM driver and activation quantization, included by q8_avx2.cc and q8_avx512.cc inside their ISA namespace
// after q8_cols256.inl / q8_cols512.inl (q8_simd.h fixes the arithmetic). Those define, before this file:
//   kG, kPackedBlockBytes        the columns of a packed group (vector lanes) and the bytes of one of its blocks;
//   pack_group(a, c0, cols, b0, b1, dst)  blocks [b0, b1) of columns [c0, c0 + cols) of W, column-interleaved;
//   tile<R, C>(a, r0, buf, b0, b1, acc_rows, c0, cols)  rows [r0, r0 + R) against C packed groups over those blocks;
//   gemv_cols(a, c0, c1)         the m = 1 path, which reads the Q8_0 rows directly (same bits);
// and the including file sets kRowsMax (<= 4) and kGroupsMax (<= 4), the largest register tile.
//
// A task's columns go kGroupsMax groups at a time, and their blocks kPackBlocks at a time: pack that piece (W is
// still read once), then every row tile runs its chains over it, parking them in acc_rows between pieces. A piece
// (18 KB on AVX-512) stays in L1 beside the activations while the row tiles reread it, and the first row tile
// prefetches the next piece meanwhile (PieceFetch, q8_simd.h). Each output is one lane of one tile and its chain runs
// over the blocks in order, so the bits do not depend on the split, the thread count or the rows beside it.

static inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 64-byte aligned per-thread room (one buffer for the packed piece, one for the parked accumulators).
template <int kWhich>
static uint8_t* aligned_scratch(int64_t bytes) {
  thread_local std::vector<uint8_t> v;
  if (v.size() < static_cast<size_t>(bytes + 64)) v.resize(static_cast<size_t>(bytes + 64));
  const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t(63));
}

template <int C>
static void group_rows(const Q8GemmArgs& a, const uint8_t* buf, int64_t b0, int64_t b1, float* acc, int64_t c0, int64_t cols,
                       const PieceFetch* fetch) {
  int64_t r = 0;
  for (; r + kRowsMax <= a.m; r += kRowsMax) tile<kRowsMax, C>(a, r, buf, b0, b1, acc, c0, cols, r == 0 ? fetch : nullptr);
  const PieceFetch* f = r == 0 ? fetch : nullptr;
  switch (a.m - r) {
    case 1: tile<1, C>(a, r, buf, b0, b1, acc, c0, cols, f); break;
    case 2: if constexpr (kRowsMax > 2) tile<2, C>(a, r, buf, b0, b1, acc, c0, cols, f); break;
    case 3: if constexpr (kRowsMax > 3) tile<3, C>(a, r, buf, b0, b1, acc, c0, cols, f); break;
    default: break;
  }
}

static void gemm_cols(const Q8GemmArgs& a, int64_t c0, int64_t c1) {
  static_assert(kRowsMax >= 1 && kRowsMax <= 4 && kGroupsMax >= 1 && kGroupsMax <= 4, "tile shapes instantiated below");
  if (a.m == 1) {
    gemv_cols(a, c0, c1);
    return;
  }
  const int64_t piece_bytes = kPackBlocks * kPackedBlockBytes;
  uint8_t* buf = aligned_scratch<0>(kGroupsMax * piece_bytes);
  float* acc = reinterpret_cast<float*>(aligned_scratch<1>(a.m * kAccStride * int64_t(sizeof(float))));
  const int64_t row_bytes = a.nb * kQ8BlockBytes;
  {  // the range's first piece has no piece before it to prefetch it: ask for all of it at once
    PieceFetch first;
    first.first = a.w + c0 * row_bytes;
    first.rows = std::min<int64_t>(kG * kGroupsMax, c1 - c0);
    first.row_bytes = row_bytes;
    first.bytes = std::min(kPackBlocks, a.nb) * kQ8BlockBytes;
    first.step(0, 1);
  }
  for (int64_t c = c0; c < c1; c += kG * kGroupsMax) {
    const int64_t cols = std::min<int64_t>(kG * kGroupsMax, c1 - c);
    const int groups = static_cast<int>((cols + kG - 1) / kG);
    for (int64_t b0 = 0; b0 < a.nb; b0 += kPackBlocks) {
      const int64_t b1 = std::min(a.nb, b0 + kPackBlocks);
      for (int g = 0; g < groups; ++g) pack_group(a, c + g * kG, std::min<int64_t>(kG, cols - g * kG), b0, b1, buf + g * (b1 - b0) * kPackedBlockBytes);
      PieceFetch next;  // the same columns' next blocks, else the next columns' first blocks (within this range)
      next.row_bytes = row_bytes;
      if (b1 < a.nb) {
        next.first = a.w + c * row_bytes + b1 * kQ8BlockBytes;
        next.rows = cols;
        next.bytes = std::min(kPackBlocks, a.nb - b1) * kQ8BlockBytes;
      } else if (c + cols < c1) {
        next.first = a.w + (c + cols) * row_bytes;
        next.rows = std::min<int64_t>(kG * kGroupsMax, c1 - c - cols);
        next.bytes = std::min(kPackBlocks, a.nb) * kQ8BlockBytes;
      }
      const PieceFetch* fetch = next.rows > 0 ? &next : nullptr;
      switch (groups) {
        case 1: group_rows<1>(a, buf, b0, b1, acc, c, cols, fetch); break;
        case 2: if constexpr (kGroupsMax > 1) group_rows<2>(a, buf, b0, b1, acc, c, cols, fetch); break;
        case 3: if constexpr (kGroupsMax > 2) group_rows<3>(a, buf, b0, b1, acc, c, cols, fetch); break;
        case 4: if constexpr (kGroupsMax > 3) group_rows<4>(a, buf, b0, b1, acc, c, cols, fetch); break;
        default: break;
      }
    }
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

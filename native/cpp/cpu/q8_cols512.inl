// The 512-bit Q8_0 column-lane pieces of q8_avx512.cc (included once per variant, inside its namespace, before
// q8_body.inl, whose driver calls them). A vector lane is an output column: 16 columns form a packed group, and a
// block of the group is 8 vectors (vector t, lane j: bytes 4t..4t+3 of column j's 32 int8) and 16 f32 scales. The
// including namespace defines
//   kVnni                true: the packed bytes are w + 128 (u8) and dot() is one vpdpbusd whose lanes start at
//                        -128 * xsum (so they hold the exact sum of w * x); false: raw w, and dot() takes |w| and x
//                        with w's sign (AVX-512 has no vpsignb: a masked negation) through maddubs + madd;
//   dot(s, w, xb)        s + the 4-byte dots of the packed vector w with the broadcast activation bytes xb, per lane;
//   kRowsMax, kGroupsMax the register tile: rows x packed groups.

static inline float load_f16(const uint8_t* p);  // q8_body.inl

constexpr int64_t kG = 16;                                   // columns per packed group (lanes per vector)
constexpr int64_t kPackedBlockBytes = 8 * 64 + kG * 4;       // 8 int8 vectors, then kG f32 scales
constexpr int64_t kAccStride = kGroupsMax * kG;              // floats per row of parked accumulators
constexpr int64_t kPackBlocks = 16;                           // blocks per packed piece: kGroupsMax pieces fit L1

// Columns [c0, c0 + cols) of W (cols <= 16; the missing ones packed as zeros) into dst, every block. The 16 columns'
// 32-byte runs are transposed as 32-bit words: two 8 x 8 transposes, one per 256-bit half (columns 0-7 and 8-15).
template <bool kFull>
static void pack_group_t(const Q8GemmArgs& a, int64_t c0, int64_t cols, int64_t b0, int64_t b1, uint8_t* dst) {
  const int64_t nb = a.nb, row = nb * kQ8BlockBytes;
  const uint8_t* w0 = a.w + c0 * row;
  const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* src = w0 + b * kQ8BlockBytes;
    __m512i z[8];
    for (int j = 0; j < 8; ++j) {
      const __m256i lo = kFull || j < cols ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j * row + 2)) : zero;
      const __m256i hi = kFull || j + 8 < cols ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (j + 8) * row + 2)) : zero;
      z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    __m512i t[8], u[8], v[8];
    for (int j = 0; j < 8; j += 2) {
      t[j] = _mm512_unpacklo_epi32(z[j], z[j + 1]);
      t[j + 1] = _mm512_unpackhi_epi32(z[j], z[j + 1]);
    }
    for (int j = 0; j < 8; j += 4) {
      u[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
      u[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
      u[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
      u[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    // u[i] (i < 4) holds word i of columns 0-3 in 128-bit lane 0 and word i + 4 in lane 1 (columns 8-11 in lanes
    // 2, 3); u[4 + i] the same for columns 4-7 / 12-15.
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm512_permutex2var_epi64(u[i], lo_idx, u[4 + i]);
      v[4 + i] = _mm512_permutex2var_epi64(u[i], hi_idx, u[4 + i]);
    }
    uint8_t* out = dst + (b - b0) * kPackedBlockBytes;
    for (int i = 0; i < 8; ++i) {
      const __m512i q = kVnni ? _mm512_xor_si512(v[i], _mm512_set1_epi8(static_cast<char>(0x80))) : v[i];
      _mm512_store_si512(reinterpret_cast<__m512i*>(out + 64 * i), q);
    }
    float* d = reinterpret_cast<float*>(out + 8 * 64);
    for (int j = 0; j < kG; ++j) d[j] = kFull || j < cols ? load_f16(src + j * row) : 0.0f;
  }
}

static void pack_group(const Q8GemmArgs& a, int64_t c0, int64_t cols, int64_t b0, int64_t b1, uint8_t* dst) {
  if (cols == kG) pack_group_t<true>(a, c0, cols, b0, b1, dst);
  else pack_group_t<false>(a, c0, cols, b0, b1, dst);
}

// Rows [r0, r0 + R) x the C packed groups at buf, blocks [b0, b1) (group g: columns c0 + 16g, of which cols - 16g are real), that
// range of the canonical chain of q8_simd.h, one output per lane: started at 0 (b0 = 0) or at the row's parked
// accumulators in acc_rows (row stride kAccStride), and parked there again unless b1 is the last block, when y is
// written. fetch (or null) is the next piece's W, prefetched a share per block while this one computes.
template <int R, int C>
static void tile(const Q8GemmArgs& a, int64_t r0, const uint8_t* buf, int64_t b0, int64_t b1, float* acc_rows, int64_t c0, int64_t cols,
                 const PieceFetch* fetch) {
  const int64_t nb = a.nb, group_bytes = (b1 - b0) * kPackedBlockBytes;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc_rows + (r0 + r) * kAccStride + c * kG);
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* pb = buf + (b - b0) * kPackedBlockBytes;
    if (fetch) fetch->step(b - b0, b1 - b0);
    __m512i s[R][C];
    for (int r = 0; r < R; ++r) {
      const __m512i start = kVnni ? _mm512_set1_epi32(-128 * a.xsum[(r0 + r) * nb + b]) : _mm512_setzero_si512();
      for (int c = 0; c < C; ++c) s[r][c] = start;
    }
    for (int t = 0; t < 8; ++t) {
      __m512i wv[C];
      for (int c = 0; c < C; ++c) wv[c] = _mm512_load_si512(reinterpret_cast<const __m512i*>(pb + c * group_bytes + 64 * t));
      for (int r = 0; r < R; ++r) {
        int32_t xw;
        std::memcpy(&xw, a.xq + ((r0 + r) * nb + b) * kQ8Block + 4 * t, 4);
        const __m512i xb = _mm512_set1_epi32(xw);
        for (int c = 0; c < C; ++c) s[r][c] = dot(s[r][c], wv[c], xb);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(a.xd[(r0 + r) * nb + b]);
      for (int c = 0; c < C; ++c) {
        const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(pb + c * group_bytes + 8 * 64));
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][c]), dw), dx, acc[r][c]);
      }
    }
  }
  if (b1 < nb) {  // more blocks to come: park the chains
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) _mm512_store_ps(acc_rows + (r0 + r) * kAccStride + c * kG, acc[r][c]);
    return;
  }
  for (int c = 0; c < C; ++c) {
    const int64_t col = c0 + c * kG, valid = std::min<int64_t>(kG, cols - c * kG);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(mask, a.bias + col) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m512 v = a.bias ? _mm512_add_ps(acc[r][c], bias) : acc[r][c];
      _mm512_mask_storeu_ps(a.y + (r0 + r) * a.n + col, mask, v);
    }
  }
}

// Four columns' int32 lanes (v[j]: block b in lanes 0-7, b + 1 in 8-15) -> their block sums: 128-bit lane 0 holds
// isum_b of columns 0..3, lane 2 isum_{b+1}. Per 128-bit lane first the four columns' sums of its 4 words, then
// lanes 0 + 1 and 2 + 3.
static inline __m512i reduce4(const __m512i* v) {
  const __m512i p01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i p23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  const __m512i q = _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23));
  return _mm512_add_epi32(q, _mm512_shuffle_i32x4(q, q, _MM_SHUFFLE(2, 3, 0, 1)));
}

// m = 1 (a decode GEMV): no packing. Four columns' Q8_0 rows are read in order (a packed group's 16 rows, read a few
// bytes apart each step, streamed from DRAM at half the speed), a block pair per vector; one reduction tree turns the
// four columns' lanes into their isum for both blocks, and the chain of q8_simd.h runs on the four columns in the lanes
// of one 128-bit vector, so the bits equal the tiles'. A range's last columns (fewer than four) reuse its first
// column's row in the unused lanes and are not stored.
static void gemv_cols(const Q8GemmArgs& a, int64_t c0, int64_t c1) {
  const int64_t nb = a.nb, row = nb * kQ8BlockBytes;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t c = c0; c < c1; c += 4) {
    const int cols = static_cast<int>(std::min<int64_t>(4, c1 - c));
    const uint8_t* w[4];
    for (int j = 0; j < 4; ++j) w[j] = a.w + (c + (j < cols ? j : 0)) * row;
    __m128 acc = _mm_setzero_ps();
    // Block b's f16 scales of the four columns as f32 lanes.
    auto scales = [&](int64_t b) {
      uint16_t h[4];
      for (int j = 0; j < 4; ++j) std::memcpy(&h[j], w[j] + b * kQ8BlockBytes, 2);
      return _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]), static_cast<short>(h[2]), static_cast<short>(h[3]), 0, 0, 0, 0));
    };
    // One block step of the chain for the four columns: isum (exact), then float(isum) * dw, fused * dx + acc.
    auto step = [&](__m128i isum, int64_t b) {
      const __m128i s = kVnni ? _mm_add_epi32(isum, _mm_set1_epi32(-128 * a.xsum[b])) : isum;
      acc = _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(s), scales(b)), _mm_set1_ps(a.xd[b]), acc);
    };
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
      const __m512i xv = _mm512_loadu_si512(a.xq + b * kQ8Block);  // blocks b and b + 1 are adjacent
      __m512i v[4];
      for (int j = 0; j < 4; ++j) {
        const uint8_t* blk = w[j] + b * kQ8BlockBytes;
        _mm_prefetch(reinterpret_cast<const char*>(blk + 8 * row), _MM_HINT_T0);  // the rows two steps on (68 bytes:
        _mm_prefetch(reinterpret_cast<const char*>(blk + 8 * row + 64), _MM_HINT_T0);  // two lines per pair)
        __m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2))),
                                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ8BlockBytes + 2)), 1);
        if (kVnni) wq = _mm512_xor_si512(wq, flip);
        v[j] = dot(_mm512_setzero_si512(), wq, xv);
      }
      const __m512i q = reduce4(v);
      step(_mm512_castsi512_si128(q), b);
      step(_mm512_extracti32x4_epi32(q, 2), b + 1);
    }
    if (b < nb) {  // an odd last block: the low halves only
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + b * kQ8Block));
      __m512i v[4];
      for (int j = 0; j < 4; ++j) {
        __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[j] + b * kQ8BlockBytes + 2));
        if (kVnni) wq = _mm256_xor_si256(wq, _mm512_castsi512_si256(flip));
        v[j] = dot(_mm512_setzero_si512(), _mm512_zextsi256_si512(wq), _mm512_zextsi256_si512(xv));
      }
      step(_mm512_castsi512_si128(reduce4(v)), b);
    }
    alignas(16) float out[4];
    _mm_store_ps(out, acc);
    for (int j = 0; j < cols; ++j) a.y[c + j] = a.bias ? out[j] + a.bias[c + j] : out[j];
  }
}

// The 256-bit Q8_0 column-lane pieces of q8_avx2.cc (included once per variant, inside its namespace, before
// q8_body.inl, whose driver calls them). A vector lane is an output column: 8 columns form a packed group, and a block
// of the group is 8 vectors (vector t, lane j: bytes 4t..4t+3 of column j's 32 int8) and 8 f32 scales. The including
// namespace defines
//   kVnni                true: the packed bytes are w + 128 (u8) and dot() is one vpdpbusd whose lanes start at
//                        -128 * xsum (so they hold the exact sum of w * x); false: raw w, and dot() takes |w| and x
//                        with w's sign (vpsignb) through maddubs + madd (|w| <= 128 and |x| <= 127: no int16 overflow);
//   dot(s, w, xb)        s + the 4-byte dots of the packed vector w with the broadcast activation bytes xb, per lane;
//   kRowsMax, kGroupsMax the register tile: rows x packed groups.

static inline float load_f16(const uint8_t* p);  // q8_body.inl

constexpr int64_t kG = 8;                                    // columns per packed group (lanes per vector)
constexpr int64_t kPackedBlockBytes = 8 * 32 + kG * 4;       // 8 int8 vectors, then kG f32 scales
constexpr int64_t kAccStride = kGroupsMax * kG;              // floats per row of parked accumulators
constexpr int64_t kPackBlocks = 32;                           // blocks per packed piece: kGroupsMax pieces fit L1

// Columns [c0, c0 + cols) of W (cols <= 8; the missing ones packed as zeros) into dst, every block: the 8 columns'
// 32-byte runs transposed as an 8 x 8 matrix of 32-bit words.
static void pack_group(const Q8GemmArgs& a, int64_t c0, int64_t cols, int64_t b0, int64_t b1, uint8_t* dst) {
  const int64_t nb = a.nb, row = nb * kQ8BlockBytes;
  const uint8_t* w0 = a.w + c0 * row;
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* src = w0 + b * kQ8BlockBytes;
    __m256i z[8], t[8], u[8];
    for (int j = 0; j < 8; ++j)
      z[j] = j < cols ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j * row + 2)) : _mm256_setzero_si256();
    for (int j = 0; j < 8; j += 2) {
      t[j] = _mm256_unpacklo_epi32(z[j], z[j + 1]);
      t[j + 1] = _mm256_unpackhi_epi32(z[j], z[j + 1]);
    }
    for (int j = 0; j < 8; j += 4) {
      u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);
      u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);
      u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);
      u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);
    }
    // u[i] (i < 4): word i of columns 0-3 in the low 128 bits, word i + 4 in the high; u[4 + i]: columns 4-7.
    uint8_t* out = dst + (b - b0) * kPackedBlockBytes;
    for (int i = 0; i < 4; ++i) {
      const __m256i lo = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20), hi = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * i), kVnni ? _mm256_xor_si256(lo, flip) : lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * (4 + i)), kVnni ? _mm256_xor_si256(hi, flip) : hi);
    }
    float* d = reinterpret_cast<float*>(out + 8 * 32);
    for (int j = 0; j < kG; ++j) d[j] = j < cols ? load_f16(src + j * row) : 0.0f;
  }
}

// Rows [r0, r0 + R) x the C packed groups at buf, blocks [b0, b1) (group g: columns c0 + 8g, of which cols - 8g are real), that
// range of the canonical chain of q8_simd.h, one output per lane: started at 0 (b0 = 0) or at the row's parked
// accumulators in acc_rows (row stride kAccStride), and parked there again unless b1 is the last block, when y is
// written. fetch (or null) is the next piece's W, prefetched a share per block while this one computes.
template <int R, int C>
static void tile(const Q8GemmArgs& a, int64_t r0, const uint8_t* buf, int64_t b0, int64_t b1, float* acc_rows, int64_t c0, int64_t cols,
                 const PieceFetch* fetch) {
  const int64_t nb = a.nb, group_bytes = (b1 - b0) * kPackedBlockBytes;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = b0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(acc_rows + (r0 + r) * kAccStride + c * kG);
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* pb = buf + (b - b0) * kPackedBlockBytes;
    if (fetch) fetch->step(b - b0, b1 - b0);
    __m256i s[R][C];
    for (int r = 0; r < R; ++r) {
      const __m256i start = kVnni ? _mm256_set1_epi32(-128 * a.xsum[(r0 + r) * nb + b]) : _mm256_setzero_si256();
      for (int c = 0; c < C; ++c) s[r][c] = start;
    }
    for (int t = 0; t < 8; ++t) {
      __m256i wv[C];
      for (int c = 0; c < C; ++c) wv[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + c * group_bytes + 32 * t));
      for (int r = 0; r < R; ++r) {
        int32_t xw;
        std::memcpy(&xw, a.xq + ((r0 + r) * nb + b) * kQ8Block + 4 * t, 4);
        const __m256i xb = _mm256_set1_epi32(xw);
        for (int c = 0; c < C; ++c) s[r][c] = dot(s[r][c], wv[c], xb);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(a.xd[(r0 + r) * nb + b]);
      for (int c = 0; c < C; ++c) {
        const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb + c * group_bytes + 8 * 32));
        acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[r][c]), dw), dx, acc[r][c]);
      }
    }
  }
  if (b1 < nb) {  // more blocks to come: park the chains
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) _mm256_store_ps(acc_rows + (r0 + r) * kAccStride + c * kG, acc[r][c]);
    return;
  }
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int c = 0; c < C; ++c) {
    const int64_t col = c0 + c * kG, valid = std::min<int64_t>(kG, cols - c * kG);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), lanes);
    const __m256 bias = a.bias ? _mm256_maskload_ps(a.bias + col, mask) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m256 v = a.bias ? _mm256_add_ps(acc[r][c], bias) : acc[r][c];
      _mm256_maskstore_ps(a.y + (r0 + r) * a.n + col, mask, v);
    }
  }
}

// m = 1 (a decode GEMV): no packing. Four columns' Q8_0 rows are read in order, a block per vector; one reduction tree
// turns the four columns' lanes into their isum, and the chain of q8_simd.h runs on the four columns in the lanes of
// one 128-bit vector, so the bits equal the tiles'. A range's last columns (fewer than four) reuse its first column's
// row in the unused lanes and are not stored.
static void gemv_cols(const Q8GemmArgs& a, int64_t c0, int64_t c1) {
  const int64_t nb = a.nb, row = nb * kQ8BlockBytes;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t c = c0; c < c1; c += 4) {
    const int cols = static_cast<int>(std::min<int64_t>(4, c1 - c));
    const uint8_t* w[4];
    for (int j = 0; j < 4; ++j) w[j] = a.w + (c + (j < cols ? j : 0)) * row;
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + b * kQ8Block));
      __m256i v[4];
      uint16_t h[4];
      for (int j = 0; j < 4; ++j) {
        const uint8_t* blk = w[j] + b * kQ8BlockBytes;
        _mm_prefetch(reinterpret_cast<const char*>(blk + 8 * row), _MM_HINT_T0);  // the rows two steps on
        __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        if (kVnni) wq = _mm256_xor_si256(wq, flip);
        v[j] = dot(_mm256_setzero_si256(), wq, xv);
        std::memcpy(&h[j], blk, 2);
      }
      const __m256i p01 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
      const __m256i p23 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
      const __m256i q = _mm256_add_epi32(_mm256_unpacklo_epi64(p01, p23), _mm256_unpackhi_epi64(p01, p23));
      __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      if (kVnni) isum = _mm_add_epi32(isum, _mm_set1_epi32(-128 * a.xsum[b]));
      const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]), static_cast<short>(h[2]), static_cast<short>(h[3]), 0, 0, 0, 0));
      acc = _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(isum), dw), _mm_set1_ps(a.xd[b]), acc);
    }
    alignas(16) float out[4];
    _mm_store_ps(out, acc);
    for (int j = 0; j < cols; ++j) a.y[c + j] = a.bias ? out[j] + a.bias[c + j] : out[j];
  }
}

// PET operator bodies shared by pet_avx2.cc and pet_avx512.cc. The including file defines, in its ISA namespace, the
// vec_*.h primitives and vec_math.inl (for v_act), plus the blocking: kCsrBlock rows per CSR block (= kLanes, one
// row per lane), kAdapterRows x kAdapterK dot products at once. Only static functions and templates live here
// (nothing with external linkage may be compiled with AVX flags; fused multiply-adds use the builtin, not std::fma).
//
// Blocking changes which outputs share loads, never an output's arithmetic (pet_simd.h fixes it).

// ---------------------------------------------------------------- CSR

// r[k] <- column k of the 8 x 8 block held in r[0..7] (rows): the standard unpack / shuffle / lane-swap transpose.
// AVX2 instructions: pet_avx512.cc is compiled with them too.
static inline void transpose8x8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// xt[c * kCsrBlock + i] = xr[i][c] for the block's kCsrBlock rows (8 x 8 tiles, then the ragged columns).
static inline void csr_transpose_x(const float* const* xr, int64_t in, float* xt) {
  for (int64_t i0 = 0; i0 < kCsrBlock; i0 += 8) {
    int64_t c = 0;
    for (; c + 8 <= in; c += 8) {
      __m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(xr[i0 + q] + c);
      transpose8x8(r);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(xt + (c + q) * kCsrBlock + i0, r[q]);
    }
    for (; c < in; ++c)
      for (int64_t q = 0; q < 8; ++q) xt[c * kCsrBlock + i0 + q] = xr[i0 + q][c];
  }
}

// Outputs [o, o + N) of one block of rows: each output's FMA chain over its nonzeros, N chains interleaved to hide
// the FMA latency (each chain keeps its own order). xt: x rows transposed, [in][kCsrBlock]; acc_t: [o - o0][kCsrBlock].
// Index reads are clamped (pet_csr_range, column <= col_max): a matrix written after the binding validated it reads
// nothing out of bounds.
template <int N>
static inline void csr_outputs(const PetOpArgs& op, uint32_t col_max, const float* xt, int64_t o, float* acc_t) {
  V acc[N];
  int64_t e[N], end[N];
  int64_t common = INT64_MAX;
#pragma GCC unroll 8
  for (int q = 0; q < N; ++q) {
    acc[q] = v_set1(0.0f);
    pet_csr_range(op, o + q, e[q], end[q]);
    common = std::min(common, end[q] - e[q]);
  }
  const int32_t* indices = op.indices;
  const float* values = op.values;
  auto column = [&](int64_t at) { return xt + static_cast<int64_t>(std::min(static_cast<uint32_t>(indices[at]), col_max)) * kCsrBlock; };
  for (int64_t s = 0; s < common; ++s) {
#pragma GCC unroll 8
    for (int q = 0; q < N; ++q) {
      const int64_t at = e[q] + s;
      acc[q] = v_fmadd(v_set1(values[at]), v_load(column(at)), acc[q]);
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < N; ++q) {
    for (int64_t at = e[q] + common; at < end[q]; ++at) acc[q] = v_fmadd(v_set1(values[at]), v_load(column(at)), acc[q]);
    v_store(acc_t + q * kCsrBlock, acc[q]);
  }
}

// y[row i, o0 + o] = fma(scale, acc_t[o][i], y) for the block's nr rows: 8 x 8 tiles transposed back to rows, then
// the ragged outputs one by one (the same fused multiply-add).
static inline void csr_write_back(float* const* yr, int64_t nr, const float* acc_t, int64_t n_out, float scale) {
  const __m256 s8 = _mm256_set1_ps(scale);
  for (int64_t i0 = 0; i0 < nr; i0 += 8) {
    const int64_t rows8 = std::min<int64_t>(8, nr - i0);
    int64_t o = 0;
    for (; o + 8 <= n_out; o += 8) {
      __m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(acc_t + (o + q) * kCsrBlock + i0);
      transpose8x8(r);
      for (int64_t k = 0; k < rows8; ++k) {
        float* yp = yr[i0 + k] + o;
        _mm256_storeu_ps(yp, _mm256_fmadd_ps(s8, r[k], _mm256_loadu_ps(yp)));
      }
    }
    for (; o < n_out; ++o)
      for (int64_t k = 0; k < rows8; ++k) yr[i0 + k][o] = __builtin_fmaf(scale, acc_t[o * kCsrBlock + i0 + k], yr[i0 + k][o]);
  }
}

static void csr_tile(const PetCsrTile& t) {
  const PetOpArgs& op = *t.op;
  const int64_t in = op.in, n_out = t.o1 - t.o0;
  float* xt = t.scratch;
  float* acc_t = t.scratch + in * kCsrBlock;
  for (int64_t jb = t.j0; jb < t.j1; jb += kCsrBlock) {
    const int64_t nr = std::min<int64_t>(kCsrBlock, t.j1 - jb);
    // Lanes past nr read row jb again: their results are never written back.
    const float* xr[kCsrBlock];
    float* yr[kCsrBlock];
    for (int64_t i = 0; i < kCsrBlock; ++i) {
      const int64_t row = op.rows.row(jb + (i < nr ? i : 0));
      xr[i] = op.x + row * in;
      yr[i] = op.y + row * op.out + t.o0;
    }
    csr_transpose_x(xr, in, xt);
    const uint32_t col_max = static_cast<uint32_t>(in - 1);  // in >= 1: pet_csr_range gives empty ranges otherwise
    int64_t o = t.o0;
    for (; o + 4 <= t.o1; o += 4) csr_outputs<4>(op, col_max, xt, o, acc_t + (o - t.o0) * kCsrBlock);
    for (; o < t.o1; ++o) csr_outputs<1>(op, col_max, xt, o, acc_t + (o - t.o0) * kCsrBlock);
    csr_write_back(yr, nr, acc_t, n_out, op.scale);
  }
}

// ---------------------------------------------------------------- adapter

// RB rows x KB weight rows of length len: out[i * ostride + k] = v_hsum(lane-wise FMA chain of a[i] . b[k]).
template <int RB, int KB>
static inline void dot_block(const float* const* a, const float* const* b, int64_t len, float* out, int64_t ostride) {
  V acc[RB][KB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) acc[i][k] = v_set1(0.0f);
  int64_t e = 0;
  for (; e + kLanes <= len; e += kLanes) {
    V av[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) av[i] = v_load(a[i] + e);
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) {
      const V bv = v_load(b[k] + e);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][k] = v_fmadd(av[i], bv, acc[i][k]);
    }
  }
  if (e < len) {
    const int64_t rem = len - e;
    V av[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) av[i] = v_load_tail(a[i] + e, rem);
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) {
      const V bv = v_load_tail(b[k] + e, rem);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][k] = v_fmadd(av[i], bv, acc[i][k]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) out[i * ostride + k] = v_hsum(acc[i][k]);
}

// out[i * ostride + k] = dot(a[i], w[k]) for every k < n of the row-major weight w [n, len].
template <int RB>
static inline void dots_all(const float* const* a, const float* w, int64_t n, int64_t len, float* out, int64_t ostride) {
  int64_t k = 0;
  for (; k + kAdapterK <= n; k += kAdapterK) {
    const float* wk[kAdapterK];
    for (int q = 0; q < kAdapterK; ++q) wk[q] = w + (k + q) * len;
    dot_block<RB, kAdapterK>(a, wk, len, out + k, ostride);
  }
  for (; k < n; ++k) {
    const float* wk[1] = {w + k * len};
    dot_block<RB, 1>(a, wk, len, out + k, ostride);
  }
}

// RB rows at once; h (RB x m) is scratch.
template <int RB>
static inline void adapter_rows(const PetOpArgs& op, int64_t jb, float* h) {
  const int64_t d = op.out, m = op.m;
  float* yr[RB];
  const float* ya[RB];
  const float* ha[RB];
  for (int i = 0; i < RB; ++i) {
    yr[i] = op.y + op.rows.row(jb + i) * d;
    ya[i] = yr[i];
    ha[i] = h + i * m;
  }
  // Down projection and activation: h = act(y . downT + down_bias).
  dots_all<RB>(ya, op.down, m, d, h, m);
  for (int i = 0; i < RB; ++i) {
    float* hi = h + i * m;
    int64_t k = 0;
    for (; k + kLanes <= m; k += kLanes) v_store(hi + k, v_act(op.act, v_add(v_load(hi + k), v_load(op.down_bias + k))));
    if (k < m) v_store_tail(hi + k, v_act(op.act, v_add(v_load_tail(hi + k, m - k), v_load_tail(op.down_bias + k, m - k))), m - k);
  }
  // Up projection into y, kAdapterK output columns at a time (every read of y[row] above is done).
  float delta[RB * kAdapterK];
  int64_t c = 0;
  for (; c + kAdapterK <= d; c += kAdapterK) {
    const float* wk[kAdapterK];
    for (int q = 0; q < kAdapterK; ++q) wk[q] = op.up + (c + q) * m;
    dot_block<RB, kAdapterK>(ha, wk, m, delta, kAdapterK);
    for (int i = 0; i < RB; ++i)
      for (int q = 0; q < kAdapterK; ++q) yr[i][c + q] = yr[i][c + q] + (delta[i * kAdapterK + q] + op.up_bias[c + q]);
  }
  for (; c < d; ++c) {
    const float* wk[1] = {op.up + c * m};
    dot_block<RB, 1>(ha, wk, m, delta, 1);
    for (int i = 0; i < RB; ++i) yr[i][c] = yr[i][c] + (delta[i] + op.up_bias[c]);
  }
}

static void adapter_tile(const PetAdapterTile& t) {
  int64_t j = t.j0;
  for (; j + kAdapterRows <= t.j1; j += kAdapterRows) adapter_rows<kAdapterRows>(*t.op, j, t.scratch);
  for (; j < t.j1; ++j) adapter_rows<1>(*t.op, j, t.scratch);
}

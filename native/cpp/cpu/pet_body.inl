// PET operator bodies shared by pet_avx2.cc and pet_avx512.cc. The including file defines, in its ISA namespace, the
// vec_*.h primitives and vec_math.inl (for v_act), plus the blocking: kCsrBlock rows per CSR block (= kLanes, one
// row per lane), kAdapterRows x kAdapterK dot products at once. Only static functions and templates live here
// (nothing with external linkage may be compiled with AVX flags; fused multiply-adds use the builtin, not std::fma).
//
// Blocking changes which outputs share loads, never an output's arithmetic (pet_simd.h fixes it).

// ---------------------------------------------------------------- CSR

// Outputs [o, o + N) of one block of rows: each output's FMA chain over its nonzeros, N chains interleaved to hide
// the FMA latency (each chain keeps its own order). xt: x rows transposed, [in][kCsrBlock]; acc_t: [o - o0][kCsrBlock].
template <int N>
static inline void csr_outputs(const int32_t* indptr, const int32_t* indices, const float* values, const float* xt, int64_t o, float* acc_t) {
  V acc[N];
  int64_t e[N], end[N];
  int64_t common = INT64_MAX;
#pragma GCC unroll 8
  for (int q = 0; q < N; ++q) {
    acc[q] = v_set1(0.0f);
    e[q] = indptr[o + q];
    end[q] = indptr[o + q + 1];
    common = std::min(common, end[q] - e[q]);
  }
  for (int64_t s = 0; s < common; ++s) {
#pragma GCC unroll 8
    for (int q = 0; q < N; ++q) {
      const int64_t at = e[q] + s;
      acc[q] = v_fmadd(v_set1(values[at]), v_load(xt + static_cast<int64_t>(indices[at]) * kCsrBlock), acc[q]);
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < N; ++q) {
    for (int64_t at = e[q] + common; at < end[q]; ++at)
      acc[q] = v_fmadd(v_set1(values[at]), v_load(xt + static_cast<int64_t>(indices[at]) * kCsrBlock), acc[q]);
    v_store(acc_t + q * kCsrBlock, acc[q]);
  }
}

static void csr_tile(const PetCsrTile& t) {
  const PetOpArgs& op = *t.op;
  const int64_t in = op.in, out = op.out, n_out = t.o1 - t.o0;
  float* xt = t.scratch;
  float* acc_t = t.scratch + in * kCsrBlock;
  for (int64_t jb = t.j0; jb < t.j1; jb += kCsrBlock) {
    const int64_t nr = std::min<int64_t>(kCsrBlock, t.j1 - jb);
    int64_t rows[kCsrBlock];
    for (int64_t i = 0; i < nr; ++i) rows[i] = op.rows.row(jb + i);
    // Transpose the block's x rows so a nonzero's column is one vector load for all rows; lanes past nr stay zero.
    for (int64_t i = 0; i < nr; ++i) {
      const float* xr = op.x + rows[i] * in;
      for (int64_t c = 0; c < in; ++c) xt[c * kCsrBlock + i] = xr[c];
    }
    for (int64_t i = nr; i < kCsrBlock; ++i)
      for (int64_t c = 0; c < in; ++c) xt[c * kCsrBlock + i] = 0.0f;
    int64_t o = t.o0;
    for (; o + 4 <= t.o1; o += 4) csr_outputs<4>(op.indptr, op.indices, op.values, xt, o, acc_t + (o - t.o0) * kCsrBlock);
    for (; o < t.o1; ++o) csr_outputs<1>(op.indptr, op.indices, op.values, xt, o, acc_t + (o - t.o0) * kCsrBlock);
    for (int64_t i = 0; i < nr; ++i) {
      float* yr = op.y + rows[i] * out + t.o0;
      for (int64_t q = 0; q < n_out; ++q) yr[q] = __builtin_fmaf(op.scale, acc_t[q * kCsrBlock + i], yr[q]);
    }
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

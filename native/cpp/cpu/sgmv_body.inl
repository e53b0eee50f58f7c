// SGMV tile bodies shared by sgmv_avx2.cc and sgmv_avx512.cc. The including file defines, in its ISA namespace, the
// vec_*.h primitives (V, kLanes, v_load, v_load_tail, v_store, v_store_tail, v_set1, v_fmadd, v_hsum) and the
// register blocking: kShrinkRows x kShrinkK dot products at once (kShrinkK1 when one row is left), and kExpandRows
// rows x kExpandCols vectors of output columns (kExpandCols1 for a single row). Only static functions and templates
// live here (nothing with external linkage may be compiled with AVX flags).
//
// Blocking changes which outputs share loads of x, v and W, never an output's arithmetic: a shrink partial is the
// lane-wise FMA chain over its chunk then v_hsum, an expand output the FMA chain over k then y = fma(scale, acc, y).

// ---------------------------------------------------------------- shrink

// RB rows x KB W rows: out[i * ostride + k] = dot(xr[i][0:len], wr[k][0:len]).
template <int RB, int KB>
static inline void shrink_block(const float* const* xr, const float* const* wr, int64_t len, float* out, int64_t ostride) {
  V acc[RB][KB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) acc[i][k] = v_set1(0.0f);
  int64_t e = 0;
  for (; e + kLanes <= len; e += kLanes) {
    V xv[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) xv[i] = v_load(xr[i] + e);
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) {
      const V wv = v_load(wr[k] + e);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][k] = v_fmadd(xv[i], wv, acc[i][k]);
    }
  }
  if (e < len) {
    const int64_t rem = len - e;
    V xv[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) xv[i] = v_load_tail(xr[i] + e, rem);
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) {
      const V wv = v_load_tail(wr[k] + e, rem);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][k] = v_fmadd(xv[i], wv, acc[i][k]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int k = 0; k < KB; ++k) out[i * ostride + k] = v_hsum(acc[i][k]);
}

// Rows [j, j + RB) of the tile against every W row: the register-blocked GEMM of a multi-row group. Chunks are
// the outer loop, so the RB x-row pieces of a chunk (RB x 1 KB) stay in L1 while the W rows of that chunk stream past
// them KB at a time (from L2: the task's W tile is sized for it), and each x row is read from memory once, in order.
template <int RB, int KB>
static inline void shrink_rows(const ShrinkTile& t, int64_t j) {
  const float* xr[RB];
  for (int i = 0; i < RB; ++i) xr[i] = t.x + t.rows.at(j + i) * t.h;
  for (int64_t c = t.c0; c < t.c1; ++c) {
    const int64_t e0 = c * kSgmvChunk, len = std::min<int64_t>(kSgmvChunk, t.h - e0);
    const float* xc[RB];
    for (int i = 0; i < RB; ++i) xc[i] = xr[i] + e0;
    float* out = t.part + (c * t.n_rows + j) * t.r;
    int64_t k = 0;
    for (; k + KB <= t.r; k += KB) {
      const float* wc[KB];
      for (int q = 0; q < KB; ++q) wc[q] = t.w + (k + q) * t.h + e0;
      shrink_block<RB, KB>(xc, wc, len, out + k, t.r);
    }
    for (; k < t.r; ++k) {
      const float* wc[1] = {t.w + k * t.h + e0};
      shrink_block<RB, 1>(xc, wc, len, out + k, t.r);
    }
  }
}

// NC independent dot products over full chunks: out[q] = dot(xs[q][0:kSgmvChunk], ws[q][0:kSgmvChunk]).
template <int NC>
static inline void shrink_chunks(const float* const* xs, const float* const* ws, float* const* out) {
  V acc[NC];
#pragma GCC unroll 8
  for (int q = 0; q < NC; ++q) acc[q] = v_set1(0.0f);
  for (int64_t e = 0; e < kSgmvChunk; e += kLanes) {
#pragma GCC unroll 8
    for (int q = 0; q < NC; ++q) acc[q] = v_fmadd(v_load(xs[q] + e), v_load(ws[q] + e), acc[q]);
  }
#pragma GCC unroll 8
  for (int q = 0; q < NC; ++q) *out[q] = v_hsum(acc[q]);
}

// shrink_chunks over NC consecutive chunks: x and W advance by kSgmvChunk between them, out by ostride.
template <int NC>
static inline void shrink_chunk_run(const float* x, const float* w, float* out, int64_t ostride) {
  V acc[NC];
#pragma GCC unroll 8
  for (int q = 0; q < NC; ++q) acc[q] = v_set1(0.0f);
  for (int64_t e = 0; e < kSgmvChunk; e += kLanes) {
#pragma GCC unroll 8
    for (int q = 0; q < NC; ++q) acc[q] = v_fmadd(v_load(x + q * kSgmvChunk + e), v_load(w + q * kSgmvChunk + e), acc[q]);
  }
#pragma GCC unroll 8
  for (int q = 0; q < NC; ++q) out[q * ostride] = v_hsum(acc[q]);
}

// A lone row (decode): the (k, chunk) dot products in k-major order, so each W row is streamed contiguously, taken
// kShrinkChunks1 at a time as independent FMA chains (whatever the chunk count, e.g. hIn = 256 has one per W row).
static inline void shrink_row1(const ShrinkTile& t, int64_t j) {
  const float* xr = t.x + t.rows.at(j) * t.h;
  const int64_t full_end = std::min(t.c1, t.h / kSgmvChunk);  // chunks before this one are full
  const int64_t ostride = t.n_rows * t.r;                     // between chunks in part
  float* out_row = t.part + j * t.r;
  const float* xs[kShrinkChunks1];
  const float* ws[kShrinkChunks1];
  float* outs[kShrinkChunks1];
  int n = 0;
  if (t.c0 < full_end) {
    for (int64_t k = 0; k < t.r; ++k) {
      int64_t c = t.c0;
      // Runs of kShrinkChunks1 consecutive chunks of one W row: two base pointers (the general form below needs
      // 3 x kShrinkChunks1 pointers, more than there are registers).
      for (; c + kShrinkChunks1 <= full_end; c += kShrinkChunks1)
        shrink_chunk_run<kShrinkChunks1>(xr + c * kSgmvChunk, t.w + k * t.h + c * kSgmvChunk, out_row + c * ostride + k, ostride);
      for (; c < full_end; ++c) {
        xs[n] = xr + c * kSgmvChunk;
        ws[n] = t.w + k * t.h + c * kSgmvChunk;
        outs[n] = out_row + c * ostride + k;
        if (++n == kShrinkChunks1) {
          shrink_chunks<kShrinkChunks1>(xs, ws, outs);
          n = 0;
        }
      }
    }
    for (int q = 0; q < n; ++q) shrink_chunks<1>(xs + q, ws + q, outs + q);
  }
  for (int64_t c = std::max(t.c0, full_end); c < t.c1; ++c) {  // the ragged last chunk, 4 W rows at a time
    const int64_t e0 = c * kSgmvChunk, len = t.h - e0;
    const float* xc[1] = {xr + e0};
    int64_t k = 0;
    for (; k + 4 <= t.r; k += 4) {
      const float* wc[4] = {t.w + k * t.h + e0, t.w + (k + 1) * t.h + e0, t.w + (k + 2) * t.h + e0, t.w + (k + 3) * t.h + e0};
      shrink_block<1, 4>(xc, wc, len, out_row + c * ostride + k, 1);
    }
    for (; k < t.r; ++k) {
      const float* wc[1] = {t.w + k * t.h + e0};
      shrink_block<1, 1>(xc, wc, len, out_row + c * ostride + k, 1);
    }
  }
}

// Rows [j, j + n) for 1 < n < RB (what a group leaves after its full blocks of RB rows): one block of n rows.
template <int RB>
static inline void shrink_rows_rest(const ShrinkTile& t, int64_t j, int64_t n) {
  if constexpr (RB > 2) {
    if (n == RB - 1) return shrink_rows<RB - 1, kShrinkK>(t, j);
    return shrink_rows_rest<RB - 1>(t, j, n);
  }
}

static void shrink_tile(const ShrinkTile& t) {
  int64_t j = t.j0;
  for (; j + kShrinkRows <= t.j1; j += kShrinkRows) shrink_rows<kShrinkRows, kShrinkK>(t, j);
  if (t.j1 - j > 1) shrink_rows_rest<kShrinkRows>(t, j, t.j1 - j);
  else if (j < t.j1) shrink_row1(t, j);
}

// ---------------------------------------------------------------- expand

// RB rows x CB vectors of columns starting at col (the last vector masked to `tail` lanes when tail > 0).
template <int RB, int CB>
static inline void expand_block(const ExpandTile& t, const float* const* vr, float* const* yr, int64_t col, int64_t tail) {
  V acc[RB][CB];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int q = 0; q < CB; ++q) acc[i][q] = v_set1(0.0f);
  const float* w = t.w + col;
  for (int64_t k = 0; k < t.r; ++k, w += t.h) {
    // The CB vectors of W first, then one broadcast of v at a time: RB x CB + CB + 1 registers.
    V wv[CB];
#pragma GCC unroll 8
    for (int q = 0; q < CB; ++q) wv[q] = (tail > 0 && q == CB - 1) ? v_load_tail(w + q * kLanes, tail) : v_load(w + q * kLanes);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const V vb = v_set1(vr[i][k]);
#pragma GCC unroll 8
      for (int q = 0; q < CB; ++q) acc[i][q] = v_fmadd(vb, wv[q], acc[i][q]);
    }
  }
  const V scale = v_set1(t.scale);
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
#pragma GCC unroll 8
    for (int q = 0; q < CB; ++q) {
      float* yp = yr[i] + col + q * kLanes;
      if (tail > 0 && q == CB - 1) v_store_tail(yp, v_fmadd(scale, acc[i][q], v_load_tail(yp, tail)), tail);
      else v_store(yp, v_fmadd(scale, acc[i][q], v_load(yp)));
    }
  }
}

template <int RB, int CB>
static inline void expand_rows(const ExpandTile& t, int64_t j) {
  const float* vr[RB];
  float* yr[RB];
  for (int i = 0; i < RB; ++i) {
    const int64_t row = t.rows.at(j + i);
    vr[i] = t.v + row * t.r_max;
    yr[i] = t.y + row * t.h;
  }
  int64_t col = t.col0;
  for (; col + CB * kLanes <= t.col1; col += CB * kLanes) expand_block<RB, CB>(t, vr, yr, col, 0);
  for (; col + kLanes <= t.col1; col += kLanes) expand_block<RB, 1>(t, vr, yr, col, 0);
  if (col < t.col1) expand_block<RB, 1>(t, vr, yr, col, t.col1 - col);
}

// A lone row (decode): k is taken kExpandK1 rows at a time (that many W rows streamed together, which the memory
// system serves far better than all r at once), columns in blocks of kExpandCols1 vectors; between k blocks the
// accumulators wait in an L1 buffer. Storing and reloading an f32 does not change it, so each output is still the
// FMA chain over k = 0..r-1 of expand_block.
constexpr int64_t kExpandAccCols = 4096;  // 16 KB of accumulators
template <int CB>
static inline void expand_row1_cols(const ExpandTile& t, const float* vr, float* yr, float* acc, int64_t c, int64_t tail) {
  const int64_t at = c - t.col0;  // column within the tile, for the buffer
  for (int64_t k0 = 0; k0 < t.r; k0 += kExpandK1) {
    const int64_t k1 = std::min<int64_t>(t.r, k0 + kExpandK1);
    V a[CB];
#pragma GCC unroll 8
    for (int q = 0; q < CB; ++q) a[q] = k0 == 0 ? v_set1(0.0f) : v_load(acc + at + q * kLanes);
    const float* w = t.w + k0 * t.h + c;
    for (int64_t k = k0; k < k1; ++k, w += t.h) {
      const V vk = v_set1(vr[k]);
#pragma GCC unroll 8
      for (int q = 0; q < CB; ++q) {
        const V wv = (tail > 0 && q == CB - 1) ? v_load_tail(w + q * kLanes, tail) : v_load(w + q * kLanes);
        a[q] = v_fmadd(vk, wv, a[q]);
      }
    }
    if (k1 < t.r) {
#pragma GCC unroll 8
      for (int q = 0; q < CB; ++q) v_store(acc + at + q * kLanes, a[q]);
    } else {
      const V scale = v_set1(t.scale);
#pragma GCC unroll 8
      for (int q = 0; q < CB; ++q) {
        float* yp = yr + c + q * kLanes;
        if (tail > 0 && q == CB - 1) v_store_tail(yp, v_fmadd(scale, a[q], v_load_tail(yp, tail)), tail);
        else v_store(yp, v_fmadd(scale, a[q], v_load(yp)));
      }
    }
  }
}

static inline void expand_row1(const ExpandTile& t, int64_t j) {
  alignas(64) float acc[kExpandAccCols + 16];
  const int64_t row = t.rows.at(j);
  const float* vr = t.v + row * t.r_max;
  float* yr = t.y + row * t.h;
  // Column blocks of at most kExpandAccCols, so the buffer holds every accumulator of a block between k blocks.
  for (int64_t b0 = t.col0; b0 < t.col1; b0 += kExpandAccCols) {
    const int64_t b1 = std::min(t.col1, b0 + kExpandAccCols);
    ExpandTile sub = t;
    sub.col0 = b0;
    sub.col1 = b1;
    int64_t c = b0;
    for (; c + kExpandCols1 * kLanes <= b1; c += kExpandCols1 * kLanes) expand_row1_cols<kExpandCols1>(sub, vr, yr, acc, c, 0);
    for (; c + kLanes <= b1; c += kLanes) expand_row1_cols<1>(sub, vr, yr, acc, c, 0);
    if (c < b1) expand_row1_cols<1>(sub, vr, yr, acc, c, b1 - c);
  }
}

// Rows [j, j + n) for 1 < n < RB: one block of n rows.
template <int RB>
static inline void expand_rows_rest(const ExpandTile& t, int64_t j, int64_t n) {
  if constexpr (RB > 2) {
    if (n == RB - 1) return expand_rows<RB - 1, kExpandCols>(t, j);
    return expand_rows_rest<RB - 1>(t, j, n);
  }
}

static void expand_tile(const ExpandTile& t) {
  int64_t j = t.j0;
  for (; j + kExpandRows <= t.j1; j += kExpandRows) expand_rows<kExpandRows, kExpandCols>(t, j);
  if (t.j1 - j > 1) expand_rows_rest<kExpandRows>(t, j, t.j1 - j);
  else if (j < t.j1) expand_row1(t, j);
}

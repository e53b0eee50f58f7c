// SGMV tile bodies shared by sgmv_avx2.cc and sgmv_avx512.cc. The including file defines, in its ISA namespace, the
// vec_*.h primitives (V, kLanes, v_load, v_load_tail, v_store, v_store_tail, v_set1, v_fmadd, v_hsum) and the
// register blocking: kShrinkRows x kShrinkK dot products at once (1 x kShrinkK1 for a lone row), and kExpandRows
// rows x kExpandCols vectors of output columns (kExpandCols1 vectors, kExpandK1 W rows at a time, for a lone row).
// Only static functions and templates live here (nothing with external linkage may be compiled with AVX flags).
//
// Two paths per kernel:
//   row path   a lone row (decode; also the last row a group leaves after its full row blocks): a pure stream over
//              W, several W rows at a time (that many concurrent sequential streams, which the memory system serves
//              far better than one long one).
//   GEMM path  blocks of kShrinkRows / kExpandRows rows (fewer for what a group leaves), register-blocked against W,
//              so W is read once per block of rows; sgmv.cc hands a group of many rows out in blocks of whole rows.
// Blocking changes which outputs share loads of x, v and W, never an output's arithmetic: a shrink partial is the
// lane-wise FMA chain over its chunk then v_hsum, an expand output the FMA chain over k then y = fma(scale, acc, y).
// So a row gives the same bits on either path, in any group.

static_assert(kShrinkK == 4 && kShrinkK1 >= 4 && kShrinkK1 % 4 == 0, "shrink_rows and shrink_row1 split r by 4");

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

// Rows [j, j + RB) of the tile against every W row: the register-blocked GEMM. Chunks are the outer loop, so the RB
// x-row pieces of a chunk (RB x 1 KB) stay in L1 while the chunk's W rows pass them KB at a time, and each x row is
// read from memory once, front to back.
template <int RB, int KB>
static inline void shrink_rows(const ShrinkTile& t, int64_t j) {
  const float* xr[RB];
  for (int i = 0; i < RB; ++i) xr[i] = t.x + t.rows.at(j + i) * t.h;
  for (int64_t c = t.c0; c < t.c1; ++c) {
    const int64_t e0 = c * kSgmvChunk, len = std::min<int64_t>(kSgmvChunk, t.h - e0);
    const float* xc[RB];
    for (int i = 0; i < RB; ++i) xc[i] = xr[i] + e0;
    float* out = t.part + (c * t.n_rows + j) * t.r;
    const float* wc[KB];
    int64_t k = 0;
    for (; k + KB <= t.r; k += KB) {
      for (int q = 0; q < KB; ++q) wc[q] = t.w + (k + q) * t.h + e0;
      shrink_block<RB, KB>(xc, wc, len, out + k, t.r);
    }
    // The last r % KB W rows as one block (a rank below KB, e.g. 3, still gets RB x r independent chains).
    for (int q = 0; k + q < t.r; ++q) wc[q] = t.w + (k + q) * t.h + e0;
    switch (t.r - k) {
      case 0: break;
      case 1: shrink_block<RB, 1>(xc, wc, len, out + k, t.r); break;
      case 2: shrink_block<RB, 2>(xc, wc, len, out + k, t.r); break;
      default: shrink_block<RB, 3>(xc, wc, len, out + k, t.r); break;
    }
  }
}

// Row path: W rows k..k+KB-1 streamed together along the tile's chunks, each chunk a 1 x KB block (x's chunk is
// reloaded from L1 for every block of W rows).
template <int KB>
static inline void shrink_row1_k(const ShrinkTile& t, const float* xr, float* out_row, int64_t k) {
  const int64_t ostride = t.n_rows * t.r;  // between chunks in part
  for (int64_t c = t.c0; c < t.c1; ++c) {
    const int64_t e0 = c * kSgmvChunk, len = std::min<int64_t>(kSgmvChunk, t.h - e0);
    const float* xc[1] = {xr + e0};
    const float* wc[KB];
    for (int q = 0; q < KB; ++q) wc[q] = t.w + (k + q) * t.h + e0;
    shrink_block<1, KB>(xc, wc, len, out_row + c * ostride + k, 1);
  }
}

static inline void shrink_row1(const ShrinkTile& t, int64_t j) {
  const float* xr = t.x + t.rows.at(j) * t.h;
  float* out_row = t.part + j * t.r;
  int64_t k = 0;
  for (; k + kShrinkK1 <= t.r; k += kShrinkK1) shrink_row1_k<kShrinkK1>(t, xr, out_row, k);
  for (; k + 4 <= t.r; k += 4) shrink_row1_k<4>(t, xr, out_row, k);
  switch (t.r - k) {
    case 3: shrink_row1_k<3>(t, xr, out_row, k); break;
    case 2: shrink_row1_k<2>(t, xr, out_row, k); break;
    case 1: shrink_row1_k<1>(t, xr, out_row, k); break;
    default: break;
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

// Rows [j, j + RB) of the tile: the register-blocked GEMM, CB vectors of columns at a time (what is left vector by
// vector), each block's W columns read along all r rows.
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

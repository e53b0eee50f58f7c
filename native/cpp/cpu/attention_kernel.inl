// Attention's SIMD inner step (see attention_simd.h), written once for both ISAs. The including file defines
// V, kLanes and the v_* primitives (vec_avx2.h / vec_avx512.h) plus v_hsum4 (four horizontal sums at once),
// includes vec_math.inl (v_exp) in the same namespace, then includes this file there.
//
// Rows are processed two at a time where possible: the pair shares every K and V load, which halves the load
// traffic per FMA (L1 loads, not FMAs, bound a single row). Per row the operations and their order are the
// same in the paired and the single path, so pairing never changes a result.

static_assert(kKeyBlock % kLanes == 0, "a key block is a whole number of vectors");
static_assert(kKeyBlock % 4 == 0, "keys are scored four at a time");

// s[r][j] = dot(q_r, k_j) for j < nk. Keys go four at a time, each dot accumulating its lanes in one vector in
// order over d and ending in v_hsum4; past nk the last key is repeated and its scores ignored, so a key's score
// is computed the same way wherever it falls.
template <int R>
static inline void rows_dots(const float* const* q, const float* k, int64_t stride, int64_t nk, int64_t d,
                             float (*s)[kKeyBlock]) {
  const int64_t full = d - d % kLanes;
  const int64_t tail = d - full;
  for (int64_t j = 0; j < nk; j += 4) {
    const float* kp[4];
    for (int t = 0; t < 4; ++t) kp[t] = k + std::min<int64_t>(j + t, nk - 1) * stride;
    V a[R][4];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < 4; ++t) a[r][t] = v_set1(0.0f);
    for (int64_t c = 0; c < full; c += kLanes) {
      V qv[R];
      for (int r = 0; r < R; ++r) qv[r] = v_load(q[r] + c);
      for (int t = 0; t < 4; ++t) {
        const V kv = v_load(kp[t] + c);
        for (int r = 0; r < R; ++r) a[r][t] = v_fmadd(qv[r], kv, a[r][t]);
      }
    }
    if (tail) {
      V qv[R];
      for (int r = 0; r < R; ++r) qv[r] = v_load_tail(q[r] + full, tail);
      for (int t = 0; t < 4; ++t) {
        const V kv = v_load_tail(kp[t] + full, tail);
        for (int r = 0; r < R; ++r) a[r][t] = v_fmadd(qv[r], kv, a[r][t]);
      }
    }
    for (int r = 0; r < R; ++r) v_hsum4(a[r][0], a[r][1], a[r][2], a[r][3], s[r] + j);
  }
}

// Folds a row's n visible scores (scaled, in key order) into its state; writes their weights
// p[t] = exp(score_t - new max) and returns the factor the old accumulator must be scaled by.
static inline float row_update(const float* scores, int64_t n, SoftmaxRow& row, float* p) {
  float block_max = scores[0];
  for (int64_t t = 1; t < n; ++t) block_max = std::max(block_max, scores[t]);
  const float new_max = std::max(row.max, block_max);
  const float corr = std::exp(row.max - new_max);  // 0 for the first visible block (row.max is -inf)
  const V vmax = v_set1(new_max);
  for (int64_t j = 0; j < kKeyBlock; j += kLanes) v_store(p + j, v_exp(v_sub(v_load(scores + j), vmax)));
  for (int64_t t = n; t < kKeyBlock; ++t) p[t] = 0.0f;  // v_exp clamps, so unused lanes must be zeroed
  V psum = v_load(p);
  for (int64_t j = kLanes; j < kKeyBlock; j += kLanes) psum = v_add(psum, v_load(p + j));
  row.sum = row.sum * corr + v_hsum(psum);
  row.max = new_max;
  return corr;
}

// acc_r = acc_r * corr_r + sum_{t < n_r} p_r[t] * vrow[t], keys in order. Every row's visible keys are a prefix
// of vrow, so keys below the smallest n_r are loaded once for all R rows. Four vectors of d per pass hide the
// FMA latency.
template <int R>
static inline void rows_accumulate(float* const* acc, const float* corr, const float (*p)[kKeyBlock], const int64_t* n,
                                   const float* const* vrow, int64_t d) {
  int64_t n_min = n[0];
  for (int r = 1; r < R; ++r) n_min = std::min(n_min, n[r]);
  int64_t c = 0;
  for (; c + 4 * kLanes <= d; c += 4 * kLanes) {
    V a[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) a[r][i] = v_mul(v_load(acc[r] + c + i * kLanes), v_set1(corr[r]));
    for (int64_t t = 0; t < n_min; ++t) {
      V vv[4];
      for (int i = 0; i < 4; ++i) vv[i] = v_load(vrow[t] + c + i * kLanes);
      for (int r = 0; r < R; ++r) {
        const V pt = v_set1(p[r][t]);
        for (int i = 0; i < 4; ++i) a[r][i] = v_fmadd(pt, vv[i], a[r][i]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int64_t t = n_min; t < n[r]; ++t) {
        const V pt = v_set1(p[r][t]);
        for (int i = 0; i < 4; ++i) a[r][i] = v_fmadd(pt, v_load(vrow[t] + c + i * kLanes), a[r][i]);
      }
      for (int i = 0; i < 4; ++i) v_store(acc[r] + c + i * kLanes, a[r][i]);
    }
  }
  for (; c < d; c += kLanes) {
    const int64_t w = std::min<int64_t>(kLanes, d - c);  // lanes in this vector (the last may be partial)
    V a[R];
    for (int r = 0; r < R; ++r) a[r] = v_mul(v_load_tail(acc[r] + c, w), v_set1(corr[r]));
    for (int64_t t = 0; t < n_min; ++t) {
      const V vv = v_load_tail(vrow[t] + c, w);
      for (int r = 0; r < R; ++r) a[r] = v_fmadd(v_set1(p[r][t]), vv, a[r]);
    }
    for (int r = 0; r < R; ++r) {
      for (int64_t t = n_min; t < n[r]; ++t) a[r] = v_fmadd(v_set1(p[r][t]), v_load_tail(vrow[t] + c, w), a[r]);
      v_store_tail(acc[r] + c, a[r], w);
    }
  }
}

// Rows rs[0..R) of the block; `visible` lists the block's unmasked keys in order (vis_count of them, all below
// the largest nk of any row).
template <int R>
static inline void attend_rows(const AttendBlock& b, const int64_t* rs, const int64_t* visible, int64_t vis_count,
                               const float* const* vrow) {
  const float* q[R];
  int64_t nk = 0;
  for (int r = 0; r < R; ++r) {
    q[r] = b.q[rs[r]];
    nk = std::max(nk, b.nk[rs[r]]);
  }
  alignas(64) float s[R][kKeyBlock];
  rows_dots<R>(q, b.k, b.kv_stride, nk, b.d, s);
  alignas(64) float scores[kKeyBlock];
  alignas(64) float p[R][kKeyBlock];
  float corr[R];
  int64_t n[R];
  float* acc[R];
  for (int r = 0; r < R; ++r) {
    // The row's visible keys: the block's unmasked keys below its own nk (a prefix of `visible`).
    n[r] = 0;
    while (n[r] < vis_count && visible[n[r]] < b.nk[rs[r]]) ++n[r];
    for (int64_t t = 0; t < kKeyBlock; ++t) scores[t] = t < n[r] ? s[r][visible[t]] * b.scale : 0.0f;
    corr[r] = row_update(scores, n[r], b.state[rs[r]], p[r]);
    acc[r] = b.acc + rs[r] * b.d;
  }
  rows_accumulate<R>(acc, corr, p, n, vrow, b.d);
}

static void attend_block_body(const AttendBlock& b) {
  int64_t nk_max = 0;
  for (int64_t r = 0; r < b.rows; ++r) nk_max = std::max(nk_max, b.nk[r]);
  int64_t visible[kKeyBlock];
  const float* vrow[kKeyBlock];
  int64_t vis_count = 0;
  for (int64_t j = 0; j < nk_max; ++j) {
    if (b.key_mask != nullptr && b.key_mask[j] == 0) continue;  // a padding key's K/V may hold anything
    visible[vis_count] = j;
    vrow[vis_count] = b.v + j * b.kv_stride;
    ++vis_count;
  }
  if (vis_count == 0) return;
  // Rows that see at least one key of this block, taken in pairs.
  int64_t pending = -1;
  for (int64_t r = 0; r < b.rows; ++r) {
    if (b.nk[r] <= visible[0]) continue;  // sees no unmasked key here: its state stays as it is
    if (pending < 0) {
      pending = r;
      continue;
    }
    const int64_t pair[2] = {pending, r};
    attend_rows<2>(b, pair, visible, vis_count, vrow);
    pending = -1;
  }
  if (pending >= 0) attend_rows<1>(b, &pending, visible, vis_count, vrow);
}

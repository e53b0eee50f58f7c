// Attention's SIMD inner step (see attention_simd.h), written once for both ISAs. The including file defines
// V, kLanes and the v_* primitives (vec_avx2.h / vec_avx512.h), includes vec_math.inl (v_exp) in the same
// namespace, then includes this file there.

static_assert(kKeyBlock % kLanes == 0, "a key block is a whole number of vectors");

// s[j] = dot(q, k_j) for j < nk. Four keys share each load of q. Each dot accumulates its lanes into one
// vector in order over d and ends in one v_hsum, so its value does not depend on which keys it is grouped
// with (the 4-key and 1-key loops do the same operations per key).
static inline void block_dots(const float* q, const float* k, int64_t stride, int64_t nk, int64_t d, float* s) {
  const int64_t full = d - d % kLanes;
  const int64_t tail = d - full;
  int64_t j = 0;
  for (; j + 4 <= nk; j += 4) {
    const float* k0 = k + j * stride;
    const float* k1 = k0 + stride;
    const float* k2 = k1 + stride;
    const float* k3 = k2 + stride;
    V a0 = v_set1(0.0f), a1 = v_set1(0.0f), a2 = v_set1(0.0f), a3 = v_set1(0.0f);
    for (int64_t c = 0; c < full; c += kLanes) {
      const V qv = v_load(q + c);
      a0 = v_fmadd(qv, v_load(k0 + c), a0);
      a1 = v_fmadd(qv, v_load(k1 + c), a1);
      a2 = v_fmadd(qv, v_load(k2 + c), a2);
      a3 = v_fmadd(qv, v_load(k3 + c), a3);
    }
    if (tail) {
      const V qv = v_load_tail(q + full, tail);
      a0 = v_fmadd(qv, v_load_tail(k0 + full, tail), a0);
      a1 = v_fmadd(qv, v_load_tail(k1 + full, tail), a1);
      a2 = v_fmadd(qv, v_load_tail(k2 + full, tail), a2);
      a3 = v_fmadd(qv, v_load_tail(k3 + full, tail), a3);
    }
    s[j] = v_hsum(a0);
    s[j + 1] = v_hsum(a1);
    s[j + 2] = v_hsum(a2);
    s[j + 3] = v_hsum(a3);
  }
  for (; j < nk; ++j) {
    const float* kj = k + j * stride;
    V a = v_set1(0.0f);
    for (int64_t c = 0; c < full; c += kLanes) a = v_fmadd(v_load(q + c), v_load(kj + c), a);
    if (tail) a = v_fmadd(v_load_tail(q + full, tail), v_load_tail(kj + full, tail), a);
    s[j] = v_hsum(a);
  }
}

static void attend_block_body(const float* q, const float* k, const float* v, int64_t stride, int64_t nk, int64_t d,
                              float scale, const uint8_t* key_mask, SoftmaxRow& row, float* acc) {
  alignas(64) float s[kKeyBlock];
  alignas(64) float w[kKeyBlock];  // 1 for a visible key, 0 otherwise (and past nk)
  block_dots(q, k, stride, nk, d, s);
  float block_max = -INFINITY;
  int64_t visible = 0;
  for (int64_t j = 0; j < kKeyBlock; ++j) {
    const bool vis = j < nk && (key_mask == nullptr || key_mask[j] != 0);
    w[j] = vis ? 1.0f : 0.0f;
    s[j] = vis ? s[j] * scale : -INFINITY;
    if (vis) {
      block_max = std::max(block_max, s[j]);
      ++visible;
    }
  }
  if (visible == 0) return;

  const float new_max = std::max(row.max, block_max);
  const float corr = std::exp(row.max - new_max);  // 0 for the first visible block (row.max is -inf)
  // v_exp clamps its input, so a hidden key's exp(-inf) is tiny rather than 0: the 0/1 weight zeroes it.
  alignas(64) float p[kKeyBlock];
  const V vmax = v_set1(new_max);
  V psum = v_set1(0.0f);
  for (int64_t j = 0; j < kKeyBlock; j += kLanes) {
    const V pj = v_mul(v_exp(v_sub(v_load(s + j), vmax)), v_load(w + j));
    v_store(p + j, pj);
    psum = v_add(psum, pj);
  }
  row.sum = row.sum * corr + v_hsum(psum);
  row.max = new_max;

  // Only visible keys touch acc: a padding key's V may hold anything (even inf/NaN) and must not leak in.
  const float* vrow[kKeyBlock];
  float pw[kKeyBlock];
  int64_t n = 0;
  for (int64_t j = 0; j < nk; ++j) {
    if (w[j] != 0.0f) {
      vrow[n] = v + j * stride;
      pw[n] = p[j];
      ++n;
    }
  }
  // acc = acc * corr + sum_t p_t v_t, keys in order; four independent vectors hide the FMA latency.
  const V vc = v_set1(corr);
  int64_t c = 0;
  for (; c + 4 * kLanes <= d; c += 4 * kLanes) {
    V a0 = v_mul(v_load(acc + c), vc);
    V a1 = v_mul(v_load(acc + c + kLanes), vc);
    V a2 = v_mul(v_load(acc + c + 2 * kLanes), vc);
    V a3 = v_mul(v_load(acc + c + 3 * kLanes), vc);
    for (int64_t t = 0; t < n; ++t) {
      const V pt = v_set1(pw[t]);
      const float* vr = vrow[t] + c;
      a0 = v_fmadd(pt, v_load(vr), a0);
      a1 = v_fmadd(pt, v_load(vr + kLanes), a1);
      a2 = v_fmadd(pt, v_load(vr + 2 * kLanes), a2);
      a3 = v_fmadd(pt, v_load(vr + 3 * kLanes), a3);
    }
    v_store(acc + c, a0);
    v_store(acc + c + kLanes, a1);
    v_store(acc + c + 2 * kLanes, a2);
    v_store(acc + c + 3 * kLanes, a3);
  }
  for (; c + kLanes <= d; c += kLanes) {
    V a = v_mul(v_load(acc + c), vc);
    for (int64_t t = 0; t < n; ++t) a = v_fmadd(v_set1(pw[t]), v_load(vrow[t] + c), a);
    v_store(acc + c, a);
  }
  if (c < d) {
    const int64_t r = d - c;
    V a = v_mul(v_load_tail(acc + c, r), vc);
    for (int64_t t = 0; t < n; ++t) a = v_fmadd(v_set1(pw[t]), v_load_tail(vrow[t] + c, r), a);
    v_store_tail(acc + c, a, r);
  }
}

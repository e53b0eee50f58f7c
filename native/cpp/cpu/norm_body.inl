// Row-wise LayerNorm, RMSNorm and softmax loops shared by norm_avx2.cc and norm_avx512.cc. The including file
// provides, inside its ISA namespace, everything vec_math.inl needs plus:
//   VD (double vector of kLanes/2), vd_zero, vd_lo / vd_hi (widen the low / high half of a V), vd_add,
//   vd_fmadd, vd_hsum, and v_tail_or(v, r, fill) (lanes >= r replaced by fill).
// Reductions widen to double lanes: four accumulators combined in a fixed tree, so a row's result depends only
// on the row (never on the thread count) and stays within a few ulp of the double reference.

// Sum over x[0, n) of map(x) (or of map(x)^2 when kSquare), accumulated in double lanes. map runs on float
// vectors; dead tail lanes are zeroed after map, so they add nothing.
template <bool kSquare, class Map>
static inline double reduce_d(const float* x, int64_t n, Map map) {
  VD a0 = vd_zero(), a1 = vd_zero(), a2 = vd_zero(), a3 = vd_zero();
  auto acc = [](VD a, VD w) { return kSquare ? vd_fmadd(w, w, a) : vd_add(a, w); };
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const V u = map(v_load(x + i)), w = map(v_load(x + i + kLanes));
    a0 = acc(a0, vd_lo(u));
    a1 = acc(a1, vd_hi(u));
    a2 = acc(a2, vd_lo(w));
    a3 = acc(a3, vd_hi(w));
  }
  if (i + kLanes <= n) {
    const V u = map(v_load(x + i));
    a0 = acc(a0, vd_lo(u));
    a1 = acc(a1, vd_hi(u));
    i += kLanes;
  }
  if (i < n) {
    const int64_t r = n - i;
    const V u = v_tail_or(map(v_load_tail(x + i, r)), r, v_set1(0.0f));
    a2 = acc(a2, vd_lo(u));
    a3 = acc(a3, vd_hi(u));
  }
  return vd_hsum(vd_add(vd_add(a0, a1), vd_add(a2, a3)));
}

// ---------------------------------------------------------------- LayerNorm

// Two passes for accuracy: the mean (double lanes), then the variance of the centred values. The mean is
// carried as a float pair (hi + lo) so x - mean stays accurate even when |mean| >> std.
template <bool kGamma, bool kBeta>
static void layer_norm_rows_t(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  const auto identity = [](V v) { return v; };
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    const double mean = reduce_d<false>(xr, dim, identity) / static_cast<double>(dim);
    const float mean_hi = static_cast<float>(mean);
    const float mean_lo = static_cast<float>(mean - static_cast<double>(mean_hi));
    const V hi = v_set1(mean_hi), lo = v_set1(mean_lo);
    const auto centred = [&](V v) { return v_sub(v_sub(v, hi), lo); };
    const double var = reduce_d<true>(xr, dim, centred) / static_cast<double>(dim);
    const V rstd = v_set1(static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps))));
    // y = (x - mean) * (rstd * gamma) + beta
    const auto normalise = [&](V v, V g, V b) {
      const V scale = kGamma ? v_mul(rstd, g) : rstd;
      return kBeta ? v_fmadd(centred(v), scale, b) : v_mul(centred(v), scale);
    };
    int64_t i = 0;
    for (; i + kLanes <= dim; i += kLanes) {
      const V g = kGamma ? v_load(gamma + i) : rstd;
      const V b = kBeta ? v_load(beta + i) : rstd;
      v_store(yr + i, normalise(v_load(xr + i), g, b));
    }
    if (i < dim) {
      const int64_t r = dim - i;
      const V g = kGamma ? v_load_tail(gamma + i, r) : rstd;
      const V b = kBeta ? v_load_tail(beta + i, r) : rstd;
      v_store_tail(yr + i, normalise(v_load_tail(xr + i, r), g, b), r);
    }
  }
}

static void layer_norm_rows(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta, float eps, float* out) {
  if (gamma && beta) layer_norm_rows_t<true, true>(x, rows, dim, gamma, beta, eps, out);
  else if (gamma) layer_norm_rows_t<true, false>(x, rows, dim, gamma, beta, eps, out);
  else if (beta) layer_norm_rows_t<false, true>(x, rows, dim, gamma, beta, eps, out);
  else layer_norm_rows_t<false, false>(x, rows, dim, gamma, beta, eps, out);
}

// ---------------------------------------------------------------- RMSNorm

// y = (x * rstd) * gamma, the order Hugging Face's LlamaRMSNorm uses.
template <bool kGamma>
static void rms_norm_rows_t(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  const auto identity = [](V v) { return v; };
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    const double mean_sq = reduce_d<true>(xr, dim, identity) / static_cast<double>(dim);
    const V rstd = v_set1(static_cast<float>(1.0 / std::sqrt(mean_sq + static_cast<double>(eps))));
    int64_t i = 0;
    for (; i + kLanes <= dim; i += kLanes) {
      const V y = v_mul(v_load(xr + i), rstd);
      v_store(yr + i, kGamma ? v_mul(y, v_load(gamma + i)) : y);
    }
    if (i < dim) {
      const int64_t r = dim - i;
      const V y = v_mul(v_load_tail(xr + i, r), rstd);
      v_store_tail(yr + i, kGamma ? v_mul(y, v_load_tail(gamma + i, r)) : y, r);
    }
  }
}

static void rms_norm_rows(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* out) {
  if (gamma) rms_norm_rows_t<true>(x, rows, dim, gamma, eps, out);
  else rms_norm_rows_t<false>(x, rows, dim, gamma, eps, out);
}

// ---------------------------------------------------------------- softmax

// Below ln(FLT_MIN) exp is subnormal in f32; v_exp's clamp would return ~FLT_MIN there, so such arguments
// (and -inf) give exactly 0. v_exp's clamp also hides NaN, so a NaN argument is passed through explicitly.
static inline V softmax_exp(V a) {
  V e = v_exp(a);
  e = v_add(e, v_mul(a, v_set1(0.0f)));  // a finite: adds +-0; a NaN: NaN
  return v_blend_small(a, v_set1(-87.3365447505f), v_set1(0.0f), e);
}

static void softmax_rows(const float* x, int64_t rows, int64_t dim, float scale, float* out) {
  const V s = v_set1(scale);
  const V ninf = v_set1(-INFINITY);
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    float* yr = out + row * dim;
    // Pass 1: m = max(x * scale). max returns its second operand when either is NaN, so NaN products are
    // skipped here and surface in pass 2 (making the whole row NaN).
    V m0 = ninf, m1 = ninf;
    int64_t i = 0;
    for (; i + 2 * kLanes <= dim; i += 2 * kLanes) {
      m0 = v_max(v_mul(v_load(xr + i), s), m0);
      m1 = v_max(v_mul(v_load(xr + i + kLanes), s), m1);
    }
    if (i + kLanes <= dim) {
      m0 = v_max(v_mul(v_load(xr + i), s), m0);
      i += kLanes;
    }
    if (i < dim) m1 = v_max(v_tail_or(v_mul(v_load_tail(xr + i, dim - i), s), dim - i, ninf), m1);
    const float m = v_hmax(v_max(m0, m1));
    if (m == -INFINITY) {
      softmax_degenerate_row(xr, dim, scale, yr);
      continue;
    }
    // Pass 2: e = exp(x * scale - m) with one rounding (fma), so the rounding of m itself is common to the
    // whole row and cancels in the normalisation. Stored, and summed in double lanes.
    const V neg_m = v_set1(-m);
    VD a0 = vd_zero(), a1 = vd_zero();
    i = 0;
    for (; i + kLanes <= dim; i += kLanes) {
      const V e = softmax_exp(v_fmadd(v_load(xr + i), s, neg_m));
      v_store(yr + i, e);
      a0 = vd_add(a0, vd_lo(e));
      a1 = vd_add(a1, vd_hi(e));
    }
    if (i < dim) {
      const int64_t r = dim - i;
      const V e = v_tail_or(softmax_exp(v_fmadd(v_load_tail(xr + i, r), s, neg_m)), r, v_set1(0.0f));
      v_store_tail(yr + i, e, r);
      a0 = vd_add(a0, vd_lo(e));
      a1 = vd_add(a1, vd_hi(e));
    }
    // Pass 3: normalise. sum >= ~1 (the max element contributes exp(~0)), unless NaN, which propagates.
    const V inv = v_set1(static_cast<float>(1.0 / vd_hsum(vd_add(a0, a1))));
    i = 0;
    for (; i + kLanes <= dim; i += kLanes) v_store(yr + i, v_mul(v_load(yr + i), inv));
    if (i < dim) v_store_tail(yr + i, v_mul(v_load_tail(yr + i, dim - i), inv), dim - i);
  }
}

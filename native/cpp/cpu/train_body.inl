// Training kernel loops shared by train_avx2.cc and train_avx512.cc. The including file provides, inside its ISA
// namespace, everything vec_math.inl needs plus VD (double vector of kLanes / 2), vd_zero, vd_lo / vd_hi (widen the
// low / high half of a V), vd_add, vd_fmadd, vd_hsum, v_tail_or(v, r, fill) (lanes >= r replaced by fill) and v_sqrt.
// Row reductions widen to double lanes and combine them in a fixed tree, so a row's result depends only on the row.
// The scalar twins in train.cc follow the same algorithms with sequential double sums.

// Sums over [0, n) of f(i) (a V, dead tail lanes zeroed) in double lanes: a0/a1 take the low/high halves.
template <class F>
static inline double tsum_d(int64_t n, F f) {
  VD a0 = vd_zero(), a1 = vd_zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V u = f(i, kLanes);
    a0 = vd_add(a0, vd_lo(u));
    a1 = vd_add(a1, vd_hi(u));
  }
  if (i < n) {
    const V u = v_tail_or(f(i, n - i), n - i, v_set1(0.0f));
    a0 = vd_add(a0, vd_lo(u));
    a1 = vd_add(a1, vd_hi(u));
  }
  return vd_hsum(vd_add(a0, a1));
}

// Sum over [0, n) of fa(i) * fb(i), the products formed in double lanes (exact), dead tail lanes zeroed.
template <class FA, class FB>
static inline double tdot_d(int64_t n, FA fa, FB fb) {
  VD a0 = vd_zero(), a1 = vd_zero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V u = fa(i, kLanes), w = fb(i, kLanes);
    a0 = vd_fmadd(vd_lo(u), vd_lo(w), a0);
    a1 = vd_fmadd(vd_hi(u), vd_hi(w), a1);
  }
  if (i < n) {
    const V u = v_tail_or(fa(i, n - i), n - i, v_set1(0.0f)), w = v_tail_or(fb(i, n - i), n - i, v_set1(0.0f));
    a0 = vd_fmadd(vd_lo(u), vd_lo(w), a0);
    a1 = vd_fmadd(vd_hi(u), vd_hi(w), a1);
  }
  return vd_hsum(vd_add(a0, a1));
}

static inline V load_n(const float* p, int64_t i, int64_t r) { return r == kLanes ? v_load(p + i) : v_load_tail(p + i, r); }
static inline void store_n(float* p, int64_t i, int64_t r, V v) {
  if (r == kLanes) v_store(p + i, v);
  else v_store_tail(p + i, v, r);
}
// Runs f(i, r) over [0, n) in full vectors then one tail of r < kLanes lanes.
template <class F>
static inline void for_lanes(int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) f(i, kLanes);
  if (i < n) f(i, n - i);
}

// ---------------------------------------------------------------- LayerNorm / RMSNorm backward (rows)

// dx = rstd * (g dy - mean(g dy) - xhat * mean(g dy xhat)), xhat = ((x - hi) - lo) * rstd, all in f32 but the two
// means (double lanes). Statistics as in the forward (norm_body.inl): two-pass mean and centred variance.
static void layer_norm_bwd_rows(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps,
                                float* dx, NormRowStats* stats) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    const double mean = tsum_d(dim, [&](int64_t i, int64_t r) { return load_n(xr, i, r); }) * inv_dim;
    const float hi_f = static_cast<float>(mean), lo_f = static_cast<float>(mean - static_cast<double>(hi_f));
    const V hi = v_set1(hi_f), lo = v_set1(lo_f);
    const auto centred = [&](int64_t i, int64_t r) { return v_sub(v_sub(load_n(xr, i, r), hi), lo); };
    const double var = tdot_d(dim, centred, centred) * inv_dim;
    const float rstd_f = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    stats[row] = {hi_f, lo_f, rstd_f};
    if (!dx) continue;
    const V rstd = v_set1(rstd_f);
    const auto xhat = [&](int64_t i, int64_t r) { return v_mul(v_sub(v_sub(load_n(xr, i, r), hi), lo), rstd); };
    const auto gdy = [&](int64_t i, int64_t r) { return gamma ? v_mul(load_n(gamma, i, r), load_n(dyr, i, r)) : load_n(dyr, i, r); };
    const double a = tsum_d(dim, gdy) * inv_dim;
    const double b = tdot_d(dim, gdy, xhat) * inv_dim;
    const V va = v_set1(static_cast<float>(a)), vb = v_set1(static_cast<float>(b));
    float* dxr = dx + row * dim;
    for_lanes(dim, [&](int64_t i, int64_t r) {
      const V xh = xhat(i, r), g = gdy(i, r);  // read before the store: dx may alias dy
      store_n(dxr, i, r, v_mul(rstd, v_fnmadd(xh, vb, v_sub(g, va))));
    });
  }
}

// dx = rstd * (g dy - xhat * mean(g dy xhat)), xhat = x * rstd.
static void rms_norm_bwd_rows(const float* x, const float* dy, int64_t rows, int64_t dim, const float* gamma, float eps,
                              float* dx, NormRowStats* stats) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    const auto xv = [&](int64_t i, int64_t r) { return load_n(xr, i, r); };
    const double ms = tdot_d(dim, xv, xv) * inv_dim;
    const float rstd_f = static_cast<float>(1.0 / std::sqrt(ms + static_cast<double>(eps)));
    stats[row] = {0.0f, 0.0f, rstd_f};
    if (!dx) continue;
    const V rstd = v_set1(rstd_f);
    const auto xhat = [&](int64_t i, int64_t r) { return v_mul(load_n(xr, i, r), rstd); };
    const auto gdy = [&](int64_t i, int64_t r) { return gamma ? v_mul(load_n(gamma, i, r), load_n(dyr, i, r)) : load_n(dyr, i, r); };
    const double b = tdot_d(dim, gdy, xhat) * inv_dim;
    const V vb = v_set1(static_cast<float>(b));
    float* dxr = dx + row * dim;
    for_lanes(dim, [&](int64_t i, int64_t r) {
      const V xh = xhat(i, r), g = gdy(i, r);
      store_n(dxr, i, r, v_mul(rstd, v_fnmadd(xh, vb, g)));
    });
  }
}

// ---------------------------------------------------------------- softmax backward (rows)

static void softmax_bwd_rows(const float* y, const float* dy, int64_t rows, int64_t dim, float scale, float* dx) {
  const V s = v_set1(scale);
  for (int64_t row = 0; row < rows; ++row) {
    const float* yr = y + row * dim;
    const float* dyr = dy + row * dim;
    const double dot = tdot_d(dim, [&](int64_t i, int64_t r) { return load_n(yr, i, r); }, [&](int64_t i, int64_t r) { return load_n(dyr, i, r); });
    const V c = v_set1(static_cast<float>(dot));
    float* dxr = dx + row * dim;
    for_lanes(dim, [&](int64_t i, int64_t r) { store_n(dxr, i, r, v_mul(v_mul(load_n(yr, i, r), v_sub(load_n(dyr, i, r), c)), s)); });
  }
}

// ---------------------------------------------------------------- cross-entropy (rows)

// exp(a) as softmax's (norm_body.inl): arguments below ln(FLT_MIN) (and -inf) give exactly 0, a NaN stays NaN.
static inline V ce_exp(V a) {
  V e = v_exp(a);
  e = v_add(e, v_mul(a, v_set1(0.0f)));
  return v_blend_small(a, v_set1(-87.3365447505f), v_set1(0.0f), e);
}

static void cross_entropy_rows(const CrossEntropyArgs& a, int64_t r0, int64_t r1) {
  const int64_t V_ = a.vocab;
  const double s = a.smoothing;
  for (int64_t row = r0; row < r1; ++row) {
    const float* xr = a.logits + row * V_;
    float* dl = a.dlogits ? a.dlogits + row * V_ : nullptr;
    const int32_t t = a.targets[row];
    if (t == a.ignore_index) {
      a.loss[row] = 0.0f;
      if (dl) std::fill(dl, dl + V_, 0.0f);
      continue;
    }
    // Pass 1: the max, the target's logit and (with smoothing) the sum of logits, all read before dl is written.
    V m0 = v_set1(-INFINITY);
    for_lanes(V_, [&](int64_t i, int64_t r) { m0 = v_max(v_tail_or(load_n(xr, i, r), r, v_set1(-INFINITY)), m0); });
    const float m = v_hmax(m0);
    const double xt = xr[t];
    const double sum_x = s > 0 ? tsum_d(V_, [&](int64_t i, int64_t r) { return load_n(xr, i, r); }) : 0.0;
    // Pass 2: e = exp(x - m), stored in dl when wanted, summed in double lanes.
    const V vm = v_set1(m);
    const double sum_e = tsum_d(V_, [&](int64_t i, int64_t r) {
      const V e = ce_exp(v_sub(load_n(xr, i, r), vm));
      if (dl) store_n(dl, i, r, e);
      return e;
    });
    const double lse = static_cast<double>(m) + std::log(sum_e);
    a.loss[row] = static_cast<float>((1.0 - s) * (lse - xt) + (s > 0 ? s * (lse - sum_x / static_cast<double>(V_)) : 0.0));
    if (!dl) continue;
    // Pass 3: dl = grad_scale * (e / sum - s / V), then the target's -(1 - s) grad_scale.
    const V inv = v_set1(static_cast<float>(a.grad_scale / sum_e));
    const V off = v_set1(static_cast<float>(a.grad_scale * s / static_cast<double>(V_)));
    for_lanes(V_, [&](int64_t i, int64_t r) { store_n(dl, i, r, v_fmsub(load_n(dl, i, r), inv, off)); });
    dl[t] -= static_cast<float>(a.grad_scale * (1.0 - s));
  }
}

// ---------------------------------------------------------------- activations backward (elementwise)

// GELU (erf): d/dx x Phi(x) = Phi(x) + x phi(x), Phi from erfc(|x| / sqrt2) without cancellation.
static inline V v_gelu_erf_grad(V x) {
  const V q = v_erfc_abs(v_mul(x, v_set1(0.70710678118654752f)));
  const V half_q = v_mul(v_set1(0.5f), q);
  const V cdf = v_blend_small(x, v_set1(0.0f), half_q, v_sub(v_set1(1.0f), half_q));
  const V pdf = v_mul(v_exp(v_mul(v_set1(-0.5f), v_mul(x, x))), v_set1(0.3989422804014327f));
  return v_fmadd(x, pdf, cdf);
}

// GELU (tanh): with u = c (x + k x^3) and sig = sigmoid(2u) = 0.5 (1 + tanh u):
// d = sig + 2 x sig (1 - sig) c (1 + 3 k x^2).
static inline V v_gelu_tanh_grad(V x) {
  const V c = v_set1(0.7978845608028654f), k = v_set1(0.044715f);
  const V x2 = v_mul(x, x);
  const V u = v_mul(c, v_fmadd(v_mul(k, x), x2, x));
  const V sig = v_div(v_set1(1.0f), v_add(v_set1(1.0f), v_exp(v_mul(v_set1(-2.0f), u))));
  const V du = v_mul(c, v_fmadd(v_mul(v_set1(3.0f), k), x2, v_set1(1.0f)));
  const V t = v_mul(v_mul(v_set1(2.0f), x), v_mul(sig, v_sub(v_set1(1.0f), sig)));
  return v_fmadd(t, du, sig);
}

static inline V v_sigmoid(V x) { return v_div(v_set1(1.0f), v_add(v_set1(1.0f), v_exp(v_sub(v_set1(0.0f), x)))); }

// SiLU: d = s (1 + x (1 - s)), s = sigmoid(x).
static inline V v_silu_grad(V x) {
  const V s = v_sigmoid(x);
  return v_mul(s, v_fmadd(x, v_sub(v_set1(1.0f), s), v_set1(1.0f)));
}

static void activation_bwd_body(Activation act, const float* x, const float* dy, int64_t n, float* dx) {
  for_lanes(n, [&](int64_t i, int64_t r) {
    const V xv = load_n(x, i, r);
    const V d = act == Activation::GeluErf ? v_gelu_erf_grad(xv) : act == Activation::GeluTanh ? v_gelu_tanh_grad(xv) : v_silu_grad(xv);
    store_n(dx, i, r, v_mul(load_n(dy, i, r), d));
  });
}

static void silu_mul_bwd_body(const float* gate, const float* up, const float* dy, int64_t n, float* dgate, float* dup) {
  for_lanes(n, [&](int64_t i, int64_t r) {
    const V g = load_n(gate, i, r), u = load_n(up, i, r), d = load_n(dy, i, r);
    const V s = v_sigmoid(g);
    const V grad = v_mul(s, v_fmadd(g, v_sub(v_set1(1.0f), s), v_set1(1.0f)));
    const V dg = v_mul(v_mul(d, u), grad), du = v_mul(d, v_mul(g, s));  // all read before either store (aliasing)
    store_n(dgate, i, r, dg);
    store_n(dup, i, r, du);
  });
}

// ---------------------------------------------------------------- AdamW (elementwise, in place)

static void adamw_body(const AdamWArgs& a, int64_t begin, int64_t end) {
  const V b1 = v_set1(static_cast<float>(a.beta1)), c1 = v_set1(static_cast<float>(1.0 - a.beta1));
  const V b2 = v_set1(static_cast<float>(a.beta2)), c2 = v_set1(static_cast<float>(1.0 - a.beta2));
  const V gs = v_set1(static_cast<float>(a.grad_scale)), eps = v_set1(static_cast<float>(a.eps));
  const V decay = v_set1(static_cast<float>(a.decay)), step = v_set1(static_cast<float>(a.step_size));
  const V ibc2 = v_set1(static_cast<float>(a.inv_sqrt_bc2));
  for_lanes(end - begin, [&](int64_t i0, int64_t r) {
    const int64_t i = begin + i0;
    const V g = v_mul(load_n(a.grad, i, r), gs);
    const V m = v_fmadd(b1, load_n(a.m, i, r), v_mul(c1, g));
    const V v = v_fmadd(b2, load_n(a.v, i, r), v_mul(c2, v_mul(g, g)));
    const V denom = v_fmadd(v_sqrt(v), ibc2, eps);
    const V p = v_fnmadd(step, v_div(m, denom), v_mul(load_n(a.param, i, r), decay));
    store_n(a.m, i, r, m);
    store_n(a.v, i, r, v);
    store_n(a.param, i, r, p);
  });
}

// ---------------------------------------------------------------- sum of squares (one chunk)

static double sum_squares_body(const float* x, int64_t n) {
  const auto xv = [&](int64_t i, int64_t r) { return load_n(x, i, r); };
  return tdot_d(n, xv, xv);
}

// Vector math shared by the AVX2 and AVX-512 files. The including file defines the vector type `V`, the
// lane count `kLanes`, and the primitives below (set1, load, store, add, sub, mul, fmadd, div, max, min,
// cvt/round helpers, and masked tail load/store), then includes this file inside its own namespace.
// exp: Cephes-style range reduction + degree-6 polynomial (max rel. error ~2e-7 over the clamped range).
// erf: Abramowitz & Stegun 7.1.26 refined (abs. error < 1.5e-7).

static inline V v_exp(V x) {
  x = v_min(v_max(x, v_set1(-87.3365447505f)), v_set1(88.3762626647949f));
  const V log2e = v_set1(1.44269504088896341f);
  V fx = v_round(v_mul(x, log2e));
  // x - fx*ln2 in two parts for precision
  x = v_fnmadd(fx, v_set1(0.693359375f), x);
  x = v_fnmadd(fx, v_set1(-2.12194440e-4f), x);
  V y = v_set1(1.9875691500E-4f);
  y = v_fmadd(y, x, v_set1(1.3981999507E-3f));
  y = v_fmadd(y, x, v_set1(8.3334519073E-3f));
  y = v_fmadd(y, x, v_set1(4.1665795894E-2f));
  y = v_fmadd(y, x, v_set1(1.6666665459E-1f));
  y = v_fmadd(y, x, v_set1(5.0000001201E-1f));
  const V x2 = v_mul(x, x);
  y = v_fmadd(y, x2, v_add(x, v_set1(1.0f)));
  return v_mul(y, v_pow2i(fx));
}

// erfc(|z|) = poly(t) * exp(-z^2): lets GELU avoid 1 + erf(z) cancelling for negative inputs.
static inline V v_erfc_abs(V z) {
  const V az = v_abs(z);
  const V t = v_div(v_set1(1.0f), v_fmadd(v_set1(0.3275911f), az, v_set1(1.0f)));
  V p = v_set1(1.061405429f);
  p = v_fmadd(p, t, v_set1(-1.453152027f));
  p = v_fmadd(p, t, v_set1(1.421413741f));
  p = v_fmadd(p, t, v_set1(-0.284496736f));
  p = v_fmadd(p, t, v_set1(0.254829592f));
  return v_mul(v_mul(p, t), v_exp(v_sub(v_set1(0.0f), v_mul(az, az))));
}

// 0.5 x (1 + erf(x/sqrt2)): x >= 0 -> 0.5 x (2 - erfc), x < 0 -> 0.5 x erfc(|z|).
static inline V v_gelu_erf(V x) {
  const V q = v_erfc_abs(v_mul(x, v_set1(0.70710678118654752f)));
  const V pos = v_sub(v_set1(2.0f), q);
  return v_mul(v_mul(v_set1(0.5f), x), v_blend_small(x, v_set1(0.0f), q, pos));
}

// 0.5 x (1 + tanh(u)) == x * sigmoid(2u): no cancellation for negative x.
static inline V v_gelu_tanh(V x) {
  const V u = v_mul(v_set1(0.7978845608028654f), v_fmadd(v_mul(v_set1(0.044715f), x), v_mul(x, x), x));
  return v_div(x, v_add(v_set1(1.0f), v_exp(v_mul(v_set1(-2.0f), u))));
}

static inline V v_silu(V x) { return v_div(x, v_add(v_set1(1.0f), v_exp(v_sub(v_set1(0.0f), x)))); }

static inline V v_act(Activation act, V x) {
  switch (act) {
    case Activation::GeluErf: return v_gelu_erf(x);
    case Activation::GeluTanh: return v_gelu_tanh(x);
    case Activation::Relu: return v_max(v_set1(0.0f), x);  // maxps returns its second operand for NaN: NaN stays NaN
    default: return v_silu(x);
  }
}

// ---- loops shared by both ISAs

static void binary_body(BinaryOp op, const float* a, int64_t n, const float* b, int64_t b_n, float* out) {
  if (b_n == n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const V x = v_load(a + i), y = v_load(b + i);
      v_store(out + i, op == BinaryOp::Add ? v_add(x, y) : v_mul(x, y));
    }
    if (i < n) {
      const int64_t r = n - i;
      const V x = v_load_tail(a + i, r), y = v_load_tail(b + i, r);
      v_store_tail(out + i, op == BinaryOp::Add ? v_add(x, y) : v_mul(x, y), r);
    }
    return;
  }
  // Broadcast b (a row of b_n) over rows of a.
  for (int64_t row = 0; row < n; row += b_n) {
    binary_body(op, a + row, b_n, b, b_n, out + row);
  }
}

static void activation_body(Activation act, const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) v_store(out + i, v_act(act, v_load(x + i)));
  if (i < n) v_store_tail(out + i, v_act(act, v_load_tail(x + i, n - i)), n - i);
}

static void silu_mul_body(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) v_store(out + i, v_mul(v_silu(v_load(gate + i)), v_load(up + i)));
  if (i < n) {
    const int64_t r = n - i;
    v_store_tail(out + i, v_mul(v_silu(v_load_tail(gate + i, r)), v_load_tail(up + i, r)), r);
  }
}

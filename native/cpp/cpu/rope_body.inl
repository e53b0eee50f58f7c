// RoPE rotation loop shared by rope_avx2.cc and rope_avx512.cc (uses the primitives of vec_avx2.h /
// vec_avx512.h). Pure elementwise: no reduction, so any split over tokens is bitwise stable.
//   x1' = x1 cos - x2 sin,  x2' = x2 cos + x1 sin   (pairs (i, i + half), HF "rotate_half" layout)
static void rope_rotate(float* x, int64_t heads, int64_t head_dim, int64_t half, const float* cos, const float* sin) {
  for (int64_t h = 0; h < heads; ++h) {
    float* x1 = x + h * head_dim;
    float* x2 = x1 + half;
    int64_t i = 0;
    for (; i + kLanes <= half; i += kLanes) {
      const V a = v_load(x1 + i), b = v_load(x2 + i), c = v_load(cos + i), s = v_load(sin + i);
      v_store(x1 + i, v_fnmadd(b, s, v_mul(a, c)));
      v_store(x2 + i, v_fmadd(a, s, v_mul(b, c)));
    }
    if (i < half) {
      const int64_t r = half - i;
      const V a = v_load_tail(x1 + i, r), b = v_load_tail(x2 + i, r);
      const V c = v_load_tail(cos + i, r), s = v_load_tail(sin + i, r);
      v_store_tail(x1 + i, v_fnmadd(b, s, v_mul(a, c)), r);
      v_store_tail(x2 + i, v_fmadd(a, s, v_mul(b, c)), r);
    }
  }
}

// The PLOT merge row shared by plot_avx2.cc and plot_avx512.cc. The including file defines, in its ISA namespace,
// V, kLanes, load_f16(const f16_t*) -> V (kLanes fp16 values widened exactly by vcvtph2ps), load_f32, store_f32
// and add. Static functions only: nothing with external linkage (an out-of-line copy compiled with AVX flags must
// never be picked by the linker for baseline code). The tail runs in scalar code with the same order of additions,
// so the bits match the scalar path (plot_simd.h).

static void merge_row(const f16_t* centre, const f16_t* next_left, const f16_t* prev_right, const float* pos,
                      const float* type, int64_t d, float* z) {
  int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
    V v = load_f16(centre + j);
    if (next_left) v = add(v, load_f16(next_left + j));
    if (prev_right) v = add(v, load_f16(prev_right + j));
    v = add(v, load_f32(pos + j));
    store_f32(z + j, add(v, load_f32(type + j)));
  }
  for (; j < d; ++j) {
    float v = f16_to_f32(centre[j]);
    if (next_left) v += f16_to_f32(next_left[j]);
    if (prev_right) v += f16_to_f32(prev_right[j]);
    v += pos[j];
    z[j] = v + type[j];
  }
}

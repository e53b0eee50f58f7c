// Conversion loops shared by gather_avx2.cc and gather_avx512.cc. The including file defines, in its ISA
// namespace, V, kLanes and, for each dtype, load_f32/load_f16/load_bf16(const void*) -> V (kLanes elements)
// and store_f32/store_f16/store_bf16(void*, V). Only dtype-tagged templates and static functions live here:
// nothing with external linkage (an out-of-line copy compiled with AVX flags must never be picked by the
// linker for baseline code).

template <DType D>
static constexpr int64_t elem_bytes() { return D == DType::F32 ? 4 : 2; }

template <DType S>
static inline V load_as_f32(const void* p) {
  if constexpr (S == DType::F32) return load_f32(p);
  else if constexpr (S == DType::F16) return load_f16(p);
  else return load_bf16(p);
}

template <DType D>
static inline void store_from_f32(void* p, V v) {
  if constexpr (D == DType::F32) store_f32(p, v);
  else if constexpr (D == DType::F16) store_f16(p, v);
  else store_bf16(p, v);
}

template <DType S, DType D>
static void convert_loop(const void* src, void* dst, int64_t n) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store_from_f32<D>(d + i * elem_bytes<D>(), load_as_f32<S>(s + i * elem_bytes<S>()));
  if (i < n) {
    // The tail goes through zero-padded buffers with the same vector code, so it is bitwise like the body.
    alignas(64) unsigned char in[kLanes * 4] = {};
    alignas(64) unsigned char out[kLanes * 4];
    const int64_t r = n - i;
    __builtin_memcpy(in, s + i * elem_bytes<S>(), static_cast<size_t>(r * elem_bytes<S>()));
    store_from_f32<D>(out, load_as_f32<S>(in));
    __builtin_memcpy(d + i * elem_bytes<D>(), out, static_cast<size_t>(r * elem_bytes<D>()));
  }
}

static void convert_body(const void* src, DType s, void* dst, DType d, int64_t n) {
  constexpr DType F32 = DType::F32, F16 = DType::F16, BF16 = DType::BF16;
  if (s == F16 && d == F32) convert_loop<F16, F32>(src, dst, n);
  else if (s == BF16 && d == F32) convert_loop<BF16, F32>(src, dst, n);
  else if (s == F32 && d == F16) convert_loop<F32, F16>(src, dst, n);
  else if (s == F32 && d == BF16) convert_loop<F32, BF16>(src, dst, n);
  else if (s == F16 && d == BF16) convert_loop<F16, BF16>(src, dst, n);
  else if (s == BF16 && d == F16) convert_loop<BF16, F16>(src, dst, n);
  // Other pairs never reach here: convert() and embedding() handle same-dtype copies and reject the rest.
}

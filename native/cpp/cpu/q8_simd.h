// Q8_0 int8 weights (llama.cpp's block layout) and the decode GEMM over them: the per-ISA bodies (q8_avx2.cc,
// q8_avx512.cc, each with a VNNI variant chosen at run time; the loops are in q8_body.inl) and the scalar fast path
// in q8.cc. q8.cc quantizes the activations once per call and splits the output columns into tasks; a body computes
// every output of its columns with the arithmetic fixed below, so results never depend on the schedule, the thread
// count or which of the fast paths (scalar, AVX2, AVX-VNNI, AVX-512, AVX512-VNNI) ran: they are all the same bits.
//
// Block layout (llama.cpp's block_q8_0, 34 bytes): d (IEEE f16, little-endian), then qs[32] (int8); value = qs[i] * d.
// A weight [n, k] (HF Linear layout, blocks along k, k a multiple of 32) is n rows of k/32 blocks: u8 [n, k/32*34].
//
// Activations x [m, k] (f32) are quantized per row in blocks of 32 (the Q8_0 × Q8_0 dot of llama.cpp), but with an
// f32 scale: amax = max |x| over the block, id = 127 / amax (0 when amax == 0), q = round-to-nearest-even(x * id)
// (|q| <= 127), dx = amax / 127. A block holding a NaN or an infinity gets dx = NaN, so the outputs it feeds are NaN.
//
// One output y[r, c] (canonical arithmetic, every fast path): one f32 accumulator, 0 first;
//   for each block b, in order:  isum = sum over i < 32 of qw[i] * qx[i]    (int32, exact: |isum| <= 32·128·127 < 2^24)
//                                t = float(isum) * f32(dw[c, b])            (exact conversion, one f32 multiply)
//                                acc = fma(t, dx[r, b], acc)
//   y = acc, then + bias[c] if any.
// So every output is one chain over its blocks, and the SIMD bodies hold outputs, not partial sums, in their lanes:
// a vector lane is an output column (16 on AVX-512, 8 on AVX2) and a block costs one conversion, one multiply and
// one FMA per 16 (8) outputs, after the integer dots (vpdpbusd, or maddubs + madd). They read the weights through a
// column-interleaved copy of a few columns at a time (a "packed group", built in cache by each task from the Q8_0
// rows it owns; see q8_body.inl), so the stored format stays llama.cpp's. The reference (q8_gemm_ref) sums the same
// products in double and rounds once.
#pragma once
#include <cstdint>
#include <string>

#include "../core/dtype.h"

namespace tessera::cpu {

constexpr int64_t kQ8Block = 32;        // weights per block
constexpr int64_t kQ8BlockBytes = 34;   // f16 scale + 32 int8

// ---------------------------------------------------------------- entry points (q8.cc)
// Which body runs the GEMM. Auto: the best the CPU has within active_isa() (AVX512-VNNI, AVX-512, AVX-VNNI, AVX2 or
// scalar); a named one is for tests and benches (q8_kernel_available says whether this CPU can run it).
enum class Q8Kernel : int { Auto = 0, Scalar = 1, Avx2 = 2, Avx2Vnni = 3, Avx512 = 4, Avx512Vnni = 5 };
const char* q8_kernel_name(Q8Kernel k);
bool q8_kernel_from_name(const std::string& name, Q8Kernel* out);
bool q8_kernel_available(Q8Kernel k);  // Auto: always
Q8Kernel q8_auto_kernel();             // what Auto picks now

// Weights src [rows, k] (f32, f16 or bf16; k a multiple of 32) -> dst [rows, k/32] Q8_0 blocks. Per block:
// amax = max |v|; d = the smallest f16 >= amax / 127 (rounded up, not to nearest, so every |v| / d <= 127 and the
// round trip is within half a step: |v - q * d| <= d / 2); q = round-to-nearest-even(v / d) (0 when amax == 0).
// Returns the number of blocks that cannot be represented (a NaN or infinity, or amax / 127 above the largest f16,
// 65504); those blocks are written with d = NaN and q = 0. Rows are split over global_pool() (same bytes any way).
int64_t q8_quantize(const void* src, DType dtype, int64_t rows, int64_t k, uint8_t* dst);
// src [rows, k/32] blocks -> dst f32 [rows, k]: q * d (exact in f32).
void q8_dequantize(const uint8_t* src, int64_t rows, int64_t k, float* dst);

// y [m, n] = x [m, k] · Wᵀ (+ bias [n]) with W [n, k] as Q8_0 blocks (k a multiple of 32), the activations
// quantized as above. The reference sums the exact block products dw·dx·isum in double and rounds once; q8_gemm
// runs the canonical f32 arithmetic above on every fast path (same bits for any kernel and thread count).
void q8_gemm_ref(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, const float* bias, float* y);
void q8_gemm(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, const float* bias, float* y,
             Q8Kernel kernel = Q8Kernel::Auto);

// ---------------------------------------------------------------- per-ISA bodies
// One call's operands after activation quantization: xq [m, nb, 32] int8, xd [m, nb] f32, xsum [m, nb] (the sum
// of each activation block's 32 qx, for the VNNI bodies only, null otherwise: they feed w + 128 as the unsigned
// operand and take 128 * xsum back off), w [n, nb] blocks, y [m, n] (row stride n), bias [n] or null.
struct Q8GemmArgs {
  int64_t m = 0, n = 0, nb = 0;
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  const int32_t* xsum = nullptr;
  const uint8_t* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
};

// The W bytes of the piece after the current one: rows x bytes at stride row_bytes. Prefetched into L2 by the first
// row tile, a share of the rows per block, so DRAM streams while the tiles compute: with the packs alone reading W,
// a piece's misses came in one burst and the tiles left memory idle (m = 16 ran at half the GEMV's bandwidth).
struct PieceFetch {
  const uint8_t* first = nullptr;
  int64_t rows = 0, row_bytes = 0, bytes = 0;
  void step(int64_t i, int64_t steps) const {
    const int64_t j0 = i * rows / steps, j1 = (i + 1) * rows / steps;
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(first + j * row_bytes + o, 0, 2);
  }
};

// Every row of y for the output columns [c0, c1).
void q8_gemm_cols_scalar(const Q8GemmArgs& a, int64_t c0, int64_t c1);
void q8_gemm_cols_avx2(const Q8GemmArgs& a, int64_t c0, int64_t c1);
void q8_gemm_cols_avx2_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1);   // AVX-VNNI (VEX vpdpbusd)
void q8_gemm_cols_avx512(const Q8GemmArgs& a, int64_t c0, int64_t c1);
void q8_gemm_cols_avx512_vnni(const Q8GemmArgs& a, int64_t c0, int64_t c1); // AVX512-VNNI (+VL)

// Activation quantization of rows [r0, r1) of x [m, k] (k = nb * 32) into xq / xd as described above.
void q8_quantize_act_scalar(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd);
void q8_quantize_act_avx2(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd);
void q8_quantize_act_avx512(const float* x, int64_t nb, int64_t r0, int64_t r1, int8_t* xq, float* xd);

}  // namespace tessera::cpu

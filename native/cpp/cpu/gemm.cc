// GEMM: the double-accumulating reference, the dispatcher (orientation, blocking, task split) and the scalar
// path. The plan and the per-ISA bodies are described in gemm_simd.h.
#include <algorithm>
#include <cstring>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "gemm_simd.h"
#include "kernels.h"

namespace tessera::cpu {

namespace {

using gemm_detail::gemm_bf16_panel_offset;
using gemm_detail::gemm_bf16_panel_width;
using gemm_detail::gemm_ceil_div;
using gemm_detail::gemm_panel_stride;
using gemm_detail::gemm_prepacked_floats;
using gemm_detail::gemm_round_up;
using gemm_detail::GemmScratch;

inline float load_elem(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

inline const void* advance(const void* base, DType dt, int64_t elems) {
  return static_cast<const char*>(base) + elems * static_cast<int64_t>(dtype_size(dt));
}

// Blocking targets (tuned on Zen 4). k is reduced in blocks of about kKc (kKcTransposed when C is stored
// transposed, whose updates cost more); tasks cover Y in blocks of at most kQBlock columns and X in blocks of
// at most kPBlock rows, split until there are about kTargetTasks so that two or more threads stay balanced.
// Plans whose Y block is at most kXOuterMaxYBytes walk X tiles outermost. None of this depends on the
// thread count.
constexpr int64_t kKc = 512;
constexpr int64_t kKcTransposed = 4096;
constexpr int64_t kQBlock = 256;
constexpr int64_t kPBlock = 512;
constexpr int64_t kTargetTasks = 32;
constexpr int64_t kXOuterMaxYBytes = int64_t(2) << 20;
static_assert(kKc <= kGemmKcMax && kKcTransposed <= kGemmKcMax, "k block exceeds the packed X tile");
// Prepacked op(A)^T is built in chunks of columns of at most this many floats (32 MB).
constexpr int64_t kMaxPrepackFloats = int64_t(8) << 20;

// ---------------------------------------------------------------- scalar path

struct ScalarKern {
  static constexpr int kMr = 4;
  static constexpr int kNr = 8;
  static constexpr int kLanes = 8;
  static constexpr bool kDirectBf16 = false;
  static constexpr bool kPackInMicro = false;

  static void pack_x(const GemmPlan& plan, int64_t p, int rows, int64_t k0, int64_t kc, float* xt) {
    for (int r = 0; r < rows; ++r) {
      float* dst = xt + r * kGemmXStride;
      for (int64_t kk = 0; kk < kc; ++kk) {
        const int64_t idx = plan.x_trans ? (k0 + kk) * plan.ldx + p + r : (p + r) * plan.ldx + k0 + kk;
        dst[kk] = load_elem(plan.x, plan.x_dtype, idx);
      }
    }
  }

  static void pack_y(const GemmPlan& plan, int64_t k0, int64_t kc, int64_t q, int cols, float* dst, int64_t stride) {
    for (int64_t kk = 0; kk < kc; ++kk) {
      for (int64_t j = 0; j < stride; ++j)
        dst[kk * stride + j] = j < cols ? load_elem(plan.y, plan.y_dtype, (k0 + kk) * plan.ldy + q + j) : 0.0f;
    }
  }

  static void micro(int rows, int cols, int64_t kc, const void* x, int64_t xs, DType, const float* y, int64_t ys,
                    const GemmPlan& plan, int64_t p, int64_t q, bool first) {
    const float* xf = static_cast<const float*>(x);  // always f32 here: kDirectBf16 is false
    float acc[kMr][kNr] = {};
    for (int64_t kk = 0; kk < kc; ++kk) {
      const float* yr = y + kk * ys;
      for (int r = 0; r < rows; ++r) {
        const float xe = xf[r * xs + kk];
        for (int j = 0; j < kNr; ++j) acc[r][j] += xe * yr[j];
      }
    }
    gemm_detail::gemm_store_tile_scalar(&acc[0][0], kNr, rows, cols, plan, p, q, first);
  }
};

constexpr GemmShape kScalarShape{ScalarKern::kMr, ScalarKern::kNr, ScalarKern::kLanes};

void prepack_at_scalar(const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst) {
  for (int64_t j = 0; j * kScalarShape.nr < m; ++j) {
    const int64_t q0 = j * kScalarShape.nr;
    const int64_t width = std::min<int64_t>(kScalarShape.nr, m - q0);
    const int64_t stride = gemm_panel_stride(m, j, kScalarShape);
    float* panel = dst + q0 * k;
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t i = 0; i < stride; ++i)
        panel[kk * stride + i] = i < width ? (trans_a ? a[kk * lda + q0 + i] : a[(q0 + i) * lda + kk]) : 0.0f;
    }
  }
}

void dot_task_scalar(const GemmDotPlan& pl, int64_t task) {
  const int64_t j0 = task * pl.rows_per_task, j1 = std::min(pl.n, j0 + pl.rows_per_task);
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t r = 0; r < pl.m; ++r) {
      const float* a = pl.a + r * pl.lda;
      float s = 0.0f;
      for (int64_t p = 0; p < pl.k; ++p) s += a[p] * load_elem(pl.w, pl.w_dtype, j * pl.ldw + p);
      gemm_detail::gemm_store_scalar(pl.c + r * pl.ldc + j, s, pl.alpha, pl.beta, pl.bias ? pl.bias + j : nullptr, true);
    }
  }
}

// ---------------------------------------------------------------- dispatch

GemmShape shape_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return gemm_shape_avx512();
    case Isa::Avx2: return gemm_shape_avx2();
    default: return kScalarShape;
  }
}

void prepack_at(Isa isa, const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst) {
  switch (isa) {
    case Isa::Avx512: gemm_prepack_at_avx512(a, lda, trans_a, m, k, dst); break;
    case Isa::Avx2: gemm_prepack_at_avx2(a, lda, trans_a, m, k, dst); break;
    default: prepack_at_scalar(a, lda, trans_a, m, k, dst);
  }
}

// Fills plan.kc and the task grid from the problem shape and the ISA's tile shape only.
void choose_blocks(GemmPlan& plan, const GemmShape& s) {
  // C^T tiles update C with a transposing epilogue that touches one cache line per C row, so those plans
  // reduce much longer runs of k between updates.
  const int64_t k_target = plan.z_trans ? kKcTransposed : kKc;
  const int64_t k_blocks = gemm_ceil_div(plan.K, k_target);
  plan.kc = std::min(kGemmKcMax, gemm_round_up(gemm_ceil_div(plan.K, k_blocks), 8));

  const int64_t p_tiles = gemm_ceil_div(plan.P, s.mr);
  const int64_t q_panels = gemm_ceil_div(plan.Q, s.nr);
  int64_t q_blocks = gemm_ceil_div(q_panels, std::max<int64_t>(1, kQBlock / s.nr));
  if (!plan.y_packed) {
    // Each P block repacks its Y (B) block, while a Q block only repacks X tiles (rows of op(A), the small
    // side), so split Q first.
    q_blocks = std::max(q_blocks, std::min(q_panels, kTargetTasks));
  }
  int64_t p_blocks = std::max(gemm_ceil_div(plan.P, kPBlock), gemm_ceil_div(kTargetTasks, q_blocks));
  p_blocks = std::min(p_blocks, p_tiles);

  plan.p_block = gemm_ceil_div(p_tiles, p_blocks) * s.mr;
  plan.p_blocks = gemm_ceil_div(plan.P, plan.p_block);
  plan.q_block = gemm_ceil_div(q_panels, q_blocks) * s.nr;
  plan.q_blocks = gemm_ceil_div(plan.Q, plan.q_block);
  // Every X tile re-reads the task's whole Y block, which is cheap while that block stays in L2.
  plan.x_outer = plan.y_packed && plan.q_block * plan.K * int64_t(sizeof(float)) <= kXOuterMaxYBytes;
}

// Below this many flops a GEMM runs on the calling thread: waking the pool costs more than the work, e.g. a LoRA
// shrink of one row (2·4096·16 flops).
constexpr double kInlineFlops = 1 << 20;

bool run_inline(double m, double n, double k) { return 2.0 * m * n * k < kInlineFlops; }

// Packs and transposes of op(A) move each element once at a few GB/s, a hundred times slower per element than the
// flops run_inline counts: 512 x 768 took 100-150 us on one thread (Zen 4), while waking the pool costs about ten.
// So they run on the calling thread only below this many elements (a few microseconds of copying).
constexpr int64_t kInlinePackElements = int64_t(16) << 10;

bool pack_inline(int64_t rows, int64_t k) { return rows * k < kInlinePackElements; }

void run_plan(Isa isa, const GemmPlan& plan) {
  const bool small = run_inline(double(plan.P), double(plan.Q), double(plan.K));
  global_pool().parallel_for_or_inline(plan.p_blocks * plan.q_blocks, small, [&](int64_t t) {
    switch (isa) {
      case Isa::Avx512: gemm_task_avx512(plan, t); break;
      case Isa::Avx2: gemm_task_avx2(plan, t); break;
      default: gemm_detail::run_gemm_task<ScalarKern>(plan, t);
    }
  });
}

// k == 0: the product is empty, so C = beta * C + bias.
void gemm_no_k(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    float* c = g.c + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) {
      float v = g.beta != 0.0f ? g.beta * c[j] : 0.0f;
      if (g.bias) v += g.bias[j];
      c[j] = v;
    }
  }
}

// Rows of op(A) (m of them, k long) into dst with row stride ld.
void copy_op_a_rows(const GemmArgs& g, float* dst, int64_t ld) {
  for (int64_t i = 0; i < g.m; ++i) {
    float* row = dst + i * ld;
    if (g.trans_a) {
      for (int64_t p = 0; p < g.k; ++p) row[p] = g.a[p * g.lda + i];
    } else {
      std::memcpy(row, g.a + i * g.lda, static_cast<size_t>(g.k) * sizeof(float));
    }
  }
}

GemmScratch& pairs_rows_scratch() {
  static thread_local GemmScratch s;
  return s;
}

void gemm_dot(const GemmArgs& g, Isa isa) {
  GemmDotPlan d;
  d.m = g.m;
  d.n = g.n;
  d.k = g.k;
  d.a = g.a;
  d.lda = g.lda;
  d.w = g.b;
  d.ldw = g.ldb;
  d.w_dtype = g.b_dtype;
  d.c = g.c;
  d.ldc = g.ldc;
  d.alpha = g.alpha;
  d.beta = g.beta;
  d.bias = g.bias;
  // The kernels read all m rows of op(A) at the same k on every step, so copy them into rows padded to a
  // stride that is not a multiple of 4 KB: rows of a [m, 4096] f32 tensor would all map to one L1 set and,
  // with the weight rows, overflow its 8 ways. The copy also makes op(A) with trans_a row-contiguous.
  static thread_local GemmScratch a_scratch;
  if (isa == Isa::Avx512 && g.b_dtype == DType::BF16) {
    d.ld_pairs = gemm_dot_pairs_ld_avx512(g.k);
    float* pairs = a_scratch.get(g.m * d.ld_pairs);
    if (g.trans_a) {
      float* rows = pairs_rows_scratch().get(g.m * g.k);
      copy_op_a_rows(g, rows, g.k);
      gemm_dot_pair_a_avx512(rows, g.k, g.m, g.k, pairs);
    } else {
      gemm_dot_pair_a_avx512(g.a, g.lda, g.m, g.k, pairs);
    }
    d.a_pairs = pairs;
  } else {
    const int64_t ld = gemm_round_up(g.k, 16) + 16;
    float* rows = a_scratch.get(g.m * ld);
    copy_op_a_rows(g, rows, ld);
    d.a = rows;
    d.lda = ld;
  }
  // About 64 tasks of at least one weight tile (kGemmDotTileRows rows) each: fine-grained enough to balance,
  // coarse enough that a task streams a few hundred KB of weights. Whole tiles, so that no task ends in a
  // partial group of weight rows.
  d.rows_per_task = gemm_round_up(std::max<int64_t>(kGemmDotTileRows, gemm_ceil_div(g.n, 64)), kGemmDotTileRows);
  const int64_t tasks = gemm_ceil_div(g.n, d.rows_per_task);
  global_pool().parallel_for_or_inline(tasks, run_inline(double(g.m), double(g.n), double(g.k)), [&](int64_t t) {
    switch (isa) {
      case Isa::Avx512: gemm_dot_task_avx512(d, t); break;
      case Isa::Avx2: gemm_dot_task_avx2(d, t); break;
      default: dot_task_scalar(d, t);
    }
  });
  a_scratch.trim(int64_t(1) << 20);
  pairs_rows_scratch().trim(int64_t(1) << 20);
}

// Rows of op(A) up to which a transposed-B GEMM takes the decode path. Past 8 rows the packed tiles win on both
// SIMD ISAs: AVX2's register blocks (4 x 3) need more loads per FMA than its 6 x 16 tiles (Zen, one thread: 16 rows
// 23 vs 28 ms, 32 rows 40 vs 47 ms over the mini decoder's weights), and on Zen 5, whose two 512-bit FMA pipes make
// a GEMM compute-bound from a few rows, the 8 x 48 tiles beat AVX-512's dot blocks from 9 rows up (2 threads, m =
// 32: 368 vs 244 GFLOP/s at 4096 x 4096, 412 vs 276 at 768 x 3072; bf16 weights 447 vs 331). The scalar path keeps
// every decode batch.
int64_t dot_max_rows(Isa isa) { return isa == Isa::Scalar ? kGemmDotMaxRows : 8; }

// Columns of C from which a GEMM with trans_a (and B not transposed) first transposes op(A) into rows. Otherwise
// every X tile of op(A) is gathered column by column (one cache line per k for a few floats), again for every
// block of C's columns: dW += dyᵀ x of a training backward ran at 25 GFLOP/s where the same GEMM on rows ran at
// 100 (AVX2, Zen, [512, 2048] x [2048, 512]). The copy costs m·k moves against 2·m·n·k flops.
constexpr int64_t kTransposeAMinCols = 64;

// dst [m, k] (row stride k) = Aᵀ for A stored [k, m] with row stride lda, in 32 x 32 blocks (each block's reads
// and writes stay in L1), rows of dst spread over the pool.
void transpose_op_a(const float* a, int64_t lda, int64_t m, int64_t k, float* dst) {
  constexpr int64_t B = 32;
  const int64_t row_blocks = gemm_ceil_div(m, B);
  global_pool().parallel_for_or_inline(row_blocks, pack_inline(m, k), [&](int64_t t) {
    const int64_t i0 = t * B, i1 = std::min(m, i0 + B);
    for (int64_t p0 = 0; p0 < k; p0 += B) {
      const int64_t p1 = std::min(k, p0 + B);
      for (int64_t i = i0; i < i1; ++i) {
        float* row = dst + i * k;
        for (int64_t p = p0; p < p1; ++p) row[p] = a[p * lda + i];
      }
    }
  });
}

// prepack_at over the pool: panels of op(A)^T spread over tasks (a large m made the single-threaded pack a fifth
// of a [2048, 512] x [512, 512] GEMM on two threads).
void prepack_at_parallel(Isa isa, const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst, const GemmShape& s) {
  const int64_t panels = gemm_ceil_div(m, s.nr);
  const int64_t per_task = std::max<int64_t>(1, gemm_ceil_div(panels, 32));
  const int64_t tasks = gemm_ceil_div(panels, per_task);
  global_pool().parallel_for_or_inline(tasks, pack_inline(m, k), [&](int64_t t) {
    const int64_t j0 = t * per_task, j1 = std::min(panels, j0 + per_task);
    const int64_t q0 = j0 * s.nr, cols = std::min(m, j1 * s.nr) - q0;
    prepack_at(isa, trans_a ? a + q0 : a + q0 * lda, lda, trans_a, cols, k, dst + q0 * k);
  });
}

void gemm_packed(const GemmArgs& g_in, Isa isa) {
  const GemmShape s = shape_for(isa);
  GemmArgs g = g_in;
  static thread_local GemmScratch op_a_scratch;
  if (g.trans_a && !g.trans_b && g.n >= kTransposeAMinCols) {
    float* rows = op_a_scratch.get(g.m * g.k);
    transpose_op_a(g.a, g.lda, g.m, g.k, rows);
    g.a = rows;
    g.lda = g.k;
    g.trans_a = false;
  }
  GemmPlan plan;
  plan.K = g.k;
  plan.alpha = g.alpha;
  plan.beta = g.beta;
  plan.bias = g.bias;
  plan.ldc = g.ldc;
  if (!g.trans_b) {
    // Z = C: X = op(A) rows, Y = B rows of n columns.
    plan.P = g.m;
    plan.Q = g.n;
    plan.x = g.a;
    plan.ldx = g.lda;
    plan.x_trans = g.trans_a;
    plan.y = g.b;
    plan.ldy = g.ldb;
    plan.y_dtype = g.b_dtype;
    plan.c = g.c;
    choose_blocks(plan, s);
    run_plan(isa, plan);
    op_a_scratch.trim(int64_t(4) << 20);
    return;
  }
  // Z = C^T: X = W [n, k] rows, Y = op(A)^T prepacked, in chunks of rows of op(A) when it is very large.
  plan.P = g.n;
  plan.x = g.b;
  plan.ldx = g.ldb;
  plan.x_dtype = g.b_dtype;
  plan.z_trans = true;
  // Every row of op(A) runs in vector lanes, a ragged last vector included: an output's sum is then the same
  // FMA chain over k whatever m is and wherever its row falls, so a row's result does not depend on its batch mates
  // on this path (a dot-product tail for the last m % 16 rows was faster but broke that).
  static thread_local GemmScratch at_scratch;
  const int64_t chunk = std::max<int64_t>(s.nr, kMaxPrepackFloats / g.k / s.nr * s.nr);
  for (int64_t q0 = 0; q0 < g.m; q0 += chunk) {
    const int64_t Q = std::min(chunk, g.m - q0);
    float* packed = at_scratch.get(gemm_prepacked_floats(Q, g.k, s));
    prepack_at_parallel(isa, g.trans_a ? g.a + q0 : g.a + q0 * g.lda, g.lda, g.trans_a, Q, g.k, packed, s);
    plan.Q = Q;
    plan.y_packed = packed;
    plan.c = g.c + q0 * g.ldc;
    choose_blocks(plan, s);
    run_plan(isa, plan);
  }
  at_scratch.trim(int64_t(4) << 20);
  op_a_scratch.trim(int64_t(4) << 20);
}

// The f32-arithmetic paths (f32, f16 or bf16 weights widened to f32): decode dot products or packed tiles.
void gemm_float(const GemmArgs& g, Isa isa) {
  if (g.trans_b && g.m <= dot_max_rows(isa)) gemm_dot(g, isa);
  else gemm_packed(g, isa);
}

// ---------------------------------------------------------------- bf16 compute

// Rows of op(A) per packed chunk of the bf16 path (a multiple of its panel width; 32 MB of pair words at k = 4096).
constexpr int64_t kBf16ChunkWords = int64_t(8) << 20;
// Panels of op(A) per task's block of columns (4 x 48 rows): a task's tiles stream them from L3 along k.
constexpr int64_t kBf16QBlockPanels = 4;

// Up to this many rows, bf16 compute takes the rounded decode path: its weight vectors stream at memory speed,
// while the VDPBF16PS tiles broadcast every weight pair on its own and ran 2x slower at one row (Zen 5, 4096 x
// 4096: 1.41 vs 0.74 ms); from 8 rows up they are as fast or faster (m = 32: 1.34 vs 3.29 ms).
constexpr int64_t kBf16DotMaxRows = 8;

// The tile kernels take bf16 weights [n, k] with trans_b, above the decode sizes; other shapes run rounded.
bool bf16_tile_shape(const GemmArgs& g, Isa isa) {
  return isa == Isa::Avx512 && g.trans_b && g.b_dtype == DType::BF16 && g.m > kBf16DotMaxRows;
}

bool amx_bf16_usable() { return cpu_features().amx_bf16 && amx_ready(); }

Bf16Kernel resolve_bf16_kernel(const GemmArgs& g, Isa isa) {
  if (!bf16_tile_shape(g, isa)) return Bf16Kernel::Rounded;
  const Bf16Kernel k = g.bf16_kernel == Bf16Kernel::Auto ? bf16_auto_kernel() : g.bf16_kernel;
  return bf16_kernel_available(k) ? k : Bf16Kernel::Rounded;
}

// The tile kernels (VDPBF16PS or AMX) over bf16 weights (GemmBf16Plan in gemm_simd.h) for every m above
// kBf16DotMaxRows, so a row's result does not depend on how many rows share the call, as long as there are more
// than kBf16DotMaxRows. `p_unit`: the weight rows of the kernel's tile (task blocks are multiples of it).
void gemm_bf16_tiles(const GemmArgs& g, void (*task_fn)(const GemmBf16Plan&, int64_t), int64_t p_unit) {
  GemmBf16Plan pl;
  pl.n = g.n;
  pl.k = g.k;
  pl.pairs = (g.k + 1) / 2;
  pl.kc_pairs = gemm_ceil_div(pl.pairs, gemm_ceil_div(pl.pairs, kBf16KcMaxPairs));
  pl.w = static_cast<const uint16_t*>(g.b);
  pl.ldw = g.ldb;
  pl.out.ldc = g.ldc;
  pl.out.z_trans = true;
  pl.out.alpha = g.alpha;
  pl.out.beta = g.beta;
  pl.out.bias = g.bias;
  static thread_local GemmScratch y_scratch;
  const int64_t chunk = std::max<int64_t>(kBf16Nr, kBf16ChunkWords / pl.pairs / kBf16Nr * kBf16Nr);
  for (int64_t q0 = 0; q0 < g.m; q0 += chunk) {
    const int64_t Q = std::min(chunk, g.m - q0);
    const int64_t panels = gemm_ceil_div(Q, kBf16Nr);
    const int64_t words = gemm_bf16_panel_offset(panels - 1, pl.pairs) + gemm_bf16_panel_width(Q, panels - 1) * pl.pairs;
    uint32_t* y = reinterpret_cast<uint32_t*>(y_scratch.get(words));
    const float* a = g.trans_a ? g.a + q0 : g.a + q0 * g.lda;
    global_pool().parallel_for_or_inline(panels, pack_inline(Q, g.k), [&](int64_t j) {
      const int64_t rows = std::min<int64_t>(kBf16Nr, Q - j * kBf16Nr);
      const float* aj = g.trans_a ? a + j * kBf16Nr : a + j * kBf16Nr * g.lda;
      gemm_bf16_pack_avx512(aj, g.lda, g.trans_a, rows, g.k, y + gemm_bf16_panel_offset(j, pl.pairs));
    });
    pl.m = Q;
    pl.y = y;
    pl.out.c = g.c + q0 * g.ldc;
    pl.q_blocks = gemm_ceil_div(panels, kBf16QBlockPanels);
    pl.q_block = gemm_ceil_div(panels, pl.q_blocks) * kBf16Nr;
    pl.q_blocks = gemm_ceil_div(Q, pl.q_block);
    const int64_t p_tiles = gemm_ceil_div(g.n, p_unit);
    const int64_t p_blocks = std::min(p_tiles, std::max(gemm_ceil_div(g.n, kPBlock), gemm_ceil_div(kTargetTasks, pl.q_blocks)));
    pl.p_block = gemm_ceil_div(p_tiles, p_blocks) * p_unit;
    pl.p_blocks = gemm_ceil_div(g.n, pl.p_block);
    global_pool().parallel_for_or_inline(pl.p_blocks * pl.q_blocks, run_inline(double(Q), double(g.n), double(g.k)),
                                         [&](int64_t t) { task_fn(pl, t); });
  }
  y_scratch.trim(int64_t(4) << 20);
}

// dst[r * k + p] = bf16-rounded op(A) element (r, p), as f32.
void round_op_a_bf16(const GemmArgs& g, float* dst) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t p = 0; p < g.k; ++p)
      dst[i * g.k + p] = bf16_to_f32(f32_to_bf16(g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p]));
}

// Without VDPBF16PS (or for other operand layouts): round the operands to bf16 values held as f32, then run the
// f32 path. Products of two bf16 values are exact in f32, so only the order of the f32 sums differs.
void gemm_bf16_rounded(const GemmArgs& g) {
  static thread_local GemmScratch a_scratch, b_scratch;
  GemmArgs r = g;
  r.bf16_compute = false;
  float* a = a_scratch.get(g.m * g.k);
  round_op_a_bf16(g, a);
  r.a = a;
  r.lda = g.k;
  r.trans_a = false;
  if (g.b_dtype != DType::BF16) {
    const int64_t rows = g.trans_b ? g.n : g.k, cols = g.trans_b ? g.k : g.n;
    float* b = b_scratch.get(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) b[i * cols + j] = bf16_to_f32(f32_to_bf16(load_elem(g.b, g.b_dtype, i * g.ldb + j)));
    r.b = b;
    r.b_dtype = DType::F32;
    r.ldb = cols;
  }
  gemm_float(r, active_isa());
  a_scratch.trim(int64_t(4) << 20);
  b_scratch.trim(int64_t(4) << 20);
}

}  // namespace

// ---------------------------------------------------------------- reference

void gemm_ref(const GemmArgs& g) {
  // bf16_compute: the operands rounded to bf16 first, then the same double sum.
  auto round = [&](float v) { return g.bf16_compute ? bf16_to_f32(f32_to_bf16(v)) : v; };
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double a = round(g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p]);
        const double b = round(load_elem(g.b, g.b_dtype, g.trans_b ? j * g.ldb + p : p * g.ldb + j));
        s += a * b;
      }
      float* c = g.c + i * g.ldc + j;
      double v = g.k > 0 ? static_cast<double>(g.alpha) * s : 0.0;
      if (g.beta != 0.0f) v += static_cast<double>(g.beta) * static_cast<double>(*c);
      if (g.bias) v += g.bias[j];
      *c = static_cast<float>(v);
    }
  }
}

void gemm_batched_ref(const GemmArgs& args, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  for (int64_t e = 0; e < batch; ++e) {
    GemmArgs g = args;
    g.a = args.a + e * stride_a;
    g.b = advance(args.b, args.b_dtype, e * stride_b);
    g.c = args.c + e * stride_c;
    gemm_ref(g);
  }
}

// ---------------------------------------------------------------- bf16-compute kernels by name

const char* bf16_kernel_name(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::Auto: return "auto";
    case Bf16Kernel::Rounded: return "rounded";
    case Bf16Kernel::Avx512Bf16: return "avx512bf16";
    case Bf16Kernel::Amx: return "amx";
    case Bf16Kernel::AmxEmulated: return "amx-emulated";
  }
  return "?";
}

bool bf16_kernel_from_name(const char* name, Bf16Kernel* out) {
  for (Bf16Kernel k : {Bf16Kernel::Auto, Bf16Kernel::Rounded, Bf16Kernel::Avx512Bf16, Bf16Kernel::Amx, Bf16Kernel::AmxEmulated}) {
    if (std::strcmp(name, bf16_kernel_name(k)) == 0) {
      *out = k;
      return true;
    }
  }
  return false;
}

// A named kernel runs when the CPU has its ISA (best_supported_isa, not the active cap: tests name each one).
bool bf16_kernel_available(Bf16Kernel k) {
  const bool avx512 = best_supported_isa() >= Isa::Avx512;
  switch (k) {
    case Bf16Kernel::Auto:
    case Bf16Kernel::Rounded: return true;
    case Bf16Kernel::Avx512Bf16: return avx512 && cpu_features().avx512bf16;
    case Bf16Kernel::Amx: return avx512 && amx_bf16_usable();
    case Bf16Kernel::AmxEmulated: return avx512;
  }
  return false;
}

// AMX tiles where the process may use them, else VDPBF16PS, else the rounded f32 path.
Bf16Kernel bf16_auto_kernel() {
  if (active_isa() != Isa::Avx512) return Bf16Kernel::Rounded;
  if (amx_bf16_usable()) return Bf16Kernel::Amx;
  if (cpu_features().avx512bf16) return Bf16Kernel::Avx512Bf16;
  return Bf16Kernel::Rounded;
}

// ---------------------------------------------------------------- dispatch

void gemm(const GemmArgs& args) {
  if (args.m <= 0 || args.n <= 0) return;
  if (args.k <= 0) {
    gemm_no_k(args);
    return;
  }
  const Isa isa = active_isa();
  if (args.bf16_compute) {
    switch (resolve_bf16_kernel(args, isa)) {
      case Bf16Kernel::Amx: gemm_bf16_tiles(args, gemm_bf16_task_amx, 32); break;
      case Bf16Kernel::AmxEmulated: gemm_bf16_tiles(args, gemm_bf16_task_amx_emulated, 32); break;
      case Bf16Kernel::Avx512Bf16: gemm_bf16_tiles(args, gemm_bf16_task_avx512, 8); break;
      default: gemm_bf16_rounded(args);
    }
    return;
  }
  gemm_float(args, isa);
}

void gemm_batched(const GemmArgs& args, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  if (batch <= 0 || args.m <= 0 || args.n <= 0) return;
  // A shared B with entries of A and C laid end to end row by row is one GEMM over batch * m rows: the weights
  // are then streamed once instead of once per entry.
  if (stride_b == 0 && !args.trans_a && stride_a == args.m * args.lda && stride_c == args.m * args.ldc) {
    GemmArgs g = args;
    g.m = args.m * batch;
    gemm(g);
    return;
  }
  auto entry = [&](int64_t e) {
    GemmArgs g = args;
    g.a = args.a + e * stride_a;
    g.b = advance(args.b, args.b_dtype, e * stride_b);
    g.c = args.c + e * stride_c;
    gemm(g);
  };
  // Small entries (attention-sized) run one per task; a large entry is split by gemm itself. Either way each
  // entry's result is the same, since gemm's own split never depends on the thread count (nested calls run
  // their tasks inline).
  const double flops = 2.0 * double(args.m) * double(args.n) * double(args.k);
  if (batch > 1 && flops < 4e6) global_pool().parallel_for(batch, entry);
  else for (int64_t e = 0; e < batch; ++e) entry(e);
}

}  // namespace tessera::cpu

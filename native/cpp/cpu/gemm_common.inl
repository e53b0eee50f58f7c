// GEMM code shared by gemm_avx2.cc and gemm_avx512.cc: the parts that differ only in the ISA primitives they
// call. Included inside each file's anonymous namespace, so every ISA compiles (and inlines) its own copy
// with its own target flags. The including file defines first:
//   kMr, kNr, kLanes                              its micro-kernel's tile shape
//   convert_row<DT>(src, n, dst)                  dst[0..n) = float(src[0..n))
//   convert_row_padded<DT>(src, n, dst, stride)   the same, then zeros up to stride (a multiple of kLanes)
//   kDotRows                                      rows of op(A) per decode register block (1 to 8)
// and defines after it (declared here):
//   dot_rows<M, DT>(pl, j0, j1)                   decode: weight rows [j0, j1) against all M <= kDotRows rows
//                                                 of op(A)
//   pack_panel_transposed(a, lda, q0, width, k, stride, panel)
//                                                 prepack: panel[kk * stride + i] = A[q0 + i, kk], zero padded

using gemm_detail::gemm_panel_stride;
using gemm_detail::gemm_round_up;
using gemm_detail::gemm_store_scalar;
using gemm_detail::gemm_store_tile_scalar;

constexpr int64_t XS = kGemmXStride;

template <DType DT>
inline const void* offset_elems(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) return static_cast<const float*>(base) + i;
  else return static_cast<const uint16_t*>(base) + i;
}

// The packing half of a Kern for gemm_detail::run_gemm_task; each ISA's Kern derives from it and adds its
// micro-kernels and feature flags.
struct KernPacking {
  static void pack_x(const GemmPlan& plan, int64_t p, int rows, int64_t k0, int64_t kc, float* xt) {
    if (plan.x_trans) {  // X(p, k) = x[k * ldx + p]: op(A) with trans_a, gathered column by column
      const float* x = static_cast<const float*>(plan.x);
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = x + (k0 + kk) * plan.ldx + p;
        for (int r = 0; r < rows; ++r) xt[r * XS + kk] = src[r];
      }
      return;
    }
    for (int r = 0; r < rows; ++r) {
      const int64_t off = (p + r) * plan.ldx + k0;
      switch (plan.x_dtype) {
        case DType::F16: convert_row<DType::F16>(offset_elems<DType::F16>(plan.x, off), kc, xt + r * XS); break;
        case DType::BF16: convert_row<DType::BF16>(offset_elems<DType::BF16>(plan.x, off), kc, xt + r * XS); break;
        default: convert_row<DType::F32>(offset_elems<DType::F32>(plan.x, off), kc, xt + r * XS);
      }
    }
  }

  static void pack_y(const GemmPlan& plan, int64_t k0, int64_t kc, int64_t q, int cols, float* dst, int64_t stride) {
    for (int64_t kk = 0; kk < kc; ++kk) {
      const int64_t off = (k0 + kk) * plan.ldy + q;
      float* row = dst + kk * stride;
      switch (plan.y_dtype) {
        case DType::F16: convert_row_padded<DType::F16>(offset_elems<DType::F16>(plan.y, off), cols, row, stride); break;
        case DType::BF16: convert_row_padded<DType::BF16>(offset_elems<DType::BF16>(plan.y, off), cols, row, stride); break;
        default: convert_row_padded<DType::F32>(offset_elems<DType::F32>(plan.y, off), cols, row, stride);
      }
    }
  }
};

// ---------------------------------------------------------------- prepacking op(A)^T into Y panels

void pack_panel_transposed(const float* a, int64_t lda, int64_t q0, int64_t width, int64_t k, int64_t stride, float* panel);

void prepack_at(const float* a, int64_t lda, bool trans_a, int64_t m, int64_t k, float* dst) {
  const GemmShape shape{kMr, kNr, kLanes};
  for (int64_t j = 0; j * kNr < m; ++j) {
    const int64_t q0 = j * kNr;
    const int64_t width = std::min<int64_t>(kNr, m - q0);
    const int64_t stride = gemm_panel_stride(m, j, shape);
    float* panel = dst + q0 * k;
    if (trans_a) {  // op(A)^T row kk is A's stored row kk
      for (int64_t kk = 0; kk < k; ++kk) convert_row_padded<DType::F32>(a + kk * lda + q0, width, panel + kk * stride, stride);
      continue;
    }
    pack_panel_transposed(a, lda, q0, width, k, stride, panel);  // op(A) = A [m, k]
  }
}

// ---------------------------------------------------------------- decode dispatch

// The including file defines kDotRows (the most rows of op(A) one register block holds, <= 8) and
// dot_rows<M, DT> for every M in [1, kDotRows].
template <int M, DType DT>
void dot_rows(const GemmDotPlan& pl, int64_t j0, int64_t j1);

template <DType DT>
void dot_rows_dt(const GemmDotPlan& pl, int64_t j0, int64_t j1) {
  static_assert(kDotRows >= 1 && kDotRows <= 8, "register blocks of 1 to 8 rows");
  switch (pl.m) {
    case 1: dot_rows<1, DT>(pl, j0, j1); break;
    case 2: if constexpr (kDotRows >= 2) dot_rows<2, DT>(pl, j0, j1); break;
    case 3: if constexpr (kDotRows >= 3) dot_rows<3, DT>(pl, j0, j1); break;
    case 4: if constexpr (kDotRows >= 4) dot_rows<4, DT>(pl, j0, j1); break;
    case 5: if constexpr (kDotRows >= 5) dot_rows<5, DT>(pl, j0, j1); break;
    case 6: if constexpr (kDotRows >= 6) dot_rows<6, DT>(pl, j0, j1); break;
    case 7: if constexpr (kDotRows >= 7) dot_rows<7, DT>(pl, j0, j1); break;
    case 8: if constexpr (kDotRows >= 8) dot_rows<8, DT>(pl, j0, j1); break;
    default: break;
  }
}

// Rows [r0, r0 + rows) of op(A) (and of C) as a plan of their own.
inline GemmDotPlan dot_row_chunk(const GemmDotPlan& pl, int64_t r0, int64_t rows) {
  GemmDotPlan sub = pl;
  sub.m = rows;
  sub.a = pl.a + r0 * pl.lda;
  if (pl.a_pairs) sub.a_pairs = pl.a_pairs + r0 * pl.ld_pairs;
  sub.c = pl.c + r0 * pl.ldc;
  return sub;
}

// Weight rows [j0, j1) against all m rows of op(A). Up to kDotRows rows are one register block. More rows
// (up to kGemmDotMaxRows) are split into blocks of kDotRows, and the weights are walked in tiles of
// kGemmDotTileRows rows: the first block reads a tile from memory, the others find it in cache, so each weight
// still streams from memory once per call. Every output element is the same dot product whatever the block,
// tile or task it falls in (lanes accumulate over k in one fixed order, then reduce in one fixed order), so a
// row's result does not depend on how many rows share the call.
template <DType DT>
void dot_range(const GemmDotPlan& pl, int64_t j0, int64_t j1) {
  if (pl.m <= kDotRows) {
    dot_rows_dt<DT>(pl, j0, j1);
    return;
  }
  for (int64_t jt = j0; jt < j1; jt += kGemmDotTileRows) {
    const int64_t je = std::min(j1, jt + kGemmDotTileRows);
    for (int64_t r0 = 0; r0 < pl.m; r0 += kDotRows) dot_rows_dt<DT>(dot_row_chunk(pl, r0, std::min<int64_t>(kDotRows, pl.m - r0)), jt, je);
  }
}

void dot_task(const GemmDotPlan& pl, int64_t task) {
  const int64_t j0 = task * pl.rows_per_task, j1 = std::min(pl.n, j0 + pl.rows_per_task);
  if (j0 >= j1) return;
  switch (pl.w_dtype) {
    case DType::F16: dot_range<DType::F16>(pl, j0, j1); break;
    case DType::BF16: dot_range<DType::BF16>(pl, j0, j1); break;
    default: dot_range<DType::F32>(pl, j0, j1);
  }
}

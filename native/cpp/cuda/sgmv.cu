// SGMV / BGMV (Punica's LoRA kernels), f32 with f32 accumulation; the group tables come from backend_ops_cuda.cc.
// The segment / group index is blockIdx.y (grid-stride past 65535 groups), as in Punica's schedule (paper §4):
//   expand  blockIdx.x = a tile of kExpandThreads output columns, blockIdx.z = a block of kExpandRows rows of the
//           group (grid-stride; the W tile is re-read per row block, from L2). Each thread owns one column of y for
//           its row block (v staged in shared memory):
//           acc = fmaf chain over k, then y = fmaf(scale, acc, y). No reduction across blocks.
//   shrink  split-K: blockIdx.x = a K-chunk of kSgmvChunk, blockIdx.z = a block of kShrinkRows rows of the group
//           (grid-stride), so one large segment (every row on one adapter) still spreads over the SMs instead of
//           walking its rows inside a few blocks. Warps take W rows k (the chunk of W[k] held in registers, 8 values
//           per lane) against the staged rows of x, a fixed-order warp sum per dot product, and write f32 partials
//           [chunk][row][k]. A second kernel sums each output's partials in chunk order and adds
//           the sum to y: a fixed order (deterministic), and no cooperative grid sync.
// Reference: one thread per output, accumulating in double (the CPU references' arithmetic).
#include <cstdint>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_common.cuh"

namespace tessera::gpu {

namespace {

constexpr int kShrinkThreads = 256;  // 8 warps
constexpr int kShrinkWarps = kShrinkThreads / 32;
constexpr int kShrinkRows = 8;  // x rows staged per step
constexpr int kPerLane = static_cast<int>(kSgmvChunk / 32);
static_assert(kSgmvChunk % 32 == 0, "a K-chunk is split evenly over a warp");

constexpr int kExpandThreads = 256;  // output columns per block
constexpr int kExpandRows = 8;       // rows per register block
constexpr int kExpandK = 64;         // ranks of v staged per step

constexpr int kReduceThreads = 256;
constexpr int kRefThreads = 128;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxStrideBlocks = 4096;

__device__ __forceinline__ int64_t group_row(const SgmvGpuGroup& g, const int32_t* row_ids, int64_t j) {
  return row_ids ? static_cast<int64_t>(row_ids[g.row_begin + j]) : g.row_begin + j;
}

// ---------------------------------------------------------------- shrink

__global__ void __launch_bounds__(kShrinkThreads)
sgmv_shrink_partials_kernel(const float* x, int64_t h, const SgmvGpuGroup* groups, int64_t n_groups, const int32_t* row_ids, float* partials) {
  __shared__ float xs[kShrinkRows][kSgmvChunk];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = blockIdx.x;
  const int64_t e0 = c * kSgmvChunk;
  const int len = static_cast<int>(h - e0 < kSgmvChunk ? h - e0 : kSgmvChunk);
  for (int64_t gi = blockIdx.y; gi < n_groups; gi += gridDim.y) {
    const SgmvGpuGroup g = groups[gi];
    float* part = partials + g.part_offset + c * g.rows * g.r;
    for (int64_t j0 = static_cast<int64_t>(blockIdx.z) * kShrinkRows; j0 < g.rows; j0 += static_cast<int64_t>(gridDim.z) * kShrinkRows) {
      const int nr = static_cast<int>(g.rows - j0 < kShrinkRows ? g.rows - j0 : kShrinkRows);
      __syncthreads();  // the previous step's reads of xs are done
      for (int i = threadIdx.x; i < nr * static_cast<int>(kSgmvChunk); i += blockDim.x) {
        const int rr = i / static_cast<int>(kSgmvChunk), e = i % static_cast<int>(kSgmvChunk);
        xs[rr][e] = e < len ? x[group_row(g, row_ids, j0 + rr) * h + e0 + e] : 0.0f;
      }
      __syncthreads();
      for (int64_t k = warp; k < g.r; k += kShrinkWarps) {
        const float* wk = g.w + k * h + e0;
        float w[kPerLane];
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int e = lane + 32 * i;
          w[i] = e < len ? wk[e] : 0.0f;
        }
        for (int rr = 0; rr < nr; ++rr) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) s = fmaf(xs[rr][lane + 32 * i], w[i], s);
          s = warp_sum(s);
          if (lane == 0) part[(j0 + rr) * g.r + k] = s;
        }
      }
    }
  }
}

// y[row, k] += ((p_0 + p_1) + p_2) + ... over the chunks, one thread per (row, k) of a group.
__global__ void sgmv_shrink_reduce_kernel(float* y, int64_t r_max, int64_t chunks, const SgmvGpuGroup* groups, int64_t n_groups,
                                          const int32_t* row_ids, const float* partials) {
  for (int64_t gi = blockIdx.y; gi < n_groups; gi += gridDim.y) {
    const SgmvGpuGroup g = groups[gi];
    const int64_t n = g.rows * g.r;
    for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float* p = partials + g.part_offset + t;
      float s = p[0];
      for (int64_t c = 1; c < chunks; ++c) s += p[c * n];
      y[group_row(g, row_ids, t / g.r) * r_max + t % g.r] += s;
    }
  }
}

__global__ void sgmv_shrink_ref_kernel(const float* x, float* y, int64_t h, int64_t r_max, const SgmvGpuGroup* groups, int64_t n_groups,
                                       const int32_t* row_ids) {
  for (int64_t gi = blockIdx.y; gi < n_groups; gi += gridDim.y) {
    const SgmvGpuGroup g = groups[gi];
    const int64_t n = g.rows * g.r;
    for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t row = group_row(g, row_ids, t / g.r), k = t % g.r;
      const float* xr = x + row * h;
      const float* wr = g.w + k * h;
      double acc = y[row * r_max + k];
      for (int64_t e = 0; e < h; ++e) acc += static_cast<double>(xr[e]) * static_cast<double>(wr[e]);
      y[row * r_max + k] = static_cast<float>(acc);
    }
  }
}

// ---------------------------------------------------------------- expand

__global__ void __launch_bounds__(kExpandThreads)
sgmv_expand_kernel(const float* v, float* y, int64_t h, int64_t r_max, const SgmvGpuGroup* groups, int64_t n_groups, const int32_t* row_ids) {
  __shared__ float vs[kExpandRows][kExpandK];
  __shared__ int64_t rows_s[kExpandRows];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kExpandThreads + threadIdx.x;
  const bool active = col < h;
  for (int64_t gi = blockIdx.y; gi < n_groups; gi += gridDim.y) {
    const SgmvGpuGroup g = groups[gi];
    for (int64_t j0 = static_cast<int64_t>(blockIdx.z) * kExpandRows; j0 < g.rows; j0 += static_cast<int64_t>(gridDim.z) * kExpandRows) {
      const int nr = static_cast<int>(g.rows - j0 < kExpandRows ? g.rows - j0 : kExpandRows);
      __syncthreads();  // every thread is done with the previous block's rows_s and vs
      if (threadIdx.x < nr) rows_s[threadIdx.x] = group_row(g, row_ids, j0 + threadIdx.x);
      float acc[kExpandRows];
#pragma unroll
      for (int i = 0; i < kExpandRows; ++i) acc[i] = 0.0f;
      for (int64_t k0 = 0; k0 < g.r; k0 += kExpandK) {
        const int nk = static_cast<int>(g.r - k0 < kExpandK ? g.r - k0 : kExpandK);
        __syncthreads();  // rows_s written; the previous k step's reads of vs are done
        for (int i = threadIdx.x; i < kExpandRows * kExpandK; i += blockDim.x) {
          const int rr = i / kExpandK, kk = i % kExpandK;
          vs[rr][kk] = rr < nr && kk < nk ? v[rows_s[rr] * r_max + k0 + kk] : 0.0f;
        }
        __syncthreads();
        if (active) {
          const float* w = g.w + k0 * h + col;
          for (int kk = 0; kk < nk; ++kk) {
            const float wv = w[kk * h];
#pragma unroll
            for (int i = 0; i < kExpandRows; ++i) acc[i] = fmaf(vs[i][kk], wv, acc[i]);
          }
        }
      }
      if (active) {
#pragma unroll
        for (int i = 0; i < kExpandRows; ++i) {
          if (i < nr) {
            float* yp = y + rows_s[i] * h + col;
            *yp = fmaf(g.scale, acc[i], *yp);
          }
        }
      }
    }
  }
}

__global__ void sgmv_expand_ref_kernel(const float* v, float* y, int64_t h, int64_t r_max, const SgmvGpuGroup* groups, int64_t n_groups,
                                       const int32_t* row_ids) {
  for (int64_t gi = blockIdx.y; gi < n_groups; gi += gridDim.y) {
    const SgmvGpuGroup g = groups[gi];
    const int64_t n = g.rows * h;
    for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t row = group_row(g, row_ids, t / h), c = t % h;
      const float* vr = v + row * r_max;
      double acc = 0.0;
      for (int64_t k = 0; k < g.r; ++k) acc += static_cast<double>(vr[k]) * static_cast<double>(g.w[k * h + c]);
      float* yp = y + row * h + c;
      *yp = static_cast<float>(static_cast<double>(*yp) + static_cast<double>(g.scale) * acc);
    }
  }
}

unsigned grid_y(int64_t n_groups) { return static_cast<unsigned>(n_groups < kMaxGridY ? n_groups : kMaxGridY); }

// Row blocks of the largest group (grid z; the kernels grid-stride past the cap). Capped so that groups x row blocks
// x column tiles stays a few waves: each row block re-reads its W tile.
unsigned grid_z(int64_t max_rows, int rows_per_block) {
  const int64_t blocks = (max_rows + rows_per_block - 1) / rows_per_block;
  return static_cast<unsigned>(blocks < 64 ? (blocks < 1 ? 1 : blocks) : 64);
}

unsigned stride_blocks(int64_t work, int threads) {
  int64_t b = (work + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < kMaxStrideBlocks ? b : kMaxStrideBlocks);
}

}  // namespace

void sgmv_shrink(const SgmvLaunch& l, bool reference) {
  if (l.n_groups == 0 || l.h == 0 || l.max_rows == 0 || l.max_r == 0) return;
  const unsigned gy = grid_y(l.n_groups);
  if (reference) {
    sgmv_shrink_ref_kernel<<<dim3(stride_blocks(l.max_rows * l.max_r, kRefThreads), gy), kRefThreads>>>(l.x, l.y, l.h, l.r_max, l.groups,
                                                                                                        l.n_groups, l.row_ids);
    check_launch("sgmv_shrink_ref_kernel");
    return;
  }
  const int64_t chunks = (l.h + kSgmvChunk - 1) / kSgmvChunk;
  if (chunks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "sgmvShrink: hIn is too large for one launch");
  sgmv_shrink_partials_kernel<<<dim3(static_cast<unsigned>(chunks), gy, grid_z(l.max_rows, kShrinkRows)), kShrinkThreads>>>(l.x, l.h, l.groups, l.n_groups, l.row_ids, l.partials);
  check_launch("sgmv_shrink_partials_kernel");
  sgmv_shrink_reduce_kernel<<<dim3(stride_blocks(l.max_rows * l.max_r, kReduceThreads), gy), kReduceThreads>>>(l.y, l.r_max, chunks, l.groups,
                                                                                                               l.n_groups, l.row_ids, l.partials);
  check_launch("sgmv_shrink_reduce_kernel");
}

void sgmv_expand(const SgmvLaunch& l, bool reference) {
  if (l.n_groups == 0 || l.h == 0 || l.max_rows == 0 || l.max_r == 0) return;
  const unsigned gy = grid_y(l.n_groups);
  if (reference) {
    sgmv_expand_ref_kernel<<<dim3(stride_blocks(l.max_rows * l.h, kRefThreads), gy), kRefThreads>>>(l.x, l.y, l.h, l.r_max, l.groups, l.n_groups,
                                                                                                     l.row_ids);
    check_launch("sgmv_expand_ref_kernel");
    return;
  }
  const int64_t tiles = (l.h + kExpandThreads - 1) / kExpandThreads;
  if (tiles > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "sgmvExpand: hOut is too large for one launch");
  sgmv_expand_kernel<<<dim3(static_cast<unsigned>(tiles), gy, grid_z(l.max_rows, kExpandRows)), kExpandThreads>>>(l.x, l.y, l.h, l.r_max, l.groups, l.n_groups, l.row_ids);
  check_launch("sgmv_expand_kernel");
}

}  // namespace tessera::gpu

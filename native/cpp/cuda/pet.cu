// PetS's PET operators on CUDA (f32): one kernel per op kind, launched per op on its stream, and the site's stream
// barriers (cuda_kernels.h describes the schedule). Ops arrive validated by binding/ops/bind_pet.cc; each kernel takes
// its PetOpArgs by value (no table upload per call). A logical row j of an op is sequence j / tokens, token j % tokens.
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_common.cuh"

namespace tessera::gpu {

namespace {

constexpr int kCsrThreads = 128;   // output columns per block
constexpr int kAdapterThreads = 256;
constexpr int kAdapterWarps = kAdapterThreads / 32;
constexpr int kRefThreads = 128;
constexpr int kLnThreads = 256;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxRowBlocks = 1 << 20;

__device__ __forceinline__ int64_t op_row(const PetRows& r, int64_t j) { return r.start + (j / r.tokens) * r.stride + j % r.tokens; }

__device__ __forceinline__ float act_f(Activation act, float x) {
  if (act == Activation::Relu) return fmaxf(x, 0.0f);
  if (act == Activation::GeluTanh) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
  }
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

__device__ __forceinline__ double act_d(Activation act, double x) {
  if (act == Activation::Relu) return fmax(x, 0.0);
  if (act == Activation::GeluTanh) return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
}

// ---------------------------------------------------------------- CSR

// blockIdx.x: a tile of output columns; blockIdx.y: blocks of kPetCudaCsrRows rows (grid-stride). A thread reads its
// output's nonzeros once per row block and runs one fmaf chain per row.
__global__ void __launch_bounds__(kCsrThreads) pet_csr_kernel(PetOpArgs op, int64_t count) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kCsrThreads + threadIdx.x;
  if (o >= op.out) return;
  // Clamped reads (as the CPU kernels): the binding validates a matrix on its first use only, so one written since
  // gives wrong numbers, never an out-of-bounds access.
  const int64_t e0 = min(max(static_cast<int64_t>(op.indptr[o]), int64_t(0)), op.nnz);
  const int64_t e1 = op.in == 0 ? e0 : min(max(static_cast<int64_t>(op.indptr[o + 1]), e0), op.nnz);
  const unsigned col_max = static_cast<unsigned>(op.in - 1);
  for (int64_t jb = static_cast<int64_t>(blockIdx.y) * kPetCudaCsrRows; jb < count; jb += static_cast<int64_t>(gridDim.y) * kPetCudaCsrRows) {
    const int nr = static_cast<int>(count - jb < kPetCudaCsrRows ? count - jb : kPetCudaCsrRows);
    const float* xr[kPetCudaCsrRows];
    float acc[kPetCudaCsrRows];
#pragma unroll
    for (int i = 0; i < kPetCudaCsrRows; ++i) {
      xr[i] = op.x + op_row(op.rows, jb + (i < nr ? i : 0)) * op.in;
      acc[i] = 0.0f;
    }
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t col = min(static_cast<unsigned>(op.indices[e]), col_max);
      const float v = op.values[e];
#pragma unroll
      for (int i = 0; i < kPetCudaCsrRows; ++i)
        if (i < nr) acc[i] = fmaf(v, xr[i][col], acc[i]);
    }
#pragma unroll
    for (int i = 0; i < kPetCudaCsrRows; ++i) {
      if (i < nr) {
        float* yp = op.y + op_row(op.rows, jb + i) * op.out + o;
        *yp = fmaf(op.scale, acc[i], *yp);
      }
    }
  }
}

__global__ void pet_csr_ref_kernel(PetOpArgs op, int64_t count) {
  const int64_t n = count * op.out;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = op_row(op.rows, t / op.out), o = t % op.out;
    const float* xr = op.x + row * op.in;
    double acc = 0;
    for (int32_t e = op.indptr[o]; e < op.indptr[o + 1]; ++e) acc += static_cast<double>(op.values[e]) * xr[op.indices[e]];
    float* yp = op.y + row * op.out + o;
    *yp = static_cast<float>(*yp + static_cast<double>(op.scale) * acc);
  }
}

// ---------------------------------------------------------------- bias (one add: the reference's result too)

__global__ void pet_bias_kernel(PetOpArgs op, int64_t count) {
  const int64_t n = count * op.out;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += static_cast<int64_t>(gridDim.x) * blockDim.x)
    op.y[op_row(op.rows, t / op.out) * op.out + t % op.out] += op.bias[t % op.out];
}

// ---------------------------------------------------------------- adapter

// One block per row (grid-stride). Phase 1: warp w computes h[k] for k = w, w + warps, ...: a lane-strided fmaf chain
// over d, a fixed-order warp sum, then act(. + down_bias). Phase 2 (after every read of the row): the same for each
// output column c against up[c], y[c] = y + (dot + up_bias[c]).
__global__ void __launch_bounds__(kAdapterThreads) pet_adapter_kernel(PetOpArgs op, int64_t count) {
  extern __shared__ float h[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = op.out, m = op.m;
  for (int64_t j = blockIdx.x; j < count; j += gridDim.x) {
    float* yr = op.y + op_row(op.rows, j) * d;
    for (int64_t k = warp; k < m; k += kAdapterWarps) {
      const float* w = op.down + k * d;
      float s = 0.0f;
      for (int64_t c = lane; c < d; c += 32) s = fmaf(yr[c], w[c], s);
      s = warp_sum(s);
      if (lane == 0) h[k] = act_f(op.act, s + op.down_bias[k]);
    }
    __syncthreads();
    for (int64_t c = warp; c < d; c += kAdapterWarps) {
      const float* w = op.up + c * m;
      float s = 0.0f;
      for (int64_t k = lane; k < m; k += 32) s = fmaf(h[k], w[k], s);
      s = warp_sum(s);
      if (lane == 0) yr[c] = yr[c] + (s + op.up_bias[c]);
    }
    __syncthreads();  // h is reused by the next row
  }
}

__global__ void pet_adapter_ref_kernel(PetOpArgs op, int64_t count) {
  extern __shared__ double hd[];
  const int64_t d = op.out, m = op.m;
  for (int64_t j = blockIdx.x; j < count; j += gridDim.x) {
    float* yr = op.y + op_row(op.rows, j) * d;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      double acc = op.down_bias[k];
      for (int64_t c = 0; c < d; ++c) acc += static_cast<double>(yr[c]) * op.down[k * d + c];
      hd[k] = act_d(op.act, acc);
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      double acc = op.up_bias[c];
      for (int64_t k = 0; k < m; ++k) acc += hd[k] * op.up[c * m + k];
      yr[c] = static_cast<float>(yr[c] + acc);
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------- LayerNorm (x may be y: each element is read and
// written by one thread, after the row's statistics are complete)

__global__ void pet_layer_norm_kernel(PetOpArgs op, int64_t count) {
  __shared__ float scratch[32];
  const int64_t d = op.out;
  for (int64_t j = blockIdx.x; j < count; j += gridDim.x) {
    const int64_t row = op_row(op.rows, j);
    const float* xr = op.x + row * d;
    float* yr = op.y + row * d;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    const float mean = block_sum(s, scratch) / static_cast<float>(d);
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float c = xr[i] - mean;
      sq += c * c;
    }
    const float var = block_sum(sq, scratch) / static_cast<float>(d);
    const float rstd = 1.0f / sqrtf(var + op.eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mean) * rstd * op.gamma[i] + op.beta[i];
  }
}

__global__ void pet_layer_norm_ref_kernel(PetOpArgs op, int64_t count) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= count) return;
  const int64_t d = op.out, row = op_row(op.rows, j);
  const float* xr = op.x + row * d;
  float* yr = op.y + row * d;
  double mean = 0;
  for (int64_t i = 0; i < d; ++i) mean += xr[i];
  mean /= static_cast<double>(d);
  double var = 0;
  for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
  var /= static_cast<double>(d);
  const double rstd = 1.0 / sqrt(var + static_cast<double>(op.eps));
  for (int64_t i = 0; i < d; ++i) yr[i] = static_cast<float>((xr[i] - mean) * rstd * op.gamma[i] + op.beta[i]);
}

// ---------------------------------------------------------------- launches

unsigned blocks_for(int64_t work, int threads) { return grid_for(work, threads); }
unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks); }

void launch(const PetOpArgs& op, bool reference, cudaStream_t stream) {
  const int64_t count = op.rows.count();
  if (count == 0 || op.out == 0) return;
  switch (op.kind) {
    case PetOpKind::Csr:
      if (reference) {
        pet_csr_ref_kernel<<<blocks_for(count * op.out, kRefThreads), kRefThreads, 0, stream>>>(op, count);
        check_launch("pet_csr_ref_kernel");
      } else {
        const int64_t row_blocks_y = (count + kPetCudaCsrRows - 1) / kPetCudaCsrRows;
        const dim3 grid(static_cast<unsigned>((op.out + kCsrThreads - 1) / kCsrThreads), static_cast<unsigned>(row_blocks_y < kMaxGridY ? row_blocks_y : kMaxGridY));
        pet_csr_kernel<<<grid, kCsrThreads, 0, stream>>>(op, count);
        check_launch("pet_csr_kernel");
      }
      break;
    case PetOpKind::Bias:
      pet_bias_kernel<<<blocks_for(count * op.out, 256), 256, 0, stream>>>(op, count);
      check_launch("pet_bias_kernel");
      break;
    case PetOpKind::Adapter:
      // h in dynamic shared memory: m <= kPetMaxBottleneck floats (16 KB), doubles for the reference (32 KB).
      if (reference) {
        pet_adapter_ref_kernel<<<row_blocks(count), kRefThreads, static_cast<size_t>(op.m) * sizeof(double), stream>>>(op, count);
        check_launch("pet_adapter_ref_kernel");
      } else {
        pet_adapter_kernel<<<row_blocks(count), kAdapterThreads, static_cast<size_t>(op.m) * sizeof(float), stream>>>(op, count);
        check_launch("pet_adapter_kernel");
      }
      break;
    case PetOpKind::LayerNorm:
      if (reference) {
        pet_layer_norm_ref_kernel<<<blocks_for(count, kRefThreads), kRefThreads, 0, stream>>>(op, count);
        check_launch("pet_layer_norm_ref_kernel");
      } else {
        pet_layer_norm_kernel<<<row_blocks(count), kLnThreads, 0, stream>>>(op, count);
        check_launch("pet_layer_norm_kernel");
      }
      break;
  }
}

// The PET streams and their events, created on first use and kept for the process (creating a stream per call would
// cost more than the ops). Guarded: sites may be enqueued from several host threads.
struct StreamPool {
  std::mutex mu;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> done;
  cudaEvent_t prolog = nullptr;
};

StreamPool& stream_pool() {
  static StreamPool pool;
  return pool;
}

void grow(StreamPool& p, size_t n) {
  if (!p.prolog) check_cuda(cudaEventCreateWithFlags(&p.prolog, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  while (p.streams.size() < n) {
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    p.streams.push_back(s);
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    p.done.push_back(e);
  }
}

}  // namespace

void pet_site(const PetSiteArgs& a, bool reference) {
  if (a.num_streams <= 1) {
    for (int64_t i = 0; i < a.n_ops; ++i) launch(a.ops[i], reference, 0);
    return;
  }
  const size_t n_streams = static_cast<size_t>(a.num_streams < kPetCudaStreams ? a.num_streams : kPetCudaStreams);
  std::vector<char> used(n_streams, 0);
  bool any = false;
  for (int64_t i = 0; i < a.n_ops; ++i) {
    const PetOpArgs& op = a.ops[i];
    if (op.rows.count() == 0 || op.out == 0) continue;
    used[static_cast<size_t>(op.stream) % n_streams] = 1;
    any = true;
  }
  if (!any) return;
  StreamPool& p = stream_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  grow(p, n_streams);
  // Prolog: the PET streams start after everything queued on the default stream (the shared GEMM).
  check_cuda(cudaEventRecord(p.prolog, 0), "cudaEventRecord(prolog)");
  for (size_t s = 0; s < n_streams; ++s)
    if (used[s]) check_cuda(cudaStreamWaitEvent(p.streams[s], p.prolog, 0), "cudaStreamWaitEvent(prolog)");
  // Epilogue: the default stream waits for every used stream, also when a launch failed (so nothing queued later
  // overtakes the ops that were enqueued).
  auto epilogue = [&] {
    for (size_t s = 0; s < n_streams; ++s) {
      if (!used[s]) continue;
      check_cuda(cudaEventRecord(p.done[s], p.streams[s]), "cudaEventRecord(epilogue)");
      check_cuda(cudaStreamWaitEvent(0, p.done[s], 0), "cudaStreamWaitEvent(epilogue)");
    }
  };
  try {
    for (int64_t i = 0; i < a.n_ops; ++i) launch(a.ops[i], reference, p.streams[static_cast<size_t>(a.ops[i].stream) % n_streams]);
  } catch (...) {
    try {
      epilogue();
    } catch (...) {
    }
    throw;
  }
  epilogue();
}

}  // namespace tessera::gpu

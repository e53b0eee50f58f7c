// Arguments of PetS's PET operators (the light per-task ops after a shared GEMM; see native/src/ops/pet.ts), shared
// like core/op_args.h by the CPU kernels (cpu/kernels.h), the CUDA launchers (cuda/cuda_kernels.h, also read by nvcc),
// the backend interface (binding/backend_ops.h) and the binding that fills them (binding/ops/bind_pet.cc). It lives
// beside the CPU kernels only because the PET group was added as one unit; it depends on core/op_args.h alone.
//
// Every op touches the rows of its PetRows: for s in [0, seqs), t in [0, tokens): row start + s * stride + t. Its
// logical row j in [0, seqs * tokens) is sequence j / tokens, token j % tokens. All tensors are f32 and contiguous
// row-major unless noted; pointers are host memory on the CPU and device memory on CUDA.
#pragma once
#include <cstdint>

#include "../core/op_args.h"

namespace tessera {

enum class PetOpKind : int32_t { Csr = 0, Bias = 1, Adapter = 2, LayerNorm = 3 };

// The bottleneck width the adapter kernels support (the CUDA kernels keep h in shared memory; PetS uses 64).
constexpr int64_t kPetMaxBottleneck = 4096;

struct PetRows {
  int64_t start = 0, seqs = 0, stride = 0, tokens = 0;
  int64_t count() const { return seqs * tokens; }
  int64_t row(int64_t j) const { return start + (j / tokens) * stride + j % tokens; }
};

// One op. Fields by kind (others unused):
//   Csr        y[r, o] += scale * sum_{e in [indptr[o], indptr[o+1])} values[e] * x[r, indices[e]]
//              x [*, in], y [*, out]; indptr i32 [out + 1] (indptr[0] = 0, non-decreasing, indptr[out] = nnz),
//              indices i32 [nnz] (each row's columns strictly increasing, in [0, in)), values [nnz]. y never aliases x.
//   Bias       y[r, :] += bias[:]                                   y [*, out], bias [out]
//   Adapter    h = act(y[r] . downT + down_bias); y[r] += h . upT + up_bias   (in place)
//              y [*, out] (out = d), down [m, d], down_bias [m], up [d, m], up_bias [d]; act GeluErf or GeluTanh.
//   LayerNorm  y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta      x, y [*, out] (x may be y), gamma/beta [out]
struct PetOpArgs {
  PetOpKind kind = PetOpKind::Bias;
  PetRows rows;
  int32_t stream = 0;
  const float* x = nullptr;
  float* y = nullptr;
  int64_t in = 0, out = 0;  // widths of x and y
  // Csr
  const int32_t* indptr = nullptr;
  const int32_t* indices = nullptr;
  const float* values = nullptr;
  int64_t nnz = 0;
  float scale = 1.0f;
  // Bias (bias), Adapter (down_bias, up_bias), LayerNorm (gamma, beta)
  const float* bias = nullptr;
  const float* down = nullptr;
  const float* down_bias = nullptr;
  const float* up = nullptr;
  const float* up_bias = nullptr;
  int64_t m = 0;
  Activation act = Activation::GeluErf;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float eps = 1e-5f;
};

// One site: ops on the same stream run in list order; streams are independent (the binding checked that ops of
// different streams touch disjoint memory wherever one of them writes), so they may run concurrently.
struct PetSiteArgs {
  const PetOpArgs* ops = nullptr;
  int64_t n_ops = 0;
  int32_t num_streams = 1;
};

}  // namespace tessera

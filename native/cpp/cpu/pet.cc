// PetS's PET operators (per-task CSR SpMM, bias add, bottleneck adapter, LayerNorm epilogue) and the site runner that
// executes one linear site's op list over "streams". References, the scalar fast path, the task schedule and the
// stream groups live here; SIMD bodies are in pet_avx2.cc / pet_avx512.cc (loops in pet_body.inl).
//
// Numerics: pet_simd.h fixes each output's f32 arithmetic; every task writes a disjoint tile of y, so results are
// bitwise identical for any thread count, any stream count and any grouping of ops in the call (a row's result
// depends only on its own op). LayerNorm runs the row bodies of the layerNorm op (norm_*.cc), so it gives the same
// bits as layerNorm over the same rows. References accumulate in double and round once per output.
//
// Streams (PetS runs the PET ops of one site on several CUDA streams): here a stream is a worker group of the pool.
// With G = min(num_streams, pool threads) groups:
//   G == 1  ops run in list order on the calling thread, each split into tasks over the whole pool (tiny ops inline);
//   G  > 1  one parallel_for over the G groups; group g runs, in list order, the ops of every stream s with
//           s % G == g. Nested parallel_for calls run inline (thread_pool.h), so each group runs its ops on one
//           thread, in order: a stream's ops stay ordered, streams overlap, and parallel_for's return is the barrier.
// The binding has checked that ops of different streams never touch memory another stream writes, so both ways
// produce the same bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "norm_simd.h"
#include "pet_simd.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kCsrRowsPerTask = kPetCsrBlockMax;  // rows of one CSR task (x rows transposed once per task)
constexpr int64_t kCsrMinOutputs = 64;        // outputs of one CSR task at least (transposition amortised over them)
constexpr int64_t kAdapterRowsPerTask = 8;    // an adapter row is 4·d·m flops: a few rows make a task
constexpr int64_t kElementsPerTask = 16384;   // bias, LayerNorm: rows of about this many elements per task
constexpr int64_t kTargetTasks = 32;          // enough tasks to balance a pool (shape-only, like every split here)
// Ops with less work than this (multiply-adds) run on the calling thread: waking the pool costs more.
constexpr int64_t kInlineWork = int64_t(1) << 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

float gelu_erf_f(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
float gelu_tanh_f(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + std::exp(-2.0f * u));  // == 0.5 x (1 + tanh u), stable for x < 0
}
double gelu_erf_d(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); }
double gelu_tanh_d(double x) { return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))); }

// Grow-only scratch of the thread running a task (pool workers and the caller each have their own).
float* thread_scratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(floats)) scratch.resize(static_cast<size_t>(floats));
  return scratch.data();
}

bool empty_op(const PetOpArgs& op) { return op.rows.count() == 0 || op.out == 0; }

}  // namespace

// ---------------------------------------------------------------- scalar bodies (baseline ISA)

void pet_csr_tile_scalar(const PetCsrTile& t) {
  const PetOpArgs& op = *t.op;
  const uint32_t col_max = static_cast<uint32_t>(op.in - 1);  // used only when in >= 1 (pet_csr_range)
  for (int64_t j = t.j0; j < t.j1; ++j) {
    const int64_t row = op.rows.row(j);
    const float* xr = op.x + row * op.in;
    float* yr = op.y + row * op.out;
    for (int64_t o = t.o0; o < t.o1; ++o) {
      int64_t e0, e1;
      pet_csr_range(op, o, e0, e1);
      float acc = 0.0f;
      for (int64_t e = e0; e < e1; ++e) acc += op.values[e] * xr[std::min(static_cast<uint32_t>(op.indices[e]), col_max)];
      yr[o] += op.scale * acc;
    }
  }
}

void pet_adapter_tile_scalar(const PetAdapterTile& t) {
  const PetOpArgs& op = *t.op;
  const int64_t d = op.out, m = op.m;
  float* h = t.scratch;
  for (int64_t j = t.j0; j < t.j1; ++j) {
    float* yr = op.y + op.rows.row(j) * d;
    for (int64_t k = 0; k < m; ++k) {
      const float* w = op.down + k * d;
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc += yr[c] * w[c];
      const float pre = acc + op.down_bias[k];
      h[k] = op.act == Activation::GeluTanh ? gelu_tanh_f(pre) : op.act == Activation::Relu ? std::max(pre, 0.0f) : gelu_erf_f(pre);
    }
    for (int64_t c = 0; c < d; ++c) {
      const float* w = op.up + c * m;
      float acc = 0.0f;
      for (int64_t k = 0; k < m; ++k) acc += h[k] * w[k];
      yr[c] = yr[c] + (acc + op.up_bias[c]);
    }
  }
}

namespace {

// Calls fn(first logical row, row, n) for each run of consecutive rows (within one sequence) in [j0, j1).
template <typename Fn>
void for_each_run(const PetRows& r, int64_t j0, int64_t j1, Fn&& fn) {
  for (int64_t j = j0; j < j1;) {
    const int64_t n = std::min(j1 - j, r.tokens - j % r.tokens);
    fn(j, r.row(j), n);
    j += n;
  }
}

// ---------------------------------------------------------------- references (double accumulation)

void csr_ref(const PetOpArgs& op) {
  for (int64_t j = 0; j < op.rows.count(); ++j) {
    const int64_t row = op.rows.row(j);
    const float* xr = op.x + row * op.in;
    float* yr = op.y + row * op.out;
    for (int64_t o = 0; o < op.out; ++o) {
      double acc = 0;
      for (int32_t e = op.indptr[o]; e < op.indptr[o + 1]; ++e) acc += static_cast<double>(op.values[e]) * xr[op.indices[e]];
      yr[o] = static_cast<float>(yr[o] + static_cast<double>(op.scale) * acc);
    }
  }
}

void bias_ref(const PetOpArgs& op) {
  for (int64_t j = 0; j < op.rows.count(); ++j) {
    float* yr = op.y + op.rows.row(j) * op.out;
    for (int64_t c = 0; c < op.out; ++c) yr[c] = static_cast<float>(static_cast<double>(yr[c]) + op.bias[c]);
  }
}

void adapter_ref(const PetOpArgs& op) {
  const int64_t d = op.out, m = op.m;
  std::vector<double> h(static_cast<size_t>(m));
  for (int64_t j = 0; j < op.rows.count(); ++j) {
    float* yr = op.y + op.rows.row(j) * d;
    for (int64_t k = 0; k < m; ++k) {
      double acc = op.down_bias[k];
      for (int64_t c = 0; c < d; ++c) acc += static_cast<double>(yr[c]) * op.down[k * d + c];
      h[static_cast<size_t>(k)] = op.act == Activation::GeluTanh ? gelu_tanh_d(acc) : op.act == Activation::Relu ? std::max(acc, 0.0) : gelu_erf_d(acc);
    }
    // The up projection reads only h: y is written after every read of it above.
    for (int64_t c = 0; c < d; ++c) {
      double acc = op.up_bias[c];
      for (int64_t k = 0; k < m; ++k) acc += h[static_cast<size_t>(k)] * op.up[c * m + k];
      yr[c] = static_cast<float>(yr[c] + acc);
    }
  }
}

void layer_norm_op_ref(const PetOpArgs& op) {
  for_each_run(op.rows, 0, op.rows.count(), [&](int64_t, int64_t row, int64_t n) {
    layer_norm_ref(op.x + row * op.out, n, op.out, op.gamma, op.beta, op.eps, op.y + row * op.out);
  });
}

// ---------------------------------------------------------------- fast paths: one op split into tasks

void run_csr_tile(Isa isa, const PetCsrTile& t) {
  switch (isa) {
    case Isa::Avx512: pet_csr_tile_avx512(t); break;
    case Isa::Avx2: pet_csr_tile_avx2(t); break;
    default: pet_csr_tile_scalar(t);
  }
}

void run_adapter_tile(Isa isa, const PetAdapterTile& t) {
  switch (isa) {
    case Isa::Avx512: pet_adapter_tile_avx512(t); break;
    case Isa::Avx2: pet_adapter_tile_avx2(t); break;
    default: pet_adapter_tile_scalar(t);
  }
}

// Multiply-adds (or elements) an op costs: decides whether it is worth waking the pool.
int64_t op_work(const PetOpArgs& op) {
  const int64_t rows = op.rows.count();
  switch (op.kind) {
    case PetOpKind::Csr: return rows * (op.nnz + op.in);
    case PetOpKind::Adapter: return rows * 2 * op.out * op.m;
    case PetOpKind::LayerNorm: return rows * op.out * 3;
    default: return rows * op.out;
  }
}

void run_op(Isa isa, const PetOpArgs& op) {
  if (empty_op(op)) return;
  const int64_t rows = op.rows.count();
  ThreadPool& pool = global_pool();
  const bool small = op_work(op) < kInlineWork;
  switch (op.kind) {
    case PetOpKind::Csr: {
      // Tasks over blocks of rows, each transposing its x rows once for all its outputs. Output ranges are added only
      // when there are few row blocks and enough nonzeros that transposing the block again per range costs little.
      const int64_t row_tasks = ceil_div(rows, kCsrRowsPerTask);
      int64_t pieces = 1;
      if (row_tasks < kTargetTasks) {
        const int64_t by_work = op.nnz / (4 * kCsrRowsPerTask * std::max<int64_t>(op.in, 1));
        pieces = std::clamp(std::min(by_work, ceil_div(kTargetTasks, row_tasks)), int64_t(1), ceil_div(op.out, kCsrMinOutputs));
      }
      const int64_t step = std::min(op.out, round_up(ceil_div(op.out, pieces), 8));
      const int64_t n_pieces = ceil_div(op.out, step);
      pool.parallel_for_or_inline(row_tasks * n_pieces, small, [&](int64_t task) {
        PetCsrTile t;
        t.op = &op;
        t.j0 = (task / n_pieces) * kCsrRowsPerTask;
        t.j1 = std::min(rows, t.j0 + kCsrRowsPerTask);
        t.o0 = (task % n_pieces) * step;
        t.o1 = std::min(op.out, t.o0 + step);
        t.scratch = thread_scratch((op.in + (t.o1 - t.o0)) * kPetCsrBlockMax);
        run_csr_tile(isa, t);
      });
      break;
    }
    case PetOpKind::Adapter: {
      pool.parallel_for_or_inline(ceil_div(rows, kAdapterRowsPerTask), small, [&](int64_t task) {
        PetAdapterTile t;
        t.op = &op;
        t.j0 = task * kAdapterRowsPerTask;
        t.j1 = std::min(rows, t.j0 + kAdapterRowsPerTask);
        t.scratch = thread_scratch(kPetAdapterRowsMax * op.m);
        run_adapter_tile(isa, t);
      });
      break;
    }
    case PetOpKind::Bias: {
      const int64_t per = std::max<int64_t>(1, kElementsPerTask / op.out);
      pool.parallel_for_or_inline(ceil_div(rows, per), small, [&](int64_t task) {
        for (int64_t j = task * per; j < std::min(rows, (task + 1) * per); ++j) {
          float* yr = op.y + op.rows.row(j) * op.out;
          for (int64_t c = 0; c < op.out; ++c) yr[c] += op.bias[c];  // one rounding: the same bits on every ISA
        }
      });
      break;
    }
    case PetOpKind::LayerNorm: {
      const int64_t per = std::max<int64_t>(1, kElementsPerTask / op.out);
      pool.parallel_for_or_inline(ceil_div(rows, per), small, [&](int64_t task) {
        for_each_run(op.rows, task * per, std::min(rows, (task + 1) * per), [&](int64_t, int64_t row, int64_t n) {
          layer_norm_rows(isa, op.x + row * op.out, n, op.out, op.gamma, op.beta, op.eps, op.y + row * op.out);
        });
      });
      break;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- site entries

void pet_site_ref(const PetSiteArgs& a) {
  for (int64_t i = 0; i < a.n_ops; ++i) {
    const PetOpArgs& op = a.ops[i];
    if (empty_op(op)) continue;
    switch (op.kind) {
      case PetOpKind::Csr: csr_ref(op); break;
      case PetOpKind::Bias: bias_ref(op); break;
      case PetOpKind::Adapter: adapter_ref(op); break;
      case PetOpKind::LayerNorm: layer_norm_op_ref(op); break;
    }
  }
}

void pet_site(const PetSiteArgs& a) {
  const Isa isa = active_isa();
  ThreadPool& pool = global_pool();
  const int64_t groups = std::min<int64_t>(std::max<int32_t>(a.num_streams, 1), pool.size());
  if (groups <= 1) {
    for (int64_t i = 0; i < a.n_ops; ++i) run_op(isa, a.ops[i]);
    return;
  }
  // Group g's ops in list order (each stream's order kept); then one task per group.
  std::vector<std::vector<const PetOpArgs*>> by_group(static_cast<size_t>(groups));
  for (int64_t i = 0; i < a.n_ops; ++i) {
    const PetOpArgs& op = a.ops[i];
    if (!empty_op(op)) by_group[static_cast<size_t>(op.stream % groups)].push_back(&op);
  }
  pool.parallel_for(groups, [&](int64_t g) {
    for (const PetOpArgs* op : by_group[static_cast<size_t>(g)]) run_op(isa, *op);
  });
}

}  // namespace tessera::cpu

// SGMV / BGMV (Punica's LoRA kernels): the double-accumulating references, the task schedule and the scalar path.
// SIMD tile bodies are in sgmv_avx2.cc / sgmv_avx512.cc (loops in sgmv_body.inl).
//
// Schedule. Decode-size groups are pure bandwidth streams over W; groups of many rows are GEMMs
// ([rows x h]·[h x r] and [rows x r]·[r x h]) that must stream each activation row once and reuse W from cache:
//   expand  tasks over (group, rows block, output-column tile). Each task writes a disjoint tile of y, reading the
//           rows of W [r, h_out] contiguously; a tile (r x columns) is sized to stay in L2 while the task walks its
//           rows in register blocks, so W is read from memory once per task, not once per row.
//   shrink  split-K: tasks over (group, rows block, range of K-chunks of kSgmvChunk). Each task writes f32 partials
//           (one per row, k and chunk) to scratch; every output's partials are summed in chunk order and the sum
//           added to y, by the task itself when it covers every chunk of its rows, else by a second pass. Chunk
//           ranges are sized so a task's W tile stays in L2 across its row blocks.
// A group of one to three rows (the row path) keeps its rows in one task and is split along K / the columns only;
// a group of kGemmMinRows rows or more (the GEMM path) is split into blocks of whole rows first (see plan), so its
// tasks read x and y in long sequential runs rather than in pieces a chunk or a tile wide.
// The partition depends on the shapes only, and the arithmetic not even on that (see SgmvArgs), so results are
// bitwise identical for any thread count and for any grouping of the same rows.
#include <algorithm>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "kernels.h"
#include "sgmv_simd.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kShrinkTileBytes = int64_t(256) << 10;  // W bytes a shrink task keeps hot (r x its chunks)
constexpr int64_t kExpandTileBytes = int64_t(128) << 10;  // W bytes an expand task keeps hot (r x its columns)
constexpr int64_t kColumnAlign = 64;                      // expand tiles start at multiples of this many columns
constexpr int64_t kRowsPerTask = 256;                     // rows of one row-path group per task
// Groups of at least kGemmMinRows rows run as a row-blocked GEMM, handed out in blocks of at least kGemmTaskRows rows
// (so a task's W tile, read from L2 once per register block of rows, serves at least that many rows).
constexpr int64_t kGemmMinRows = 4;
constexpr int64_t kGemmTaskRows = 16;
constexpr int64_t kReduceRowsPerTask = 64;
// A row-path group (fewer than kGemmMinRows rows) whose adapter slice (W, r x h) is at most kLoneGroupBytes is not
// split at all: consecutive such groups (a Distinct decode batch: one row per adapter, each slice a few KB and cold
// in cache) are handed out whole, in runs of about kLoneRunBytes of W. Split into pieces of a few hundred bytes, each
// group cost more in task hand-offs, partial sums and a second reduction pass than in reading its slice, and two
// threads ran such a call slower than one.
constexpr int64_t kLoneGroupBytes = int64_t(32) << 10;
constexpr int64_t kLoneRunBytes = int64_t(48) << 10;
// Calls that move less than this (weights plus activations) run on the calling thread: waking the pool would cost
// more than the work. Like every schedule choice here it leaves the arithmetic unchanged.
constexpr int64_t kInlineBytes = int64_t(192) << 10;
constexpr int64_t kInlinePartials = int64_t(32) << 10;  // shrink reductions over fewer partials run inline

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Enough tasks to balance a pool when groups differ in size (fixed, like every split here: the partition depends on
// the shapes only).
constexpr int64_t kTargetTasks = 32;

SgmvRows rows_of(const SgmvArgs& a, const SgmvSegment& s) {
  return a.row_ids ? SgmvRows{a.row_ids + s.row_begin, 0} : SgmvRows{nullptr, s.row_begin};
}

bool has_work(const SgmvSegment& s) { return s.rows > 0 && s.r > 0; }

}  // namespace

// ---------------------------------------------------------------- scalar tile bodies (baseline ISA)

void sgmv_shrink_tile_scalar(const ShrinkTile& t) {
  for (int64_t j = t.j0; j < t.j1; ++j) {
    const float* xr = t.x + t.rows.at(j) * t.h;
    for (int64_t k = 0; k < t.r; ++k) {
      const float* wr = t.w + k * t.h;
      for (int64_t c = t.c0; c < t.c1; ++c) {
        const int64_t e0 = c * kSgmvChunk, e1 = std::min(t.h, e0 + kSgmvChunk);
        float s = 0.0f;
        for (int64_t e = e0; e < e1; ++e) s += xr[e] * wr[e];
        t.part[(c * t.n_rows + j) * t.r + k] = s;
      }
    }
  }
}

void sgmv_expand_tile_scalar(const ExpandTile& t) {
  const int64_t n = t.col1 - t.col0;
  std::vector<float> acc(static_cast<size_t>(n));
  for (int64_t j = t.j0; j < t.j1; ++j) {
    const int64_t row = t.rows.at(j);
    const float* vr = t.v + row * t.r_max;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t k = 0; k < t.r; ++k) {
      const float vk = vr[k];
      const float* wr = t.w + k * t.h + t.col0;
      for (int64_t c = 0; c < n; ++c) acc[static_cast<size_t>(c)] += vk * wr[c];
    }
    float* yr = t.y + row * t.h + t.col0;
    for (int64_t c = 0; c < n; ++c) yr[c] += t.scale * acc[static_cast<size_t>(c)];
  }
}

namespace {

void run_shrink_tile(Isa isa, const ShrinkTile& t) {
  switch (isa) {
    case Isa::Avx512: sgmv_shrink_tile_avx512(t); break;
    case Isa::Avx2: sgmv_shrink_tile_avx2(t); break;
    default: sgmv_shrink_tile_scalar(t);
  }
}

void run_expand_tile(Isa isa, const ExpandTile& t) {
  switch (isa) {
    case Isa::Avx512: sgmv_expand_tile_avx512(t); break;
    case Isa::Avx2: sgmv_expand_tile_avx2(t); break;
    default: sgmv_expand_tile_scalar(t);
  }
}

// A task: group g, its rows [j0, j1) and a range [b0, b1) of K-chunks (shrink) or columns (expand); or (whole) a
// run of small groups [g, g_end), each with all its rows and the whole range.
struct Task {
  int64_t g, j0, j1, b0, b1, g_end;
  bool whole = false;
};

// Bytes of a group's W slice for the call's layer (r rows of h).
int64_t slice_bytes(const SgmvArgs& a, const SgmvSegment& s) { return s.r * a.h * int64_t(sizeof(float)); }

bool is_lone(const SgmvArgs& a, const SgmvSegment& s) { return s.rows < kGemmMinRows && slice_bytes(a, s) <= kLoneGroupBytes; }

// Splits every group into at least `split` pieces (tasks), doubling `split` until there are kTargetTasks tasks or no
// group can be split further. The two kinds of group split differently:
//   row path  (fewer than kGemmMinRows rows: decode) all rows in one task; the range [0, extent) is cut into pieces
//             of at most cap_of(group) units, aligned to `align` units.
//   GEMM path (kGemmMinRows rows or more) the rows are cut first, into blocks of at least kGemmTaskRows rows, so each
//             task streams whole activation rows (long sequential runs the prefetchers follow) against the group's W
//             tile, which it keeps in L2; the range is cut only when the rows cannot be (or to fit cap_of in L2).
template <typename CapOf>
std::vector<Task> plan(const SgmvArgs& a, int64_t extent, int64_t align, CapOf&& cap_of) {
  std::vector<Task> lone;
  if (extent <= 0) return lone;
  // Runs of consecutive lone groups (empty groups in between are skipped), cut once a run holds kLoneRunBytes of W.
  int64_t run_bytes = 0;
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    if (!has_work(s)) continue;
    if (!is_lone(a, s)) {
      run_bytes = 0;
      continue;
    }
    if (run_bytes == 0) lone.push_back({g, 0, 0, 0, extent, g + 1, true});
    lone.back().g_end = g + 1;
    run_bytes += slice_bytes(a, s);
    if (run_bytes >= kLoneRunBytes) run_bytes = 0;
  }
  std::vector<Task> tasks;
  for (int64_t split = 1;; split *= 2) {
    tasks = lone;
    bool can_split_more = false;
    for (int64_t g = 0; g < a.n_segments; ++g) {
      const SgmvSegment& s = a.segments[g];
      if (!has_work(s) || is_lone(a, s)) continue;
      int64_t row_blocks = 1;
      if (s.rows >= kGemmMinRows) {
        const int64_t most = std::max<int64_t>(1, s.rows / kGemmTaskRows);
        row_blocks = std::min(split, most);
        if (row_blocks < most) can_split_more = true;
      }
      const int64_t row_step = s.rows >= kGemmMinRows ? ceil_div(s.rows, row_blocks) : kRowsPerTask;
      const int64_t pieces = std::max(ceil_div(split, row_blocks), ceil_div(extent, std::max<int64_t>(1, cap_of(s))));
      const int64_t step = round_up(ceil_div(extent, pieces), align);
      if (step > align) can_split_more = true;
      for (int64_t j0 = 0; j0 < s.rows; j0 += row_step) {
        for (int64_t b0 = 0; b0 < extent; b0 += step)
          tasks.push_back({g, j0, std::min(s.rows, j0 + row_step), b0, std::min(extent, b0 + step), g + 1});
      }
    }
    if (static_cast<int64_t>(tasks.size()) >= kTargetTasks || !can_split_more) return tasks;
  }
}

// Bytes a call streams: every group's W slice and its rows of the wide operand (x for shrink, y for expand).
int64_t traffic_bytes(const SgmvArgs& a) {
  int64_t bytes = 0;
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    if (has_work(s)) bytes += (s.r + s.rows) * a.h * int64_t(sizeof(float));
  }
  return bytes;
}

// In a run of small groups, the W slice of the next group with work (before `end`) is requested while this one
// computes: each slice is a few short streams, cold in cache, that the hardware prefetchers would only ramp up on
// once the loads reach them.
void prefetch_next_lone(const SgmvArgs& a, int64_t end, int64_t g) {
  for (; g < end; ++g) {
    const SgmvSegment& s = a.segments[g];
    if (!has_work(s)) continue;
    const char* w = reinterpret_cast<const char*>(s.w);
    const int64_t bytes = slice_bytes(a, s);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(w + b, 0, 3);
    return;
  }
}

// Runs fn(g, segment, j0, j1) for each group with work in `task`: its one group and rows, or (whole) every group of
// its run with all of that group's rows, requesting the next group's slice before each.
template <typename Fn>
void for_each_group(const SgmvArgs& a, const Task& task, Fn&& fn) {
  for (int64_t g = task.g; g < task.g_end; ++g) {
    const SgmvSegment& s = a.segments[g];
    if (!has_work(s)) continue;
    if (g + 1 < task.g_end) prefetch_next_lone(a, task.g_end, g + 1);
    fn(g, s, task.whole ? int64_t(0) : task.j0, task.whole ? s.rows : task.j1);
  }
}

// Grow-only scratch for shrink partials, one per calling thread (ops run on the JS thread that called them).
std::vector<float>& partial_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

}  // namespace

// ---------------------------------------------------------------- references (double accumulation)

void sgmv_shrink_ref(const SgmvArgs& a) {
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    const SgmvRows rows = rows_of(a, s);
    for (int64_t j = 0; j < s.rows; ++j) {
      const int64_t row = rows.at(j);
      const float* xr = a.x + row * a.h;
      float* yr = a.y + row * a.r_max;
      for (int64_t k = 0; k < s.r; ++k) {
        const float* wr = s.w + k * a.h;
        double acc = yr[k];
        for (int64_t e = 0; e < a.h; ++e) acc += static_cast<double>(xr[e]) * wr[e];
        yr[k] = static_cast<float>(acc);
      }
    }
  }
}

void sgmv_expand_ref(const SgmvArgs& a) {
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    const SgmvRows rows = rows_of(a, s);
    for (int64_t j = 0; j < s.rows; ++j) {
      const int64_t row = rows.at(j);
      const float* vr = a.x + row * a.r_max;
      float* yr = a.y + row * a.h;
      for (int64_t c = 0; c < a.h; ++c) {
        double acc = 0;
        for (int64_t k = 0; k < s.r; ++k) acc += static_cast<double>(vr[k]) * s.w[k * a.h + c];
        yr[c] = static_cast<float>(yr[c] + static_cast<double>(s.scale) * acc);
      }
    }
  }
}

// ---------------------------------------------------------------- dispatching entries

void sgmv_shrink(const SgmvArgs& a) {
  const int64_t chunks = ceil_div(a.h, kSgmvChunk);
  // A one-row group reads its W tile once whatever its size; larger groups keep theirs in L2 across row blocks.
  const std::vector<Task> tasks = plan(a, chunks, 1, [&](const SgmvSegment& s) {
    return s.rows == 1 ? chunks : kShrinkTileBytes / (s.r * kSgmvChunk * int64_t(sizeof(float)));
  });
  if (tasks.empty()) return;
  // Partials of group g start at offset[g]: [chunk][row][k].
  std::vector<int64_t> offset(static_cast<size_t>(a.n_segments) + 1, 0);
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    offset[static_cast<size_t>(g) + 1] = offset[static_cast<size_t>(g)] + (has_work(s) ? s.rows * s.r * chunks : 0);
  }
  std::vector<float>& part = partial_scratch();
  if (part.size() < static_cast<size_t>(offset.back())) part.resize(static_cast<size_t>(offset.back()));
  // A group whose tasks each cover every chunk of their rows (not split along K) is reduced by those tasks, right
  // after they write the partials (still in cache); the others by a second pass once every partial is written.
  std::vector<char> split_k(static_cast<size_t>(a.n_segments), 0);
  for (const Task& task : tasks) {
    if (task.b0 != 0 || task.b1 != chunks) split_k[static_cast<size_t>(task.g)] = 1;
  }
  // y += ((p_0 + p_1) + p_2) + ..., per output of rows [j0, j1) of group g, in chunk order.
  auto reduce_rows = [&](int64_t g, int64_t j0, int64_t j1) {
    const SgmvSegment& s = a.segments[g];
    const SgmvRows rows = rows_of(a, s);
    const float* p = part.data() + offset[static_cast<size_t>(g)];
    const int64_t stride = s.rows * s.r;  // between chunks
    for (int64_t j = j0; j < j1; ++j) {
      float* yr = a.y + rows.at(j) * a.r_max;
      for (int64_t k = 0; k < s.r; ++k) {
        const float* pk = p + j * s.r + k;
        float sum = pk[0];
        for (int64_t c = 1; c < chunks; ++c) sum += pk[c * stride];
        yr[k] += sum;
      }
    }
  };
  const Isa isa = active_isa();
  const bool small = traffic_bytes(a) < kInlineBytes;
  global_pool().parallel_for_or_inline(static_cast<int64_t>(tasks.size()), small, [&](int64_t i) {
    const Task& task = tasks[static_cast<size_t>(i)];
    for_each_group(a, task, [&](int64_t g, const SgmvSegment& s, int64_t j0, int64_t j1) {
      ShrinkTile t;
      t.x = a.x;
      t.h = a.h;
      t.rows = rows_of(a, s);
      t.n_rows = s.rows;
      t.j0 = j0;
      t.j1 = j1;
      t.w = s.w;
      t.r = s.r;
      t.c0 = task.b0;
      t.c1 = task.b1;
      t.part = part.data() + offset[static_cast<size_t>(g)];
      run_shrink_tile(isa, t);
      if (!split_k[static_cast<size_t>(g)]) reduce_rows(g, j0, j1);
    });
  });
  std::vector<Task> reduce;
  int64_t reduce_partials = 0;
  for (int64_t g = 0; g < a.n_segments; ++g) {
    const SgmvSegment& s = a.segments[g];
    if (!has_work(s) || !split_k[static_cast<size_t>(g)]) continue;
    reduce_partials += s.rows * s.r * chunks;
    for (int64_t j0 = 0; j0 < s.rows; j0 += kReduceRowsPerTask) reduce.push_back({g, j0, std::min(s.rows, j0 + kReduceRowsPerTask), 0, 0, g + 1});
  }
  global_pool().parallel_for_or_inline(static_cast<int64_t>(reduce.size()), small || reduce_partials < kInlinePartials, [&](int64_t i) {
    const Task& task = reduce[static_cast<size_t>(i)];
    reduce_rows(task.g, task.j0, task.j1);
  });
}

void sgmv_expand(const SgmvArgs& a) {
  const std::vector<Task> tasks = plan(a, a.h, kColumnAlign, [&](const SgmvSegment& s) {
    if (s.rows == 1) return a.h;
    return std::max<int64_t>(kColumnAlign, kExpandTileBytes / (s.r * int64_t(sizeof(float))) / kColumnAlign * kColumnAlign);
  });
  if (tasks.empty()) return;
  const Isa isa = active_isa();
  global_pool().parallel_for_or_inline(static_cast<int64_t>(tasks.size()), traffic_bytes(a) < kInlineBytes, [&](int64_t i) {
    const Task& task = tasks[static_cast<size_t>(i)];
    for_each_group(a, task, [&](int64_t, const SgmvSegment& s, int64_t j0, int64_t j1) {
      ExpandTile t;
      t.v = a.x;
      t.r_max = a.r_max;
      t.rows = rows_of(a, s);
      t.j0 = j0;
      t.j1 = j1;
      t.w = s.w;
      t.r = s.r;
      t.h = a.h;
      t.col0 = task.b0;
      t.col1 = task.b1;
      t.scale = s.scale;
      t.y = a.y;
      run_expand_tile(isa, t);
    });
  });
}

}  // namespace tessera::cpu

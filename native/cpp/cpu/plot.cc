// PLOT index and the fused lookup -> gather -> aggregate (plot.h): the table, the A2 lookup, the double reference,
// the scalar merge and the dispatching entry. The SIMD merge bodies are in plot_avx2.cc / plot_avx512.cc.
#include "plot.h"

#include <cmath>
#include <string>

#include "../core/cpu_features.h"
#include "../core/error.h"
#include "../core/thread_pool.h"
#include "norm_simd.h"
#include "plot_simd.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kMinCapacity = 16;
constexpr int64_t kLookupGrain = 4096;  // keys per lookup task
constexpr int64_t kTokenGrain = 8;      // output rows per aggregate task (a row is ~5 d of work)

int64_t capacity_for(int64_t keys) {
  int64_t cap = kMinCapacity;
  while (cap / 2 < keys) cap *= 2;  // at most half full, as plot-index.ts's MAX_LOAD
  return cap;
}

// Key bits each back-off step keeps (keys.ts: left << 42 | centre << 21 | right).
constexpr uint64_t kField = (uint64_t{1} << 21) - 1;
constexpr uint64_t kBigramMask = (uint64_t{1} << 42) - 1;
constexpr uint64_t kEncoderUnigramMask = kField << 21;
constexpr uint64_t kCausalUnigramMask = kField;

int32_t chain_get(const PlotTable* const* chain, int64_t chain_len, uint64_t key) {
  for (int64_t t = 0; t < chain_len; ++t) {
    const int32_t row = chain[t]->get(key);
    if (row != 0) return row;
  }
  return 0;
}

int32_t lookup_one(const PlotTable* const* chain, int64_t chain_len, PlotBackoff backoff, uint64_t key) {
  if (key == 0) return 0;  // the separator
  int32_t row = chain_get(chain, chain_len, key);
  if (row != 0 || backoff == PlotBackoff::None) return row;
  row = chain_get(chain, chain_len, key & kBigramMask);
  if (row != 0) return row;
  return chain_get(chain, chain_len, key & (backoff == PlotBackoff::Encoder ? kEncoderUnigramMask : kCausalUnigramMask));
}

// Looks every key up, then checks every row against the value buffer before the caller writes anything.
std::vector<int32_t> lookup_checked(const PlotAggregateArgs& a, bool threaded) {
  std::vector<int32_t> rows(static_cast<size_t>(a.n_keys));
  if (threaded) {
    plot_lookup_rows(a.chain, a.chain_len, a.backoff, a.keys, a.n_keys, rows.data());
  } else {
    for (int64_t i = 0; i < a.n_keys; ++i) rows[i] = lookup_one(a.chain, a.chain_len, a.backoff, a.keys[i]);
  }
  for (int64_t i = 0; i < a.n_keys; ++i) {
    if (rows[i] < 0 || rows[i] >= a.value_rows)
      fail(ErrorCode::InvalidArgument, "plotLookupAggregate: keys[" + std::to_string(i) + "] maps to row " + std::to_string(rows[i]) +
                                           ", outside the value buffer's " + std::to_string(a.value_rows) +
                                           " rows (the index and the values disagree)");
  }
  return rows;
}

// First key of each sequence (keys.ts offsets).
std::vector<int64_t> key_offsets(const PlotAggregateArgs& a) {
  std::vector<int64_t> off(static_cast<size_t>(a.batch));
  int64_t k = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    off[b] = k;
    k += a.lengths[b] + 1;
  }
  return off;
}

void merge_row_scalar(const f16_t* c, const f16_t* nl, const f16_t* pr, const float* pos, const float* type, int64_t d, float* z) {
  for (int64_t j = 0; j < d; ++j) {
    float v = f16_to_f32(c[j]);
    if (nl) v += f16_to_f32(nl[j]);
    if (pr) v += f16_to_f32(pr[j]);
    v += pos[j];
    z[j] = v + type[j];
  }
}

}  // namespace

// ---------------------------------------------------------------- PlotTable

PlotTable::PlotTable(int64_t expected_keys) {
  initial_capacity_ = capacity_for(expected_keys < 0 ? 0 : expected_keys);
  rehash(initial_capacity_);
}

void PlotTable::rehash(int64_t capacity) {
  std::vector<uint64_t> old_keys(static_cast<size_t>(capacity), 0);
  std::vector<int32_t> old_rows(static_cast<size_t>(capacity), 0);
  old_keys.swap(keys_);
  old_rows.swap(rows_);
  mask_ = static_cast<uint64_t>(capacity - 1);
  // Reinserted in old slot order, as plot-index.ts's grow, so both tables end up with the same layout.
  for (size_t s = 0; s < old_rows.size(); ++s) {
    if (old_rows[s] == 0) continue;
    uint64_t i = home(old_keys[s]);
    while (rows_[i] != 0) i = (i + 1) & mask_;
    keys_[i] = old_keys[s];
    rows_[i] = old_rows[s];
  }
}

int32_t PlotTable::set(uint64_t key, int32_t row) {
  TESSERA_CHECK(row > 0, ErrorCode::InvalidArgument, "plot index: rows are >= 1 (row 0 is the reserved zero row), got " + std::to_string(row));
  uint64_t i = home(key);
  for (;;) {
    if (rows_[i] == 0) break;
    if (keys_[i] == key) {
      const int32_t previous = rows_[i];
      rows_[i] = row;
      return previous;
    }
    i = (i + 1) & mask_;
  }
  if ((count_ + 1) * 2 > capacity()) {
    rehash(capacity() * 2);
    i = home(key);
    while (rows_[i] != 0) i = (i + 1) & mask_;
  }
  keys_[i] = key;
  rows_[i] = row;
  ++count_;
  return 0;
}

int32_t PlotTable::erase(uint64_t key) {
  uint64_t slot = home(key);
  for (;;) {
    if (rows_[slot] == 0) return 0;
    if (keys_[slot] == key) break;
    slot = (slot + 1) & mask_;
  }
  const int32_t previous = rows_[slot];
  // Backward shift: pull a later member of the run into the hole unless its home lies cyclically in (hole, j].
  uint64_t hole = slot, j = slot;
  for (;;) {
    j = (j + 1) & mask_;
    if (rows_[j] == 0) break;
    const uint64_t h = home(keys_[j]);
    const bool home_in_range = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (home_in_range) continue;
    keys_[hole] = keys_[j];
    rows_[hole] = rows_[j];
    hole = j;
  }
  rows_[hole] = 0;
  keys_[hole] = 0;
  --count_;
  return previous;
}

void PlotTable::clear() {
  keys_.assign(static_cast<size_t>(initial_capacity_), 0);
  rows_.assign(static_cast<size_t>(initial_capacity_), 0);
  keys_.shrink_to_fit();
  rows_.shrink_to_fit();
  mask_ = static_cast<uint64_t>(initial_capacity_ - 1);
  count_ = 0;
}

void PlotTable::entries(uint64_t* keys, int32_t* rows) const {
  int64_t n = 0;
  for (size_t s = 0; s < rows_.size(); ++s) {
    if (rows_[s] == 0) continue;
    keys[n] = keys_[s];
    rows[n] = rows_[s];
    ++n;
  }
}

// ---------------------------------------------------------------- lookup

void plot_lookup_rows(const PlotTable* const* chain, int64_t chain_len, PlotBackoff backoff, const uint64_t* keys, int64_t n,
                      int32_t* rows) {
  if (n <= 0) return;
  global_pool().parallel_for_or_inline((n + kLookupGrain - 1) / kLookupGrain, n <= kLookupGrain, [&](int64_t task) {
    const int64_t i1 = std::min(n, (task + 1) * kLookupGrain);
    for (int64_t i = task * kLookupGrain; i < i1; ++i) rows[i] = lookup_one(chain, chain_len, backoff, keys[i]);
  });
}

// ---------------------------------------------------------------- aggregate

void plot_lookup_aggregate_ref(const PlotAggregateArgs& a) {
  const std::vector<int32_t> rows = lookup_checked(a, false);
  const std::vector<int64_t> offsets = key_offsets(a);
  const int64_t d = a.hidden, T = a.seq_len;
  std::vector<double> z(static_cast<size_t>(d));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t len = a.lengths[b], k = offsets[b];
    for (int64_t i = 0; i < T; ++i) {
      float* y = a.out + (b * T + i) * d;
      if (i >= len) {
        for (int64_t j = 0; j < d; ++j) y[j] = 0.0f;
        continue;
      }
      const int64_t type = a.types ? a.types[b * T + i] : 0;
      const f16_t* c = a.values + (static_cast<int64_t>(rows[k + i]) * 3 + 1) * d;
      const f16_t* nl = i + 1 < len ? a.values + (static_cast<int64_t>(rows[k + i + 1]) * 3 + 0) * d : nullptr;
      const f16_t* pr = i > 0 ? a.values + (static_cast<int64_t>(rows[k + i - 1]) * 3 + 2) * d : nullptr;
      double mean = 0;
      for (int64_t j = 0; j < d; ++j) {
        double v = f16_to_f32(c[j]);
        if (nl) v += f16_to_f32(nl[j]);
        if (pr) v += f16_to_f32(pr[j]);
        v += static_cast<double>(a.pos_emb[i * d + j]) + static_cast<double>(a.type_emb[type * d + j]);
        z[j] = v;
        mean += v;
      }
      mean /= static_cast<double>(d);
      double var = 0;
      for (int64_t j = 0; j < d; ++j) var += (z[j] - mean) * (z[j] - mean);
      const double rstd = 1.0 / std::sqrt(var / static_cast<double>(d) + static_cast<double>(a.eps));
      for (int64_t j = 0; j < d; ++j)
        y[j] = static_cast<float>((z[j] - mean) * rstd * (a.gamma ? a.gamma[j] : 1.0) + (a.beta ? a.beta[j] : 0.0));
    }
  }
}

void plot_lookup_aggregate(const PlotAggregateArgs& a) {
  const std::vector<int32_t> rows = lookup_checked(a, true);
  const std::vector<int64_t> offsets = key_offsets(a);
  const int64_t d = a.hidden, T = a.seq_len, out_rows = a.batch * T;
  if (out_rows <= 0 || d <= 0) return;
  const Isa isa = active_isa();
  // One task per kTokenGrain output rows; each row is computed the same way whichever task runs it.
  const int64_t tasks = (out_rows + kTokenGrain - 1) / kTokenGrain;
  global_pool().parallel_for_or_inline(tasks, out_rows * d < (1 << 14), [&](int64_t task) {
    const int64_t r1 = std::min(out_rows, (task + 1) * kTokenGrain);
    for (int64_t r = task * kTokenGrain; r < r1; ++r) {
      const int64_t b = r / T, i = r % T, len = a.lengths[b], k = offsets[b];
      float* y = a.out + r * d;
      if (i >= len) {
        std::fill(y, y + d, 0.0f);
        continue;
      }
      const int64_t type = a.types ? a.types[r] : 0;
      const f16_t* c = a.values + (static_cast<int64_t>(rows[k + i]) * 3 + 1) * d;
      const f16_t* nl = i + 1 < len ? a.values + (static_cast<int64_t>(rows[k + i + 1]) * 3 + 0) * d : nullptr;
      const f16_t* pr = i > 0 ? a.values + (static_cast<int64_t>(rows[k + i - 1]) * 3 + 2) * d : nullptr;
      const float* pos = a.pos_emb + i * d;
      const float* ty = a.type_emb + type * d;
      switch (isa) {
        case Isa::Avx512: plot_merge_row_avx512(c, nl, pr, pos, ty, d, y); break;
        case Isa::Avx2: plot_merge_row_avx2(c, nl, pr, pos, ty, d, y); break;
        default: merge_row_scalar(c, nl, pr, pos, ty, d, y);
      }
      layer_norm_rows(isa, y, 1, d, a.gamma, a.beta, a.eps, y);  // in place: the row kernel reads x before writing
    }
  });
}

}  // namespace tessera::cpu

// HMI's PLOT lookup (shared/design/hmi.md §1.3-1.4, A2-A3): a key -> row hash index in native memory and the fused
// lookup -> gather -> aggregate call over a batch of tri-gram keys. The policy half (key packing, the version tree)
// is TypeScript in @tessera/plot-store; these are its hot loops.
#pragma once
#include <cstdint>
#include <vector>

#include "../core/dtype.h"

namespace tessera::cpu {

// ---------------------------------------------------------------- index

// u64 key -> i32 row by open addressing with linear probing: power-of-two capacity, at most half full, deletion by
// backward shift (no tombstones). Row 0 is the reserved zero row, never stored, so a slot holding row 0 is empty and
// every key (0 included) could be stored; keys.ts never stores the separator key 0 anyway. The hash and the growth
// policy are those of the TS OpenAddressingPlotIndex (plot-index.ts), so both put the same key in the same slot and
// list entries in the same order. Not thread-safe for writes; concurrent reads are fine.
class PlotTable {
 public:
  explicit PlotTable(int64_t expected_keys = 0);

  int64_t size() const { return count_; }
  int64_t capacity() const { return static_cast<int64_t>(rows_.size()); }
  int64_t byte_size() const { return capacity() * static_cast<int64_t>(sizeof(uint64_t) + sizeof(int32_t)); }

  int32_t get(uint64_t key) const {
    uint64_t i = home(key);
    for (;;) {
      const int32_t row = rows_[i];
      if (row == 0) return 0;
      if (keys_[i] == key) return row;
      i = (i + 1) & mask_;
    }
  }
  // Maps key to row (>= 1); returns the previous row or 0.
  int32_t set(uint64_t key, int32_t row);
  // Removes key; returns its row or 0.
  int32_t erase(uint64_t key);
  // Drops every key and shrinks back to the capacity the table was created with.
  void clear();
  // Every (key, row) in slot order.
  void entries(uint64_t* keys, int32_t* rows) const;

 private:
  uint64_t home(uint64_t key) const { return hash(key) & mask_; }
  static uint32_t hash(uint64_t key) {
    // plot-index.ts hashKey(hi, lo): murmur3's finaliser over a multiplicative combine of the two words.
    const uint32_t hi = static_cast<uint32_t>(key >> 32), lo = static_cast<uint32_t>(key);
    uint32_t h = (lo ^ ((hi ^ (hi >> 16)) * 0x9e3779b1u)) * 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
  }
  void rehash(int64_t capacity);

  std::vector<uint64_t> keys_;
  std::vector<int32_t> rows_;
  uint64_t mask_ = 0;
  int64_t count_ = 0;
  int64_t initial_capacity_ = 0;
};

// Back-off (A2) for keys a chain misses: none, or tri -> bi (left slot dropped) -> uni, whose kept slot depends on
// the key mode (encoder (PAD,c,PAD), causal (PAD,PAD,r)).
enum class PlotBackoff { None, Encoder, Causal };

// rows[i] = A2 lookup of keys[i] over chain[0..chain_len) (child first): for each candidate (the key, then its
// back-offs), the first table of the chain that holds it. Key 0 (the separator) always reads row 0. Threaded; a
// row depends only on its key.
void plot_lookup_rows(const PlotTable* const* chain, int64_t chain_len, PlotBackoff backoff, const uint64_t* keys, int64_t n,
                      int32_t* rows);

// ---------------------------------------------------------------- fused lookup -> gather -> aggregate (A3)

struct PlotAggregateArgs {
  const PlotTable* const* chain = nullptr;  // child first
  int64_t chain_len = 0;
  PlotBackoff backoff = PlotBackoff::None;
  // keys.ts layout: sequence b's lengths[b] keys, then one separator; n_keys = sum(lengths[b] + 1).
  const uint64_t* keys = nullptr;
  int64_t n_keys = 0;
  const int32_t* lengths = nullptr;  // [batch], each in [0, seq_len]
  int64_t batch = 0, seq_len = 0;
  const int32_t* types = nullptr;  // [batch, seq_len] token types, or null for type 0
  const f16_t* values = nullptr;   // [value_rows, 3, hidden]; row 0 all zeros
  int64_t value_rows = 0, hidden = 0;
  const float* pos_emb = nullptr;   // [>= seq_len, hidden]
  const float* type_emb = nullptr;  // [type_rows > every type, hidden]
  const float* gamma = nullptr;     // [hidden] or null (1)
  const float* beta = nullptr;      // [hidden] or null (0)
  float eps = 1e-12f;
  float* out = nullptr;  // [batch, seq_len, hidden]; positions >= lengths[b] are written 0
};

// The binding checks shapes, the layout of keys and the type ids; these check every looked-up row against
// value_rows (InvalidArgument before anything is written). Values are stored already gated (A4), so the merge is a
// plain sum: z = V[k+i][1] + V[k+i+1][0] (i+1 < len) + V[k+i-1][2] (i > 0); out = LayerNorm(z + pos[i] + type).
// The reference sums and normalises in double; the fast path sums in f32 in that order (bitwise equal on every ISA)
// and normalises with layerNorm's row kernel of the active ISA. Both give the same bits for any thread count.
void plot_lookup_aggregate_ref(const PlotAggregateArgs& a);
void plot_lookup_aggregate(const PlotAggregateArgs& a);

}  // namespace tessera::cpu

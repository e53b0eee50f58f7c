// Attention (f32): double-precision references, the scalar inner step, and the task loops shared by every ISA.
//
// The fast paths keep an online (flash-attention style) softmax per query row: keys arrive in blocks of
// kKeyBlock, each block's scores are computed, the row's running max/sum and V accumulator are rescaled once
// per block, and the block's exp-weighted V rows are added. The per-ISA step (attend_block_*) is in
// attention_simd.h. Work is split into tasks that each own whole output rows and fold key blocks in a fixed
// order, and the task split depends only on the shapes, so results are bitwise identical for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/cpu_features.h"
#include "../core/thread_pool.h"
#include "attention_simd.h"
#include "kernels.h"

namespace tessera::cpu {

namespace {

// Query rows (queries x the GQA group sharing a kv head) per prefill task: each K/V block loaded by a task is
// reused from L1 by this many rows, while the rows' accumulators (32 x d floats) stay small.
constexpr int64_t kRowsPerTask = 32;

AttendBlockFn attend_block_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return attend_block_avx512;
    case Isa::Avx2: return attend_block_avx2;
    default: return attend_block_scalar;
  }
}

// out = acc / sum; a row that saw no visible key has sum 0 and writes zeros.
void finish_row(const SoftmaxRow& row, const float* acc, int64_t d, float* out) {
  if (row.sum == 0.0f) {
    std::fill(out, out + d, 0.0f);
    return;
  }
  for (int64_t c = 0; c < d; ++c) out[c] = acc[c] / row.sum;
}

// Softmax-weighted sum in double over the keys that visible(j) admits; zeros when none is visible.
template <typename KeyRow, typename Visible>
void attend_row_ref(const float* q, int64_t n_keys, int64_t d, double scale, KeyRow key_row, Visible visible, float* out,
                    std::vector<double>& scores, std::vector<double>& sum_v) {
  scores.assign(static_cast<size_t>(n_keys), 0.0);
  double max_score = -INFINITY;
  bool any = false;
  for (int64_t j = 0; j < n_keys; ++j) {
    if (!visible(j)) continue;
    const float* kj = key_row(j).first;
    double dot = 0.0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * static_cast<double>(kj[c]);
    scores[j] = dot * scale;
    max_score = any ? std::max(max_score, scores[j]) : scores[j];
    any = true;
  }
  if (!any) {
    std::fill(out, out + d, 0.0f);
    return;
  }
  sum_v.assign(static_cast<size_t>(d), 0.0);
  double sum = 0.0;
  for (int64_t j = 0; j < n_keys; ++j) {
    if (!visible(j)) continue;
    const double p = std::exp(scores[j] - max_score);
    sum += p;
    const float* vj = key_row(j).second;
    for (int64_t c = 0; c < d; ++c) sum_v[c] += p * static_cast<double>(vj[c]);
  }
  for (int64_t c = 0; c < d; ++c) out[c] = static_cast<float>(sum_v[c] / sum);
}

}  // namespace

// ---------------------------------------------------------------- scalar inner step (mirrors attention_kernel.inl)

void attend_block_scalar(const AttendBlock& b) {
  const int64_t d = b.d;
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* q = b.q[r];
    SoftmaxRow& row = b.state[r];
    float* acc = b.acc + r * d;
    float s[kKeyBlock];
    bool vis[kKeyBlock];
    float block_max = -INFINITY;
    int64_t visible = 0;
    for (int64_t j = 0; j < b.nk[r]; ++j) {
      vis[j] = b.key_mask == nullptr || b.key_mask[j] != 0;
      if (!vis[j]) continue;
      const float* kj = b.k + j * b.kv_stride;
      float dot = 0.0f;
      for (int64_t c = 0; c < d; ++c) dot += q[c] * kj[c];
      s[j] = dot * b.scale;
      block_max = std::max(block_max, s[j]);
      ++visible;
    }
    if (visible == 0) continue;
    const float new_max = std::max(row.max, block_max);
    const float corr = std::exp(row.max - new_max);  // 0 for the first visible block (row.max is -inf)
    float block_sum = 0.0f;
    for (int64_t j = 0; j < b.nk[r]; ++j) {
      if (!vis[j]) continue;
      s[j] = std::exp(s[j] - new_max);
      block_sum += s[j];
    }
    row.sum = row.sum * corr + block_sum;
    row.max = new_max;
    for (int64_t c = 0; c < d; ++c) acc[c] *= corr;
    for (int64_t j = 0; j < b.nk[r]; ++j) {
      if (!vis[j]) continue;  // a padding key's V may hold anything and must not leak in
      const float* vj = b.v + j * b.kv_stride;
      for (int64_t c = 0; c < d; ++c) acc[c] += s[j] * vj[c];
    }
  }
}

// ---------------------------------------------------------------- prefill

void attention_prefill_ref(const PrefillAttentionArgs& a) {
  const int64_t S = a.seq, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim;
  if (a.batch == 0 || S == 0 || H == 0 || D == 0) return;
  const int64_t group = H / KVH;
  std::vector<double> scores, sum_v;
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / group;
        const float* q = a.q + ((b * S + i) * H + h) * D;
        auto key_row = [&](int64_t j) {
          const int64_t off = ((b * S + j) * KVH + g) * D;
          return std::make_pair(a.k + off, a.v + off);
        };
        auto visible = [&](int64_t j) {
          return (!a.causal || j <= i) && (a.key_mask == nullptr || a.key_mask[b * S + j] != 0);
        };
        attend_row_ref(q, S, D, a.scale, key_row, visible, a.out + ((b * S + i) * H + h) * D, scores, sum_v);
      }
    }
  }
}

// One task's online-softmax state for `rows` query rows, and the AttendBlock that points into it
// (the caller fills q, nk and each block's k/v/mask).
struct AttendScratch {
  std::vector<SoftmaxRow> state;
  std::vector<float> acc;
  std::vector<const float*> q_rows;
  std::vector<int64_t> nk;
  AttendBlock blk;

  AttendScratch(int64_t rows, int64_t d, int64_t kv_stride, float scale)
      : state(static_cast<size_t>(rows), SoftmaxRow{-INFINITY, 0.0f}),
        acc(static_cast<size_t>(rows * d), 0.0f),
        q_rows(static_cast<size_t>(rows)),
        nk(static_cast<size_t>(rows)) {
    blk.kv_stride = kv_stride;
    blk.d = d;
    blk.scale = scale;
    blk.rows = rows;
    blk.q = q_rows.data();
    blk.nk = nk.data();
    blk.state = state.data();
    blk.acc = acc.data();
  }
  AttendScratch(const AttendScratch&) = delete;  // blk points into the vectors
  AttendScratch& operator=(const AttendScratch&) = delete;
};

void attention_prefill(const PrefillAttentionArgs& a) {
  const int64_t B = a.batch, S = a.seq, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim;
  if (B == 0 || S == 0 || H == 0 || D == 0) return;
  const int64_t group = H / KVH;
  const int64_t queries_per_task = std::clamp<int64_t>(kRowsPerTask / group, 1, kKeyBlock);
  const int64_t query_blocks = (S + queries_per_task - 1) / queries_per_task;
  const int64_t kv_stride = KVH * D;  // from one position to the next within a kv head
  const AttendBlockFn attend = attend_block_for(active_isa());

  // Task = (sequence, kv head, block of queries): its rows are those queries for every query head of the group,
  // so each K/V block is loaded once for all of them.
  global_pool().parallel_for(B * KVH * query_blocks, [&](int64_t task) {
    const int64_t qblock = task % query_blocks;
    const int64_t g = (task / query_blocks) % KVH;
    const int64_t b = task / (query_blocks * KVH);
    const int64_t i0 = qblock * queries_per_task, i1 = std::min(S, i0 + queries_per_task);
    const int64_t rows = (i1 - i0) * group;
    // Row r = (query i0 + r / group, head g * group + r % group): the group's heads for one query are adjacent.
    AttendScratch scratch(rows, D, kv_stride, a.scale);
    auto& [state, acc, q_rows, nk, blk] = scratch;
    for (int64_t r = 0; r < rows; ++r) q_rows[r] = a.q + ((b * S + i0 + r / group) * H + g * group + r % group) * D;
    const int64_t key_end = a.causal ? i1 : S;  // causal: no query here sees past i1 - 1
    // Blocks start at multiples of kKeyBlock in every task, so a row's result does not depend on its task.
    for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
      const int64_t block_keys = std::min(kKeyBlock, key_end - j0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r / group;
        nk[r] = a.causal ? std::clamp<int64_t>(i - j0 + 1, 0, block_keys) : block_keys;
      }
      blk.k = a.k + ((b * S + j0) * KVH + g) * D;
      blk.v = a.v + ((b * S + j0) * KVH + g) * D;
      blk.key_mask = a.key_mask ? a.key_mask + b * S + j0 : nullptr;
      attend(blk);
    }
    for (int64_t r = 0; r < rows; ++r) {
      finish_row(state[r], acc.data() + r * D, D, a.out + ((b * S + i0 + r / group) * H + g * group + r % group) * D);
    }
  });
}

// ---------------------------------------------------------------- decode over the paged cache

void attention_decode_ref(const DecodeAttentionArgs& a) {
  const int64_t H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim, P = a.page_size;
  if (a.batch == 0 || H == 0 || D == 0) return;
  const int64_t group = H / KVH;
  std::vector<double> scores, sum_v;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int32_t* pages = a.block_table + b * a.max_pages;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      auto key_row = [&](int64_t t) {
        const int64_t off = ((static_cast<int64_t>(pages[t / P]) * P + t % P) * KVH + g) * D;
        return std::make_pair(a.k_cache + off, a.v_cache + off);
      };
      auto visible = [](int64_t) { return true; };
      attend_row_ref(a.q + (b * H + h) * D, a.context_lens[b], D, a.scale, key_row, visible, a.out + (b * H + h) * D,
                     scores, sum_v);
    }
  }
}

void attention_decode(const DecodeAttentionArgs& a) {
  const int64_t B = a.batch, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim, P = a.page_size;
  if (B == 0 || H == 0 || D == 0) return;
  const int64_t group = H / KVH;
  const int64_t kv_stride = KVH * D;   // from one slot of a page to the next within a kv head
  const int64_t page_elems = P * kv_stride;
  const AttendBlockFn attend = attend_block_for(active_isa());

  // Task = (sequence, kv head). The group's query heads walk the pages together, so each K/V row comes from
  // memory once per group and is reused from L1 by the other heads: the point of GQA for decode bandwidth.
  global_pool().parallel_for(B * KVH, [&](int64_t task) {
    const int64_t b = task / KVH, g = task % KVH;
    const int64_t len = a.context_lens[b];
    const int32_t* pages = a.block_table + b * a.max_pages;
    AttendScratch scratch(group, D, kv_stride, a.scale);
    auto& [state, acc, q_rows, nk, blk] = scratch;
    for (int64_t t = 0; t < group; ++t) q_rows[t] = a.q + (b * H + g * group + t) * D;
    // The group's K/V rows are short runs (d floats) a whole cache row apart, in pages scattered over the cache:
    // the hardware prefetchers see no stream, so each page's rows are requested while the page before is being
    // folded in (and the first page's right away).
    auto prefetch_page = [&](int64_t pos) {
      const int64_t base = static_cast<int64_t>(pages[pos / P]) * page_elems + g * D;
      const int64_t rows = std::min(P, len - pos);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t e = 0; e < D; e += 16) {  // one 64-byte line per 16 floats
          __builtin_prefetch(a.k_cache + base + t * kv_stride + e);
          __builtin_prefetch(a.v_cache + base + t * kv_stride + e);
        }
      }
    };
    if (len > 0) prefetch_page(0);
    for (int64_t pos = 0; pos < len; pos += P) {
      if (pos + P < len) prefetch_page(pos + P);
      const int64_t page_base = static_cast<int64_t>(pages[pos / P]) * page_elems + g * D;
      const int64_t in_page = std::min(P, len - pos);
      for (int64_t off = 0; off < in_page; off += kKeyBlock) {  // one block per page when P == kKeyBlock
        std::fill(nk.begin(), nk.end(), std::min(kKeyBlock, in_page - off));
        blk.k = a.k_cache + page_base + off * kv_stride;
        blk.v = a.v_cache + page_base + off * kv_stride;
        attend(blk);
      }
    }
    for (int64_t t = 0; t < group; ++t) finish_row(state[t], acc.data() + t * D, D, a.out + (b * H + g * group + t) * D);
  });
}

}  // namespace tessera::cpu

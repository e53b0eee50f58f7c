// Attention prefill backward (f32): the double-precision reference and the fast path (scalar f32, laid out for the
// compiler to vectorise the d-length dot products and updates).
//
// With s_ij = scale q_i·k_j over the visible keys, P = softmax_j(s), D_i = sum_j P_ij (dO_i·v_j):
//   dq_i = scale sum_j P_ij (dO_i·v_j - D_i) k_j,   dk_j = scale sum_i P_ij (dO_i·v_j - D_i) q_i,   dv_j = sum_i P_ij dO_i
// (the sums over i run over every query head of the kv head's GQA group).
//
// Fast path, two passes with no shared writes:
//   1. one task per (sequence, query head, block of queries): per query row, the scores, its log-sum-exp and D_i,
//      then dq_i with keys in order. lse and D are kept per row.
//   2. one task per (sequence, kv head, block of kKeys keys): for each query position in order, each head of the group
//      in order, and each key of the block, P_ij = exp(s_ij - lse_i) is recomputed with pass 1's arithmetic and
//      dk_j / dv_j accumulate in f32.
// Every output is written by one task in an order fixed by the shapes: bitwise identical for any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/thread_pool.h"
#include "kernels.h"

namespace tessera::cpu {

namespace {

constexpr int64_t kQueries = 16;  // query rows per pass-1 task
constexpr int64_t kKeys = 16;     // keys per pass-2 task

// Dot product in f32 with eight partial sums combined in a fixed tree, then the tail in order.
inline float dot_f(const float* a, const float* b, int64_t d) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= d; c += 8)
    for (int t = 0; t < 8; ++t) s[t] += a[c + t] * b[c + t];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; c < d; ++c) r += a[c] * b[c];
  return r;
}

inline void axpy_f(float alpha, const float* x, float* y, int64_t d) {
  for (int64_t c = 0; c < d; ++c) y[c] += alpha * x[c];
}

struct Layout {
  int64_t S, H, KVH, D, group;
  const float* row(const float* base, int64_t b, int64_t i, int64_t h) const { return base + ((b * S + i) * H + h) * D; }
  const float* kv(const float* base, int64_t b, int64_t j, int64_t g) const { return base + ((b * S + j) * KVH + g) * D; }
};

}  // namespace

void attention_prefill_bwd_ref(const PrefillAttentionBwdArgs& a) {
  const int64_t B = a.batch, S = a.seq, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim;
  if (B == 0 || S == 0 || D == 0) return;
  if (H == 0) {  // kv heads that no query head reads get zero gradients
    std::fill(a.dk, a.dk + B * S * KVH * D, 0.0f);
    std::fill(a.dv, a.dv + B * S * KVH * D, 0.0f);
    return;
  }
  const Layout L{S, H, KVH, D, H / KVH};
  std::vector<double> dk(static_cast<size_t>(B * S * KVH * D), 0.0), dv(dk.size(), 0.0);
  std::vector<double> s(static_cast<size_t>(S)), dp(static_cast<size_t>(S)), dq(static_cast<size_t>(D));
  std::vector<char> vis(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / L.group;
        const float* q = L.row(a.q, b, i, h);
        const float* dout = L.row(a.dout, b, i, h);
        double m = -INFINITY;
        bool any = false;
        for (int64_t j = 0; j < S; ++j) {
          vis[j] = (!a.causal || j <= i) && (a.key_mask == nullptr || a.key_mask[b * S + j] != 0);
          if (!vis[j]) continue;
          const float* kj = L.kv(a.k, b, j, g);
          const float* vj = L.kv(a.v, b, j, g);
          double qk = 0, ov = 0;
          for (int64_t c = 0; c < D; ++c) {
            qk += static_cast<double>(q[c]) * kj[c];
            ov += static_cast<double>(dout[c]) * vj[c];
          }
          s[j] = qk * a.scale;
          dp[j] = ov;
          m = any ? std::max(m, s[j]) : s[j];
          any = true;
        }
        float* dq_out = a.dq + ((b * S + i) * H + h) * D;
        if (!any) {
          std::fill(dq_out, dq_out + D, 0.0f);
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j)
          if (vis[j]) sum += std::exp(s[j] - m);
        double delta = 0;
        for (int64_t j = 0; j < S; ++j) {
          if (!vis[j]) continue;
          s[j] = std::exp(s[j] - m) / sum;  // now P_ij
          delta += s[j] * dp[j];
        }
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int64_t j = 0; j < S; ++j) {
          if (!vis[j]) continue;
          const double ds = s[j] * (dp[j] - delta) * a.scale;
          const float* kj = L.kv(a.k, b, j, g);
          const int64_t off = ((b * S + j) * KVH + g) * D;
          for (int64_t c = 0; c < D; ++c) {
            dq[c] += ds * kj[c];
            dk[off + c] += ds * q[c];
            dv[off + c] += s[j] * dout[c];
          }
        }
        for (int64_t c = 0; c < D; ++c) dq_out[c] = static_cast<float>(dq[c]);
      }
    }
  }
  for (size_t e = 0; e < dk.size(); ++e) {
    a.dk[e] = static_cast<float>(dk[e]);
    a.dv[e] = static_cast<float>(dv[e]);
  }
}

void attention_prefill_bwd(const PrefillAttentionBwdArgs& a) {
  const int64_t B = a.batch, S = a.seq, H = a.n_heads, KVH = a.n_kv_heads, D = a.head_dim;
  if (B == 0 || S == 0 || D == 0) return;
  if (H == 0) {  // kv heads that no query head reads get zero gradients
    std::fill(a.dk, a.dk + B * S * KVH * D, 0.0f);
    std::fill(a.dv, a.dv + B * S * KVH * D, 0.0f);
    return;
  }
  const Layout L{S, H, KVH, D, H / KVH};
  const int64_t group = L.group;
  std::vector<float> lse(static_cast<size_t>(B * S * H)), delta(lse.size());
  const auto visible = [&](int64_t b, int64_t j) { return a.key_mask == nullptr || a.key_mask[b * S + j] != 0; };

  // Pass 1: dq, and each row's lse and D.
  const int64_t qblocks = (S + kQueries - 1) / kQueries;
  global_pool().parallel_for(B * H * qblocks, [&](int64_t task) {
    const int64_t qb = task % qblocks, h = (task / qblocks) % H, b = task / (qblocks * H), g = h / group;
    std::vector<float> s(static_cast<size_t>(S)), dp(static_cast<size_t>(S));
    for (int64_t i = qb * kQueries; i < std::min(S, (qb + 1) * kQueries); ++i) {
      const int64_t row = (b * S + i) * H + h;
      const float* q = a.q + row * D;
      const float* dout = a.dout + row * D;
      float* dq = a.dq + row * D;
      std::fill(dq, dq + D, 0.0f);
      const int64_t nk = a.causal ? i + 1 : S;
      float m = -INFINITY;
      bool any = false;
      for (int64_t j = 0; j < nk; ++j) {
        if (!visible(b, j)) continue;
        s[j] = dot_f(q, L.kv(a.k, b, j, g), D) * a.scale;
        dp[j] = dot_f(dout, L.kv(a.v, b, j, g), D);
        m = any ? std::max(m, s[j]) : s[j];
        any = true;
      }
      if (!any) {
        lse[row] = -INFINITY;
        delta[row] = 0.0f;
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < nk; ++j)
        if (visible(b, j)) sum += std::exp(s[j] - m);
      const float l = static_cast<float>(static_cast<double>(m) + std::log(sum));
      double dsum = 0;
      for (int64_t j = 0; j < nk; ++j) {
        if (!visible(b, j)) continue;
        s[j] = std::exp(s[j] - l);  // P_ij
        dsum += static_cast<double>(s[j]) * dp[j];
      }
      const float dl = static_cast<float>(dsum);
      lse[row] = l;
      delta[row] = dl;
      for (int64_t j = 0; j < nk; ++j) {
        if (!visible(b, j)) continue;
        axpy_f(s[j] * (dp[j] - dl) * a.scale, L.kv(a.k, b, j, g), dq, D);
      }
    }
  });

  // Pass 2: dk, dv per block of keys of one kv head.
  const int64_t kblocks = (S + kKeys - 1) / kKeys;
  global_pool().parallel_for(B * KVH * kblocks, [&](int64_t task) {
    const int64_t kb = task % kblocks, g = (task / kblocks) % KVH, b = task / (kblocks * KVH);
    const int64_t j0 = kb * kKeys, j1 = std::min(S, j0 + kKeys), nj = j1 - j0;
    std::vector<float> dk(static_cast<size_t>(nj * D), 0.0f), dv(static_cast<size_t>(nj * D), 0.0f);
    bool vis[kKeys];
    for (int64_t j = j0; j < j1; ++j) vis[j - j0] = visible(b, j);
    for (int64_t i = a.causal ? j0 : 0; i < S; ++i) {
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t row = (b * S + i) * H + h;
        if (lse[row] == -INFINITY) continue;
        const float* q = a.q + row * D;
        const float* dout = a.dout + row * D;
        const int64_t jend = a.causal ? std::min(j1, i + 1) : j1;
        for (int64_t j = j0; j < jend; ++j) {
          if (!vis[j - j0]) continue;
          const float p = std::exp(dot_f(q, L.kv(a.k, b, j, g), D) * a.scale - lse[row]);
          const float ds = p * (dot_f(dout, L.kv(a.v, b, j, g), D) - delta[row]) * a.scale;
          axpy_f(p, dout, dv.data() + (j - j0) * D, D);
          axpy_f(ds, q, dk.data() + (j - j0) * D, D);
        }
      }
    }
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t off = ((b * S + j) * KVH + g) * D;
      std::copy(dk.begin() + (j - j0) * D, dk.begin() + (j - j0 + 1) * D, a.dk + off);
      std::copy(dv.begin() + (j - j0) * D, dv.begin() + (j - j0 + 1) * D, a.dv + off);
    }
  });
}

}  // namespace tessera::cpu

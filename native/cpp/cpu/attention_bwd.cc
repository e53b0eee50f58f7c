// Attention prefill backward (f32): the double-precision reference and the fast path (blocks of queries through the
// CPU GEMM, with the softmax and its backward between the products).
//
// With s_ij = scale q_i·k_j over the visible keys, P = softmax_j(s), D_i = sum_j P_ij (dO_i·v_j):
//   dq_i = scale sum_j P_ij (dO_i·v_j - D_i) k_j,   dk_j = scale sum_i P_ij (dO_i·v_j - D_i) q_i,   dv_j = sum_i P_ij dO_i
// (the sums over i run over every query head of the kv head's GQA group).
//
// Fast path: one task per (sequence, kv head), every product a GEMM on the CPU GEMM (see attention_prefill_bwd).
// dk / dv of a kv head sum over its group's query heads in order, then over blocks of queries in order, with the
// GEMM's fixed reduction order inside a block: bitwise identical for any thread count (nested GEMMs run inline).
#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/thread_pool.h"
#include "kernels.h"

namespace tessera::cpu {

namespace {

// Query rows per block: P and dS of a block ([rows, seq] each) stay in L2 up to seq ≈ 1,000.
constexpr int64_t kQueryBlock = 64;

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
  const int64_t group = H / KVH;
  const int64_t ldq = H * D, ldkv = KVH * D;
  // One task per (sequence, kv head): it owns dk / dv of that head and dq of its group's query heads, so nothing
  // is shared. Per query head of the group (in order) and block of queries (in order), all products are GEMMs:
  //   S = scale Q Kᵀ, P = softmax(S) over the visible keys, dP = dO Vᵀ, D_i = Σ_j P_ij dP_ij,
  //   dS = scale P ∘ (dP − D), dQ = dS K, dV += Pᵀ dO, dK += dSᵀ Q.
  // A causal block of queries [i0, i1) reads keys [0, i1) only; masked entries of P and dS are 0.
  global_pool().parallel_for(B * KVH, [&](int64_t task) {
    const int64_t b = task / KVH, g = task % KVH;
    const float* kg = a.k + (b * S * KVH + g) * D;
    const float* vg = a.v + (b * S * KVH + g) * D;
    float* dkg = a.dk + (b * S * KVH + g) * D;
    float* dvg = a.dv + (b * S * KVH + g) * D;
    for (int64_t j = 0; j < S; ++j) {
      std::fill(dkg + j * ldkv, dkg + j * ldkv + D, 0.0f);
      std::fill(dvg + j * ldkv, dvg + j * ldkv + D, 0.0f);
    }
    std::vector<float> p(static_cast<size_t>(kQueryBlock * S)), dp(p.size());
    std::vector<char> vis(static_cast<size_t>(S));
    for (int64_t j = 0; j < S; ++j) vis[j] = a.key_mask == nullptr || a.key_mask[b * S + j] != 0;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float* qh = a.q + (b * S * H + h) * D;
      const float* doh = a.dout + (b * S * H + h) * D;
      float* dqh = a.dq + (b * S * H + h) * D;
      for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
        const int64_t nq = std::min(kQueryBlock, S - i0);
        const int64_t nk = a.causal ? i0 + nq : S;  // keys any query of the block may see
        GemmArgs sc;  // P <- scale Q Kᵀ (scores, then probabilities in place)
        sc.m = nq; sc.n = nk; sc.k = D;
        sc.a = qh + i0 * ldq; sc.lda = ldq;
        sc.b = kg; sc.ldb = ldkv; sc.trans_b = true;
        sc.c = p.data(); sc.ldc = nk; sc.alpha = a.scale;
        gemm(sc);
        GemmArgs od = sc;  // dP <- dO Vᵀ
        od.a = doh + i0 * ldq; od.b = vg; od.c = dp.data(); od.alpha = 1.0f;
        gemm(od);
        for (int64_t r = 0; r < nq; ++r) {
          float* pr = p.data() + r * nk;
          float* dpr = dp.data() + r * nk;
          const int64_t end = a.causal ? i0 + r + 1 : nk;
          float m = -INFINITY;
          for (int64_t j = 0; j < end; ++j)
            if (vis[j]) m = std::max(m, pr[j]);
          if (m == -INFINITY) {  // no visible key: P = dS = 0
            std::fill(pr, pr + nk, 0.0f);
            std::fill(dpr, dpr + nk, 0.0f);
            continue;
          }
          double sum = 0;
          for (int64_t j = 0; j < end; ++j) {
            const float e = vis[j] ? std::exp(pr[j] - m) : 0.0f;
            pr[j] = e;
            sum += e;
          }
          const float inv = static_cast<float>(1.0 / sum);
          double delta = 0;
          for (int64_t j = 0; j < end; ++j) {
            pr[j] *= inv;
            delta += static_cast<double>(pr[j]) * dpr[j];
          }
          const float dl = static_cast<float>(delta);
          for (int64_t j = 0; j < end; ++j) dpr[j] = pr[j] * (dpr[j] - dl) * a.scale;  // now dS
          std::fill(pr + end, pr + nk, 0.0f);
          std::fill(dpr + end, dpr + nk, 0.0f);
        }
        GemmArgs dqa;  // dQ <- dS K
        dqa.m = nq; dqa.n = D; dqa.k = nk;
        dqa.a = dp.data(); dqa.lda = nk;
        dqa.b = kg; dqa.ldb = ldkv;
        dqa.c = dqh + i0 * ldq; dqa.ldc = ldq;
        gemm(dqa);
        GemmArgs dva;  // dV += Pᵀ dO
        dva.m = nk; dva.n = D; dva.k = nq;
        dva.a = p.data(); dva.lda = nk; dva.trans_a = true;
        dva.b = doh + i0 * ldq; dva.ldb = ldq;
        dva.c = dvg; dva.ldc = ldkv; dva.beta = 1.0f;
        gemm(dva);
        GemmArgs dka = dva;  // dK += dSᵀ Q
        dka.a = dp.data(); dka.b = qh + i0 * ldq; dka.c = dkg;
        gemm(dka);
      }
    }
  });
}

}  // namespace tessera::cpu

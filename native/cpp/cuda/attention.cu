// Attention (f32) and RoPE.
//
// Decode over the paged KV cache and prefill over contiguous K/V share one kernel body: one block of four warps per
// query vector, or per group of up to four query heads that share a KV head (decode: one (sequence, heads); prefill:
// one (sequence, position, head)). The query sits in
// registers (lane l owns dims l, l+32, ...); each warp walks every fourth run of kKeysPerStep keys with an online
// softmax (running max, running sum, rescaled accumulator), and the four partial states are merged in warp order at
// the end, so the result is deterministic. GQA: head h reads kv head h / (n_heads / n_kv_heads). Keys with no weight (causal,
// padding mask) are skipped; a query with no visible key writes zeros. Head dims above 256 use the reference.
// Prefill is this SIMT kernel, not a tiled tensor-core flash attention: correct for any shape, O(seq^2 d) work.
//
// References: one thread per output element, three passes over the keys (max, sum, weighted sum) in double.
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_common.cuh"

namespace tessera::gpu {

namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kKeysPerStep = 4;  // keys a warp loads at once (see attend)
constexpr int64_t kMaxGridYZ = 65535;

// Key j's K and V rows for one query, and whether it takes part.
// Pages hold kPageSize (16) tokens; the binding rejects any other cache layout, so the page arithmetic is shifts.
struct PagedKeys {
  const float* k_cache; const float* v_cache; const int32_t* pages;  // this sequence's row of the block table
  int64_t n_kv, d, kvh;
  __device__ bool row(int64_t j, const float** kr, const float** vr) const {
    const int64_t slot = (static_cast<int64_t>(pages[j / kPageSize]) * kPageSize + j % kPageSize) * n_kv + kvh;
    *kr = k_cache + slot * d;
    *vr = v_cache + slot * d;
    return true;
  }
};

struct ContiguousKeys {
  const float* k; const float* v; const uint8_t* mask;  // k/v/mask already offset to this sequence
  int64_t n_kv, d, kvh;
  __device__ bool row(int64_t j, const float** kr, const float** vr) const {
    if (mask && mask[j] == 0) return false;
    *kr = k + (j * n_kv + kvh) * d;
    *vr = v + (j * n_kv + kvh) * d;
    return true;
  }
};

// Attends kG queries that share one KV head (query g at q + g·d, its output at out + g·d) to keys [0, nkeys).
// Called by a whole block. Each K and V row is loaded once for the kG queries: GQA's query heads of one group read
// the same rows, and one head per block re-read them kG times.
template <int kDpl, int kG, typename Keys>
__device__ void attend(const float* q, const Keys& keys, int64_t nkeys, int d, float scale, float* out) {
  __shared__ float part_acc[kWarps][kG][32 * kDpl];
  __shared__ float part_m[kWarps][kG], part_l[kWarps][kG];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float qr[kG][kDpl], acc[kG][kDpl], m[kG], l[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int t = 0; t < kDpl; ++t) {
      const int dd = lane + 32 * t;
      qr[g][t] = dd < d ? q[g * d + dd] : 0.0f;
      acc[g][t] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  // Each warp takes kKeysPerStep consecutive keys per step and issues all their K and V loads before using any:
  // one key at a time left each warp waiting out a load and a shuffle reduction per key (the H100 check measured
  // decode at 31 % of HBM). The online softmax then folds the step's keys in key order.
  for (int64_t j0 = static_cast<int64_t>(warp) * kKeysPerStep; j0 < nkeys; j0 += static_cast<int64_t>(kWarps) * kKeysPerStep) {
    float kv[kKeysPerStep][kDpl], vv[kKeysPerStep][kDpl];
    bool vis[kKeysPerStep];
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      const float* kr = nullptr;
      const float* vr = nullptr;
      vis[u] = j0 + u < nkeys && keys.row(j0 + u, &kr, &vr);  // depends on the key only: uniform over the warp
#pragma unroll
      for (int t = 0; t < kDpl; ++t) {
        const int dd = lane + 32 * t;
        const bool in = vis[u] && dd < d;
        kv[u][t] = in ? kr[dd] : 0.0f;
        vv[u][t] = in ? vr[dd] : 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      float s[kKeysPerStep];
#pragma unroll
      for (int u = 0; u < kKeysPerStep; ++u) {
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < kDpl; ++t) dot = fmaf(qr[g][t], kv[u][t], dot);
        s[u] = warp_sum(dot) * scale;
      }
#pragma unroll
      for (int u = 0; u < kKeysPerStep; ++u) {
        if (!vis[u]) continue;
        const float m_new = fmaxf(m[g], s[u]);
        const float corr = expf(m[g] - m_new);  // 0 on the first visible key (m = -inf)
        const float p = expf(s[u] - m_new);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int t = 0; t < kDpl; ++t) acc[g][t] = acc[g][t] * corr + p * vv[u][t];
        m[g] = m_new;
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int t = 0; t < kDpl; ++t) part_acc[warp][g][lane + 32 * t] = acc[g][t];
    if (lane == 0) {
      part_m[warp][g] = m[g];
      part_l[warp][g] = l[g];
    }
  }
  __syncthreads();
  for (int g = 0; g < kG; ++g) {
    float big_m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) big_m = fmaxf(big_m, part_m[w][g]);
    float weight[kWarps];
    float big_l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = part_m[w][g] == -INFINITY ? 0.0f : expf(part_m[w][g] - big_m);  // a warp that saw no key adds nothing
      big_l += part_l[w][g] * weight[w];
    }
    for (int dd = threadIdx.x; dd < d; dd += blockDim.x) {
      float o = 0.0f;
      if (big_m != -INFINITY) {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) o += part_acc[w][g][dd] * weight[w];
        o /= big_l;
      }
      out[g * d + dd] = o;
    }
  }
  __syncthreads();  // the partials are reused by the block's next query
}

// One block per (sequence, kG consecutive query heads of one KV head); kG divides the GQA group (see attention_decode).
template <int kDpl, int kG>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeAttentionArgs a) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t blocks = a.n_heads / kG;
  for (int64_t b = blockIdx.y; b < a.batch; b += gridDim.y) {
    for (int64_t hb = blockIdx.x; hb < blocks; hb += gridDim.x) {
      const int64_t h = hb * kG;  // the block's first query head; all kG share KV head h / group
      const PagedKeys keys{a.k_cache, a.v_cache, a.block_table + b * a.max_pages, a.n_kv_heads, a.head_dim, h / group};
      const int64_t row = (b * a.n_heads + h) * a.head_dim;
      attend<kDpl, kG>(a.q + row, keys, a.context_lens[b], static_cast<int>(a.head_dim), a.scale, a.out + row);
    }
  }
}

template <int kDpl>
__global__ void __launch_bounds__(kThreads) prefill_kernel(PrefillAttentionArgs a) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  for (int64_t b = blockIdx.z; b < a.batch; b += gridDim.z) {
    for (int64_t i = blockIdx.y; i < a.seq; i += gridDim.y) {
      for (int64_t h = blockIdx.x; h < a.n_heads; h += gridDim.x) {
        const int64_t kv_off = b * a.seq * a.n_kv_heads * a.head_dim;
        const ContiguousKeys keys{a.k + kv_off, a.v + kv_off, a.key_mask ? a.key_mask + b * a.seq : nullptr,
                                  a.n_kv_heads, a.head_dim, h / group};
        const int64_t row = ((b * a.seq + i) * a.n_heads + h) * a.head_dim;
        attend<kDpl, 1>(a.q + row, keys, a.causal ? i + 1 : a.seq, static_cast<int>(a.head_dim), a.scale, a.out + row);
      }
    }
  }
}

// ---------------------------------------------------------------- references

// One output element: softmax over the visible keys in double, three passes.
template <typename Keys>
__device__ float attend_ref(const float* q, const Keys& keys, int64_t nkeys, int64_t d, double scale, int64_t dd) {
  const float* kr;
  const float* vr;
  double m = -INFINITY;
  for (int64_t j = 0; j < nkeys; ++j) {
    if (!keys.row(j, &kr, &vr)) continue;
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += static_cast<double>(q[c]) * kr[c];
    m = fmax(m, s * scale);
  }
  if (m == -INFINITY) return 0.0f;  // no visible key
  double sum = 0, acc = 0;
  for (int64_t j = 0; j < nkeys; ++j) {
    if (!keys.row(j, &kr, &vr)) continue;
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += static_cast<double>(q[c]) * kr[c];
    const double p = exp(s * scale - m);
    sum += p;
    acc += p * vr[dd];
  }
  return static_cast<float>(acc / sum);
}

__global__ void decode_ref_kernel(DecodeAttentionArgs a) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= a.batch * a.n_heads * a.head_dim) return;
  const int64_t dd = e % a.head_dim, h = (e / a.head_dim) % a.n_heads, b = e / (a.head_dim * a.n_heads);
  const PagedKeys keys{a.k_cache, a.v_cache, a.block_table + b * a.max_pages, a.n_kv_heads, a.head_dim,
                       h / (a.n_heads / a.n_kv_heads)};
  a.out[e] = attend_ref(a.q + (b * a.n_heads + h) * a.head_dim, keys, a.context_lens[b], a.head_dim, a.scale, dd);
}

__global__ void prefill_ref_kernel(PrefillAttentionArgs a) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= a.batch * a.seq * a.n_heads * a.head_dim) return;
  const int64_t dd = e % a.head_dim, h = (e / a.head_dim) % a.n_heads, i = (e / (a.head_dim * a.n_heads)) % a.seq,
                b = e / (a.head_dim * a.n_heads * a.seq);
  const int64_t kv_off = b * a.seq * a.n_kv_heads * a.head_dim;
  const ContiguousKeys keys{a.k + kv_off, a.v + kv_off, a.key_mask ? a.key_mask + b * a.seq : nullptr, a.n_kv_heads,
                            a.head_dim, h / (a.n_heads / a.n_kv_heads)};
  a.out[e] = attend_ref(a.q + e - dd, keys, a.causal ? i + 1 : a.seq, a.head_dim, a.scale, dd);
}

// ---------------------------------------------------------------- RoPE

// The angle pos * base^(-2i/rot_dim) and its sine and cosine are computed in double: in f32 the angle alone loses
// about pos * 2^-24 radians, which at positions in the tens of thousands is visible in the output.
__device__ __forceinline__ void rotate_pair(float* xh, int64_t i, int64_t half, int64_t rot_dim, double pos, double log_base, bool inverse) {
  const double inv_freq = exp(-log_base * static_cast<double>(2 * i) / static_cast<double>(rot_dim));
  double s, c;
  sincos(pos * inv_freq, &s, &c);
  if (inverse) s = -s;  // the backward: rotate by -angle
  const double x1 = xh[i], x2 = xh[i + half];
  xh[i] = static_cast<float>(x1 * c - x2 * s);
  xh[i + half] = static_cast<float>(x2 * c + x1 * s);
}

// Fast: one thread per rotated pair, grid-stride.
__global__ void rope_kernel(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, double log_base, bool inverse) {
  const int64_t half = rot_dim / 2, total = tokens * heads * half;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % half, th = e / half, t = th / heads;
    rotate_pair(x + th * head_dim, i, half, rot_dim, static_cast<double>(positions[t]), log_base, inverse);
  }
}

// Reference: one thread per (token, head), pairs in order.
__global__ void rope_ref_kernel(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, double log_base, bool inverse) {
  const int64_t th = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (th >= tokens * heads) return;
  const int64_t half = rot_dim / 2;
  for (int64_t i = 0; i < half; ++i) rotate_pair(x + th * head_dim, i, half, rot_dim, static_cast<double>(positions[th / heads]), log_base, inverse);
}

unsigned cap(int64_t n, int64_t limit) { return static_cast<unsigned>(n < limit ? n : limit); }

unsigned ref_grid(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "attention reference: too many outputs for one launch");
  return static_cast<unsigned>(blocks);
}

// Dims per lane for the fast kernels: the smallest of 1, 2, 4, 8 covering head_dim.
int dims_per_lane(int64_t d) { return d <= 32 ? 1 : d <= 64 ? 2 : d <= 128 ? 4 : 8; }

}  // namespace

void attention_decode(const DecodeAttentionArgs& a, bool reference) {
  if (a.page_size != kPageSize)
    fail(ErrorCode::InvalidArgument, "attention_decode: pages must hold " + std::to_string(kPageSize) + " tokens, got " + std::to_string(a.page_size));
  if (a.batch == 0 || a.n_heads == 0 || a.head_dim == 0) return;
  if (reference || a.head_dim > kAttentionMaxFastHeadDim) {
    decode_ref_kernel<<<ref_grid(a.batch * a.n_heads * a.head_dim, 128), 128>>>(a);
    check_launch("attention_decode_ref_kernel");
    return;
  }
  // Query heads per block: the most of 4, 2, 1 that divides the GQA group, with at most 16 query values per lane
  // (kG x kDpl) so the queries, accumulators and four keys' K/V rows stay in registers.
  const int dpl = dims_per_lane(a.head_dim);
  const int64_t group = a.n_heads / a.n_kv_heads;
  int heads = 1;
  for (int g : {4, 2}) {
    if (group % g == 0 && g * dpl <= 16) {
      heads = g;
      break;
    }
  }
  const dim3 grid(cap(a.n_heads / heads, 0x7fffffffLL), cap(a.batch, kMaxGridYZ));
  switch (dpl * 10 + heads) {
    case 11: decode_kernel<1, 1><<<grid, kThreads>>>(a); break;
    case 12: decode_kernel<1, 2><<<grid, kThreads>>>(a); break;
    case 14: decode_kernel<1, 4><<<grid, kThreads>>>(a); break;
    case 21: decode_kernel<2, 1><<<grid, kThreads>>>(a); break;
    case 22: decode_kernel<2, 2><<<grid, kThreads>>>(a); break;
    case 24: decode_kernel<2, 4><<<grid, kThreads>>>(a); break;
    case 41: decode_kernel<4, 1><<<grid, kThreads>>>(a); break;
    case 42: decode_kernel<4, 2><<<grid, kThreads>>>(a); break;
    case 44: decode_kernel<4, 4><<<grid, kThreads>>>(a); break;
    case 81: decode_kernel<8, 1><<<grid, kThreads>>>(a); break;
    default: decode_kernel<8, 2><<<grid, kThreads>>>(a); break;
  }
  check_launch("attention_decode_kernel");
}

void attention_prefill(const PrefillAttentionArgs& a, bool reference) {
  if (a.batch == 0 || a.seq == 0 || a.n_heads == 0 || a.head_dim == 0) return;
  if (reference || a.head_dim > kAttentionMaxFastHeadDim) {
    prefill_ref_kernel<<<ref_grid(a.batch * a.seq * a.n_heads * a.head_dim, 128), 128>>>(a);
    check_launch("attention_prefill_ref_kernel");
    return;
  }
  const dim3 grid(cap(a.n_heads, 0x7fffffffLL), cap(a.seq, kMaxGridYZ), cap(a.batch, kMaxGridYZ));
  switch (dims_per_lane(a.head_dim)) {
    case 1: prefill_kernel<1><<<grid, kThreads>>>(a); break;
    case 2: prefill_kernel<2><<<grid, kThreads>>>(a); break;
    case 4: prefill_kernel<4><<<grid, kThreads>>>(a); break;
    default: prefill_kernel<8><<<grid, kThreads>>>(a); break;
  }
  check_launch("attention_prefill_kernel");
}

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t rot_dim, const int32_t* positions, float base, bool inverse, bool reference) {
  if (tokens == 0 || heads == 0 || rot_dim == 0) return;
  const double log_base = std::log(static_cast<double>(base));
  if (reference) {
    rope_ref_kernel<<<ref_grid(tokens * heads, 128), 128>>>(x, tokens, heads, head_dim, rot_dim, positions, log_base, inverse);
    check_launch("rope_ref_kernel");
  } else {
    rope_kernel<<<grid_for(tokens * heads * (rot_dim / 2), 256), 256>>>(x, tokens, heads, head_dim, rot_dim, positions, log_base, inverse);
    check_launch("rope_kernel");
  }
}

}  // namespace tessera::gpu

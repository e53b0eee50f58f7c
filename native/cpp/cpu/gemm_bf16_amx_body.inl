// The bf16-compute GEMM body on AMX-BF16 tiles (plan and layout: GemmBf16Plan in gemm_simd.h, as the VDPBF16PS
// path). Included inside an anonymous namespace by gemm_bf16_amx.cc (the tile instructions) and by
// gemm_bf16_amx_emu_avx512.cc (a plain C++ emulation of them, so the tiling, tails and epilogue are checked on every
// AVX-512 machine, not only on the few with AMX). The includer defines, before this file:
//   AMX_CONFIG(cfg)  AMX_RELEASE()  AMX_ZERO(t)  AMX_LOAD(t, ptr, stride_bytes)  AMX_STORE(t, ptr, stride_bytes)
//   AMX_DP(c, a, b)  (TDPBF16PS: tile c [M x N f32] += tile a [M x K pairs] . tile b [K pairs x N pair words])
// with literal tile numbers, and includes gemm_tile_avx512.inl (transpose16, lane_mask).
//
// Z = C^T = W . op(A)^T as on VDPBF16PS: tile a = 16 weight rows copied in tile order (32 bf16 of k = 16 pairs, one 64-byte
// row each), tile b = 16 pair rows of a packed op(A) panel (16 rows of op(A) per pair row), tile c = 16 weight rows x
// 16 rows of op(A) in f32. Tiles 0..3 accumulate a 32 x 32 block of Z, 4..5 hold weight rows, 6..7 panel columns.
// Each output sums the pairs of one k block in k order (TDPBF16PS adds the even then the odd product of a pair, in
// f32, rounding each add), and the k blocks are added in order, so a row's result depends neither on m, on its batch
// mates, on the thread count nor on the chunking below. Tails (weight rows short of 16, pairs short of 16, odd k) go
// through zero-padded 16 x 64-byte copies, so no tile reads past a row's end or past the block's pairs.

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

constexpr int kTilePairs = 16;     // pairs per 64-byte tile row
constexpr int kAmxRows = 32;       // weight rows per block (tiles 4, 5)
constexpr int kAmxCols = 32;       // rows of op(A) per block (tiles 6, 7)

inline TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  return c;
}

// Pairs per chunk: a block of 32 weight rows over one chunk is copied into tile order (16 KB, in L1) and meets every
// panel block of the task there, whose C tiles wait in the task's accumulators between chunks (f32 stored and
// reloaded exactly, so the chunks change no bit of the k-ordered sums). The copy also keeps the tile loads off the
// weights' row stride, a power of two at model sizes, whose 32 rows would all fall in the same few L1 sets.
// A multiple of kTilePairs, so only a k block's end has a short step.
constexpr int64_t kAmxChunkPairs = 128;
constexpr int64_t kAmxChunkSteps = kAmxChunkPairs / kTilePairs;

// Padded copies of tail tiles, and one chunk of a weight block in tile order.
struct alignas(64) AmxPads {
  uint32_t y[2][16 * 16];
  uint16_t w_tail[2][16 * 32];
  uint16_t w[kAmxChunkSteps][2][16 * 32];  // step, tile (rows 0..15, 16..31), 16 rows of 32 bf16
};

// Weight rows [0, w_rows) of w, pairs [c0, c0 + cn), into tile order, zero padded: rows past w_rows, pairs past cn
// and the odd element past k. Prefetches the rows' next chunk.
void pack_weight_chunk(const uint16_t* w, int64_t ldw, int w_rows, int64_t c0, int64_t cn, int64_t k, AmxPads& pads) {
  const int64_t steps = gemm_detail::gemm_ceil_div(cn, kTilePairs);
  const int64_t elems = std::min<int64_t>(2 * cn, k - 2 * c0);  // valid bf16 of each row in the chunk
  const int64_t next = 2 * (c0 + cn);
  for (int r = 0; r < kAmxRows; ++r) {
    const uint16_t* src = w + r * ldw + 2 * c0;
    if (r < w_rows && next < k)
      for (int64_t e = 0; e < std::min<int64_t>(2 * kAmxChunkPairs, k - next); e += 32)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * ldw + next + e), _MM_HINT_T0);
    for (int64_t st = 0; st < steps; ++st) {
      uint16_t* dst = pads.w[st][r / 16] + (r % 16) * 32;
      const int64_t valid = r < w_rows ? std::min<int64_t>(32, elems - 32 * st) : 0;
      const __mmask32 m = valid >= 32 ? ~__mmask32(0) : valid <= 0 ? __mmask32(0) : static_cast<__mmask32>((1u << valid) - 1u);
      _mm512_storeu_si512(dst, _mm512_maskz_loadu_epi16(m, src + 32 * st));
    }
  }
}

// A weight tile read in place (a task with one block of columns, which would use a packed copy once): 16 rows from
// w (row 0 of the tile), pairs [g, g + pairs); tails through a zero-padded copy.
inline const void* weight_tile(const uint16_t* w, int64_t ldw, int rows, int64_t g, int64_t pairs, int64_t k, uint16_t* pad,
                               int64_t* stride) {
  if (rows == 16 && pairs == kTilePairs && 2 * (g + kTilePairs) <= k) {
    *stride = ldw * 2;
    return w + 2 * g;
  }
  const int64_t elems = std::min<int64_t>(2 * pairs, k - 2 * g);
  std::memset(pad, 0, 16 * 64);
  for (int r = 0; r < rows; ++r) std::memcpy(pad + r * 32, w + r * ldw + 2 * g, static_cast<size_t>(elems) * 2);
  *stride = 64;
  return pad;
}

// The source of a panel tile: pair rows [g, g + pairs) of 16 panel columns (the panel's words `y`, `width` per pair).
inline const void* panel_tile(const uint32_t* y, int64_t width, int64_t g, int64_t pairs, uint32_t* pad, int64_t* stride) {
  if (pairs == kTilePairs) {
    *stride = width * 4;
    return y + g * width;
  }
  std::memset(pad, 0, 16 * 64);
  for (int64_t i = 0; i < pairs; ++i) std::memcpy(pad + i * 16, y + (g + i) * width, 64);
  *stride = 64;
  return pad;
}

// One block over one chunk: the packed weight chunk (MB tiles of 16 rows) against NB panel tiles of 16 columns from
// y (the panel at the block's first column) over pairs [c0, c0 + cn). The C tiles start from zero (`fresh`) or from
// acc (4 tiles of 16 x 16 f32), and end in acc.
// `w` (not null: the block's weight rows in place, w_rows of them, ldw apart) replaces the packed chunk when the
// task has a single block of columns.
template <int MB, int NB>
void amx_block(const uint32_t* y, int64_t width, int64_t c0, int64_t cn, float* acc, bool fresh, AmxPads& pads,
               const uint16_t* w, int64_t ldw, int w_rows, int64_t k) {
  if (fresh) {
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    AMX_ZERO(3);
  } else {
    AMX_LOAD(0, acc, 64);
    if constexpr (NB == 2) AMX_LOAD(1, acc + 256, 64);
    if constexpr (MB == 2) {
      AMX_LOAD(2, acc + 512, 64);
      if constexpr (NB == 2) AMX_LOAD(3, acc + 768, 64);
    }
  }
  for (int64_t st = 0; st * kTilePairs < cn; ++st) {
    const int64_t g = c0 + st * kTilePairs;
    const int64_t pairs = std::min<int64_t>(kTilePairs, c0 + cn - g);
    int64_t sy0 = 0, sy1 = 0;
    const void* y0 = panel_tile(y, width, g, pairs, pads.y[0], &sy0);
    int64_t sw0 = 64, sw1 = 64;
    const void* w0 = w ? weight_tile(w, ldw, std::min(w_rows, 16), g, pairs, k, pads.w_tail[0], &sw0) : pads.w[st][0];
    AMX_LOAD(4, w0, sw0);
    AMX_LOAD(6, y0, sy0);
    if constexpr (NB == 2) {
      const void* y1 = panel_tile(y + 16, width, g, pairs, pads.y[1], &sy1);
      AMX_LOAD(7, y1, sy1);
    }
    if constexpr (MB == 2) {
      const void* w1 = w ? weight_tile(w + 16 * ldw, ldw, w_rows - 16, g, pairs, k, pads.w_tail[1], &sw1) : pads.w[st][1];
      AMX_LOAD(5, w1, sw1);
    }
    AMX_DP(0, 4, 6);
    if constexpr (NB == 2) AMX_DP(1, 4, 7);
    if constexpr (MB == 2) {
      AMX_DP(2, 5, 6);
      if constexpr (NB == 2) AMX_DP(3, 5, 7);
    }
  }
  AMX_STORE(0, acc, 64);
  if constexpr (NB == 2) AMX_STORE(1, acc + 256, 64);
  if constexpr (MB == 2) {
    AMX_STORE(2, acc + 512, 64);
    if constexpr (NB == 2) AMX_STORE(3, acc + 768, 64);
  }
}

// Writes one finished C tile: tile row r = weight row p + r (a column of C), tile column j = row q + j of C.
void store_amx_tile(const float* tile, int rows, int cols, const GemmPlan& out, int64_t p, int64_t q, bool first) {
  __m512 col[16];
  for (int r = 0; r < 16; ++r) col[r] = _mm512_loadu_ps(tile + r * 16);
  transpose16(col);  // col[j] = the 16 weight rows' sums for row q + j of C
  const __mmask16 m = lane_mask(rows);
  const __m512 alpha = _mm512_set1_ps(out.alpha);
  const __m512 beta = _mm512_set1_ps(out.beta);
  const bool use_beta = first && out.beta != 0.0f;
  const __m512 bias = first && out.bias ? _mm512_maskz_loadu_ps(m, out.bias + p) : _mm512_setzero_ps();
  for (int j = 0; j < cols; ++j) {
    float* c = out.c + (q + j) * out.ldc + p;
    __m512 v;
    if (first) {
      v = _mm512_mul_ps(alpha, col[j]);
      if (use_beta) v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c), v);
      v = _mm512_add_ps(v, bias);
    } else {
      v = _mm512_fmadd_ps(alpha, col[j], _mm512_maskz_loadu_ps(m, c));
    }
    _mm512_mask_storeu_ps(c, m, v);
  }
}

// One task of the plan (p_block a multiple of kAmxRows, q_block of kBf16Nr): for each k block and each 32 weight
// rows, chunk by chunk, the rows meet every panel of the task 32 columns at a time (a 48-row panel is a 32 and a 16
// block); the finished tiles are written once the k block ends.
void amx_task(const GemmBf16Plan& pl, int64_t task) {
  const int64_t pb = task / pl.q_blocks, qb = task % pl.q_blocks;
  const int64_t p0 = pb * pl.p_block, p1 = std::min(pl.n, p0 + pl.p_block);
  const int64_t q0 = qb * pl.q_block, q1 = std::min(pl.m, q0 + pl.q_block);
  if (p0 >= p1 || q0 >= q1) return;
  const TileConfig cfg = full_tiles();
  AMX_CONFIG(&cfg);
  AmxPads pads;
  // Accumulators of one weight block: 4 tiles per 32 columns of the task's panels.
  static thread_local std::vector<float> acc_storage;
  const int64_t slots = gemm_detail::gemm_ceil_div(q1 - q0, kBf16Nr) * 2;
  if (acc_storage.size() < static_cast<size_t>(slots * 1024)) acc_storage.resize(static_cast<size_t>(slots * 1024));
  float* acc = acc_storage.data();
  // One block of columns meets each weight chunk once: read the weights in place rather than copy them first.
  const bool direct = q1 - q0 <= kAmxCols;
  for (int64_t k0 = 0; k0 < pl.pairs; k0 += pl.kc_pairs) {
    const int64_t kc = std::min(pl.kc_pairs, pl.pairs - k0);
    for (int64_t p = p0; p < p1; p += kAmxRows) {
      const int w_rows = static_cast<int>(std::min<int64_t>(kAmxRows, p1 - p));
      const bool two_rows = w_rows > 16;
      const uint16_t* w = pl.w + p * pl.ldw;
      for (int64_t c0 = k0; c0 < k0 + kc; c0 += kAmxChunkPairs) {
        const int64_t cn = std::min(kAmxChunkPairs, k0 + kc - c0);
        if (!direct) pack_weight_chunk(w, pl.ldw, w_rows, c0, cn, pl.k, pads);
        const uint16_t* wd = direct ? w : nullptr;
        int64_t slot = 0;
        for (int64_t q = q0; q < q1; q += kBf16Nr) {
          const int64_t j = q / kBf16Nr;
          const int64_t width = gemm_detail::gemm_bf16_panel_width(pl.m, j);
          const uint32_t* panel = pl.y + gemm_detail::gemm_bf16_panel_offset(j, pl.pairs);
          for (int64_t c = 0; c < width; c += kAmxCols, ++slot) {
            const bool two_cols = width - c >= 32;
            float* a = acc + slot * 1024;
            const bool fresh = c0 == k0;
            if (two_rows && two_cols) amx_block<2, 2>(panel + c, width, c0, cn, a, fresh, pads, wd, pl.ldw, w_rows, pl.k);
            else if (two_rows) amx_block<2, 1>(panel + c, width, c0, cn, a, fresh, pads, wd, pl.ldw, w_rows, pl.k);
            else if (two_cols) amx_block<1, 2>(panel + c, width, c0, cn, a, fresh, pads, wd, pl.ldw, w_rows, pl.k);
            else amx_block<1, 1>(panel + c, width, c0, cn, a, fresh, pads, wd, pl.ldw, w_rows, pl.k);
          }
        }
      }
      int64_t slot = 0;
      for (int64_t q = q0; q < q1; q += kBf16Nr) {
        const int64_t width = gemm_detail::gemm_bf16_panel_width(pl.m, q / kBf16Nr);
        for (int64_t c = 0; c < width; c += kAmxCols, ++slot) {
          const bool two_cols = width - c >= 32;
          for (int t = 0; t < (two_rows ? 4 : 2); ++t) {
            const int tr = t / 2, tc = t % 2;
            if (tc == 1 && !two_cols) continue;
            const int rows = std::min(16, w_rows - 16 * tr);
            const int64_t col0 = q + c + 16 * tc;
            const int cols = static_cast<int>(std::min<int64_t>(16, pl.m - col0));
            if (cols > 0) store_amx_tile(acc + slot * 1024 + t * 256, rows, cols, pl.out, p + 16 * tr, col0, k0 == 0);
          }
        }
      }
    }
  }
  AMX_RELEASE();
}

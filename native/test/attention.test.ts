import { describe, expect, it } from 'vitest';
import {
  attentionDecode,
  attentionPrefill,
  DTypeMismatchError,
  InvalidArgumentError,
  kvSlot,
  PAGE_SIZE,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, rng, tensorF32, withThreads } from './helpers.js';

// Tolerances. The fast paths keep an f32 online softmax (SIMD dots, a polynomial exp with ~2e-7 relative
// error, V accumulated in f32); the references accumulate in double. With inputs in [-1, 1] and the default
// scale 1/sqrt(d), scores stay below ~4, so each output (a convex combination of V rows) is off by a few
// float ulps of 1: rtol 1e-5 with atol 1e-6 (outputs near 0 come from cancellation, hence the atol).
const RTOL = 1e-5;
const ATOL = 1e-6;

const HEAD_DIMS = [1, 7, 8, 16, 33, 64, 128];
const SEQ_LENS = [1, 2, 15, 16, 17, 40];
const HEAD_SPLITS: [number, number][] = [[4, 4], [8, 2], [6, 1]];

function u8(data: Uint8Array, shape: number[]): Tensor {
  return Tensor.from(data, shape, { backend: cpu() });
}
function i32(data: Int32Array, shape: number[]): Tensor {
  return Tensor.from(data, shape, { backend: cpu() });
}

/** A padding mask with ~25% padding; sequence `fullyMasked` (if any) has every key masked. */
function randomKeyMask(batch: number, seq: number, seed: number, fullyMasked = -1): Uint8Array {
  const r = rng(seed);
  const m = new Uint8Array(batch * seq);
  for (let i = 0; i < m.length; i++) m[i] = r() < 0.25 ? 0 : 1;
  if (fullyMasked >= 0) m.fill(0, fullyMasked * seq, (fullyMasked + 1) * seq);
  return m;
}

/** Independent JS oracle (double) for the documented semantics, used to validate the native reference. */
function jsPrefill(
  q: Float32Array, k: Float32Array, v: Float32Array,
  [batch, seq, nHeads, nKv, d]: number[], causal: boolean, mask: Uint8Array | null, scale: number,
): Float64Array {
  const out = new Float64Array(batch! * seq! * nHeads! * d!);
  const group = nHeads! / nKv!;
  for (let b = 0; b < batch!; b++) {
    for (let i = 0; i < seq!; i++) {
      for (let h = 0; h < nHeads!; h++) {
        const g = Math.floor(h / group);
        const qo = ((b * seq! + i) * nHeads! + h) * d!;
        const w: number[] = [];
        const rows: number[] = [];
        for (let j = 0; j < seq!; j++) {
          if ((causal && j > i) || (mask && mask[b * seq! + j] === 0)) continue;
          const ko = ((b * seq! + j) * nKv! + g) * d!;
          let dot = 0;
          for (let c = 0; c < d!; c++) dot += q[qo + c]! * k[ko + c]!;
          w.push(dot * scale);
          rows.push(ko);
        }
        if (w.length === 0) continue;
        const mx = Math.max(...w);
        const e = w.map((s) => Math.exp(s - mx));
        const sum = e.reduce((a, x) => a + x, 0);
        for (let c = 0; c < d!; c++) {
          let acc = 0;
          for (let t = 0; t < e.length; t++) acc += e[t]! * v[rows[t]! + c]!;
          out[qo + c] = acc / sum;
        }
      }
    }
  }
  return out;
}

describe('attentionPrefill', () => {
  it('the native reference matches an independent JS implementation (GQA, causal, padding)', () => {
    // Both compute in double; the reference rounds to f32 once, so they agree to f32 rounding.
    const dims = [2, 5, 6, 2, 7];
    const [batch, seq, nHeads, nKv, d] = dims as [number, number, number, number, number];
    const qd = randomFloats(batch * seq * nHeads * d, 1);
    const kd = randomFloats(batch * seq * nKv * d, 2);
    const vd = randomFloats(batch * seq * nKv * d, 3);
    const mask = randomKeyMask(batch, seq, 4);
    mask[0] = 0; // the first query of sequence 0 then sees nothing under causal masking
    const q = tensorF32(qd, [batch, seq, nHeads, d]);
    const k = tensorF32(kd, [batch, seq, nKv, d]);
    const v = tensorF32(vd, [batch, seq, nKv, d]);
    for (const causal of [false, true]) {
      for (const m of [null, mask]) {
        const got = f32(attentionPrefill(q, k, v, { causal, keyMask: m ? u8(m, [batch, seq]) : undefined, scale: 0.7, reference: true }));
        expectClose(got, jsPrefill(qd, kd, vd, dims, causal, m, 0.7), 1e-6, 1e-7, `causal=${causal} mask=${m !== null}`);
      }
    }
  });

  it('matches the double-precision reference on every ISA over head dims, lengths, batches and GQA splits', () => {
    let seed = 100;
    const cases: { q: Tensor; k: Tensor; v: Tensor; keyMask: Tensor | undefined; causal: boolean; want: Float32Array; label: string }[] = [];
    let index = 0;
    for (const d of HEAD_DIMS) {
      for (const seq of SEQ_LENS) {
        for (const [nHeads, nKv] of HEAD_SPLITS) {
          for (const causal of [false, true]) {
            // causal flips every case and the mask every second one, so each shape group covers all four
            // combinations; the batch size cycles 1..3 independently.
            const batch = 1 + (index % 3);
            const masked = Math.floor(index / 2) % 2 === 1;
            index++;
            const q = tensorF32(randomFloats(batch * seq * nHeads * d, seed++), [batch, seq, nHeads, d]);
            const k = tensorF32(randomFloats(batch * seq * nKv * d, seed++), [batch, seq, nKv, d]);
            const v = tensorF32(randomFloats(batch * seq * nKv * d, seed++), [batch, seq, nKv, d]);
            // With a mask and batch > 1, the last sequence is all padding (its outputs must be zeros).
            const keyMask = masked ? u8(randomKeyMask(batch, seq, seed++, batch > 1 ? batch - 1 : -1), [batch, seq]) : undefined;
            const want = f32(attentionPrefill(q, k, v, { causal, keyMask, reference: true }));
            cases.push({ q, k, v, keyMask, causal, want, label: `d=${d} seq=${seq} b=${batch} h=${nHeads}/${nKv} causal=${causal} mask=${masked}` });
          }
        }
      }
    }
    forEachIsa((isa) => {
      for (const c of cases) {
        expectClose(f32(attentionPrefill(c.q, c.k, c.v, { causal: c.causal, keyMask: c.keyMask })), c.want, RTOL, ATOL, `${isa} ${c.label}`);
      }
    });
  });

  it('writes exact zeros for a query with no visible key', () => {
    const [batch, seq, nHeads, d] = [2, 17, 4, 33];
    const q = tensorF32(randomFloats(batch * seq * nHeads * d, 7), [batch, seq, nHeads, d]);
    const k = tensorF32(randomFloats(batch * seq * 2 * d, 8), [batch, seq, 2, d]);
    const v = tensorF32(randomFloats(batch * seq * 2 * d, 9), [batch, seq, 2, d]);
    const mask = new Uint8Array(batch * seq).fill(1);
    mask.fill(0, seq, 2 * seq); // sequence 1: every key is padding
    mask[0] = 0; // sequence 0: key 0 is padding, so causal query 0 sees nothing
    const row = seq * nHeads * d;
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const bi = f32(attentionPrefill(q, k, v, { keyMask: u8(mask, [batch, seq]), reference }));
        expect(bi.subarray(row).every((x) => Object.is(x, 0)), `${isa} ref=${reference} padded sequence`).toBe(true);
        expect(bi.subarray(0, row).some((x) => x !== 0)).toBe(true);
        const causal = f32(attentionPrefill(q, k, v, { causal: true, keyMask: u8(mask, [batch, seq]), reference }));
        expect(causal.subarray(0, nHeads * d).every((x) => Object.is(x, 0)), `${isa} ref=${reference} causal query 0`).toBe(true);
        expect(causal.subarray(nHeads * d, 2 * nHeads * d).some((x) => x !== 0)).toBe(true);
      }
    });
  });

  it('a padding key with non-finite values gets no weight', () => {
    const [seq, d] = [20, 16];
    const kd = randomFloats(seq * d, 10);
    const vd = randomFloats(seq * d, 11);
    for (let c = 0; c < d; c++) {
      kd[3 * d + c] = Number.NaN;
      vd[3 * d + c] = Number.POSITIVE_INFINITY;
      vd[18 * d + c] = Number.NaN;
    }
    const mask = new Uint8Array(seq).fill(1);
    mask[3] = 0;
    mask[18] = 0;
    const q = tensorF32(randomFloats(seq * d, 12), [1, seq, 1, d]);
    const k = tensorF32(kd, [1, seq, 1, d]);
    const v = tensorF32(vd, [1, seq, 1, d]);
    const want = f32(attentionPrefill(q, k, v, { keyMask: u8(mask, [1, seq]), reference: true }));
    expect(want.every(Number.isFinite)).toBe(true);
    forEachIsa((isa) => {
      expectClose(f32(attentionPrefill(q, k, v, { keyMask: u8(mask, [1, seq]) })), want, RTOL, ATOL, isa);
    });
  });

  // Large scores make later key blocks raise the running max again and again (every block rescales). Scores
  // reach ~60, so a score's f32 rounding (~4e-6 absolute) moves weights by that relative amount: rtol/atol 2e-5.
  it('stays accurate when the running max keeps rising across key blocks', () => {
    const [seq, d] = [40, 64];
    const kd = randomFloats(seq * d, 13);
    for (let j = 0; j < seq; j++) for (let c = 0; c < d; c++) kd[j * d + c]! += j / 8; // later keys score higher
    const q = tensorF32(randomFloats(seq * 2 * d, 14, 0, 1), [1, seq, 2, d]);
    const k = tensorF32(kd, [1, seq, 1, d]);
    const v = tensorF32(randomFloats(seq * d, 15), [1, seq, 1, d]);
    for (const causal of [false, true]) {
      const want = f32(attentionPrefill(q, k, v, { causal, scale: 0.25, reference: true }));
      forEachIsa((isa) => {
        expectClose(f32(attentionPrefill(q, k, v, { causal, scale: 0.25 })), want, 2e-5, 2e-5, `${isa} causal=${causal}`);
      });
    }
  });

  it('defaults scale to 1/sqrt(headDim) and writes into a given out', () => {
    const q = tensorF32(randomFloats(3 * 5 * 4 * 8, 16), [3, 5, 4, 8]);
    const k = tensorF32(randomFloats(3 * 5 * 2 * 8, 17), [3, 5, 2, 8]);
    const v = tensorF32(randomFloats(3 * 5 * 2 * 8, 18), [3, 5, 2, 8]);
    const explicit = f32(attentionPrefill(q, k, v, { scale: 1 / Math.sqrt(8) }));
    const out = Tensor.empty([3, 5, 4, 8], 'f32', cpu());
    expect(attentionPrefill(q, k, v, { out })).toBe(out);
    expectBitwiseEqual(f32(out), explicit, 'default scale');
  });

  it('handles empty tensors (zero batch, sequence, heads or head dim)', () => {
    for (const [batch, seq, nHeads, nKv, d] of [[0, 4, 2, 1, 8], [2, 0, 2, 1, 8], [2, 3, 2, 1, 0], [2, 3, 0, 0, 8], [2, 3, 0, 1, 8]]) {
      const q = Tensor.zeros([batch!, seq!, nHeads!, d!], 'f32', cpu());
      const k = Tensor.zeros([batch!, seq!, nKv!, d!], 'f32', cpu());
      const keyMask = u8(new Uint8Array(batch! * seq!), [batch!, seq!]);
      for (const reference of [false, true]) {
        const out = attentionPrefill(q, k, k, { causal: true, keyMask, reference });
        expect(out.shape).toEqual([batch, seq, nHeads, d]);
      }
    }
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const [batch, seq, nHeads, nKv, d] = [2, 40, 8, 2, 64];
    const q = tensorF32(randomFloats(batch * seq * nHeads * d, 19), [batch, seq, nHeads, d]);
    const k = tensorF32(randomFloats(batch * seq * nKv * d, 20), [batch, seq, nKv, d]);
    const v = tensorF32(randomFloats(batch * seq * nKv * d, 21), [batch, seq, nKv, d]);
    const keyMask = u8(randomKeyMask(batch, seq, 22), [batch, seq]);
    forEachIsa((isa) => {
      for (const causal of [false, true]) {
        const one = withThreads(1, () => f32(attentionPrefill(q, k, v, { causal, keyMask })));
        const two = withThreads(2, () => f32(attentionPrefill(q, k, v, { causal, keyMask })));
        expectBitwiseEqual(one, two, `${isa} causal=${causal}`);
      }
    });
  });

  it('rejects mismatched shapes and dtypes in TS, naming the shapes', () => {
    const z = (shape: number[], dtype: 'f32' | 'u8' | 'i32' = 'f32') => Tensor.zeros(shape, dtype, cpu());
    const q = z([2, 5, 4, 8]);
    const k = z([2, 5, 2, 8]);
    expect(() => attentionPrefill(q, z([2, 5, 2, 7]), z([2, 5, 2, 7]))).toThrow(ShapeMismatchError);
    expect(() => attentionPrefill(q, z([2, 5, 2, 7]), z([2, 5, 2, 7]))).toThrow(/k \[2, 5, 2, 7\].*q \[2, 5, 4, 8\]/);
    expect(() => attentionPrefill(q, z([2, 6, 2, 8]), z([2, 6, 2, 8]))).toThrow(/k \[2, 6, 2, 8\].*q \[2, 5, 4, 8\]/);
    expect(() => attentionPrefill(q, k, z([2, 5, 1, 8]))).toThrow(/v \[2, 5, 1, 8\].*k \[2, 5, 2, 8\]/);
    expect(() => attentionPrefill(q, z([2, 5, 3, 8]), z([2, 5, 3, 8]))).toThrow(/q \[2, 5, 4, 8\] has 4 heads.*3 kv heads.*\[2, 5, 3, 8\]/);
    expect(() => attentionPrefill(z([2, 5, 8]), k, k)).toThrow(/q must have rank 4, got \[2, 5, 8\]/);
    expect(() => attentionPrefill(q, k, k, { keyMask: z([2, 4], 'u8') })).toThrow(/keyMask \[2, 4\].*\[2, 5\].*q \[2, 5, 4, 8\]/);
    expect(() => attentionPrefill(q, k, k, { keyMask: z([2, 5], 'i32') })).toThrow(DTypeMismatchError);
    expect(() => attentionPrefill(z([2, 5, 4, 8], 'i32'), k, k)).toThrow(DTypeMismatchError);
    expect(() => attentionPrefill(q, k, k, { out: z([2, 5, 2, 8]) })).toThrow(/out has shape \[2, 5, 2, 8\], expected \[2, 5, 4, 8\]/);
    expect(() => attentionPrefill(q, k, k, { out: q })).toThrow(InvalidArgumentError);
    expect(() => attentionPrefill(q, k, k, { scale: Number.NaN })).toThrow(/scale must be a finite number/);
  });

  it('the binding re-validates a direct call instead of reading out of bounds', () => {
    const binding = cpu().binding;
    const z = (shape: number[], dtype: 'f32' | 'u8' = 'f32') => Tensor.zeros(shape, dtype, cpu()).native;
    const q = z([2, 5, 4, 8]);
    const k = z([2, 5, 2, 8]);
    const opts = { causal: false, scale: 1, keyMask: null };
    expect(() => binding.attentionPrefill(q, z([2, 6, 2, 8]), z([2, 6, 2, 8]), z([2, 5, 4, 8]), opts)).toThrow(/k \[2, 6, 2, 8\]/);
    expect(() => binding.attentionPrefill(q, k, k, z([2, 5, 4, 7]), opts)).toThrow(/out has shape/);
    expect(() => binding.attentionPrefill(q, k, k, z([2, 5, 4, 8]), { ...opts, keyMask: z([5, 2], 'u8') })).toThrow(/keyMask has shape \[5, 2\]/);
    expect(() => binding.attentionPrefill(q, k, k, q, opts)).toThrow(/out \[2, 5, 4, 8\] overlaps q/);
    // Overlap is by bytes: disjoint row views of one buffer are fine, overlapping ones are not.
    const buf = Tensor.zeros([4, 5, 4, 8], 'f32', cpu());
    expect(() => binding.attentionPrefill(buf.rows(0, 2).native, k, k, buf.rows(2, 2).native, opts)).not.toThrow();
    expect(() => binding.attentionPrefill(buf.rows(0, 2).native, k, k, buf.rows(1, 2).native, opts)).toThrow(/overlaps q/);
  });
});

// ---------------------------------------------------------------- decode

interface PagedSeqs {
  kCache: Tensor;
  vCache: Tensor;
  blockTable: Tensor;
  contextLens: Tensor;
  table: Int32Array;
}

/**
 * A cache of `numPages` pages holding sequences of the given lengths at shuffled, non-contiguous pages.
 * Unused block-table entries are -1 (never read). Pages no sequence owns hold random data that must not leak in.
 */
function pagedCache(lens: number[], nKv: number, d: number, seed: number, spare = 3): PagedSeqs {
  const maxPages = Math.max(1, ...lens.map((l) => Math.ceil(l / PAGE_SIZE))) + 1;
  const needed = lens.reduce((a, l) => a + Math.ceil(l / PAGE_SIZE), 0);
  const numPages = needed + spare;
  const r = rng(seed);
  const ids = Array.from({ length: numPages }, (_, i) => i);
  for (let i = ids.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  const table = new Int32Array(lens.length * maxPages).fill(-1);
  let next = 0;
  lens.forEach((l, b) => {
    for (let p = 0; p < Math.ceil(l / PAGE_SIZE); p++) table[b * maxPages + p] = ids[next++]!;
  });
  const cacheShape = [numPages, PAGE_SIZE, nKv, d];
  const n = numPages * PAGE_SIZE * nKv * d;
  return {
    kCache: tensorF32(randomFloats(n, seed + 1), cacheShape),
    vCache: tensorF32(randomFloats(n, seed + 2), cacheShape),
    blockTable: i32(table, [lens.length, maxPages]),
    contextLens: i32(Int32Array.from(lens), [lens.length]),
    table,
  };
}

describe('attentionDecode', () => {
  const LENS = [0, 1, 16, 17, 33];

  it('matches the double-precision reference on every ISA (context 0, 1, 16, 17, 33; shuffled pages)', () => {
    let seed = 500;
    const cases: { q: Tensor; c: PagedSeqs; want: Float32Array; label: string }[] = [];
    for (const d of HEAD_DIMS) {
      for (const [nHeads, nKv] of HEAD_SPLITS) {
        const c = pagedCache(LENS, nKv, d, seed);
        seed += 3;
        const q = tensorF32(randomFloats(LENS.length * nHeads * d, seed++), [LENS.length, nHeads, d]);
        const want = f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens, { reference: true }));
        // context 0 writes zeros, every other sequence does not
        const row = nHeads * d;
        expect(want.subarray(0, row).every((x) => Object.is(x, 0)), `d=${d} context 0`).toBe(true);
        expect(want.subarray(row).some((x) => x !== 0)).toBe(true);
        cases.push({ q, c, want, label: `d=${d} h=${nHeads}/${nKv}` });
      }
    }
    forEachIsa((isa) => {
      for (const { q, c, want, label } of cases) {
        const got = f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens));
        expectClose(got, want, RTOL, ATOL, `${isa} ${label}`);
        const row = got.length / LENS.length;
        expect(got.subarray(0, row).every((x) => Object.is(x, 0)), `${isa} ${label} context 0`).toBe(true);
      }
    });
  });

  it('the reference attends the positions the block table names (JS oracle over a gathered copy)', () => {
    const [nHeads, nKv, d] = [6, 2, 5];
    const lens = [33, 7];
    const c = pagedCache(lens, nKv, d, 700);
    const qd = randomFloats(lens.length * nHeads * d, 703);
    const kAll = f32(c.kCache);
    const vAll = f32(c.vCache);
    const want = new Float64Array(qd.length);
    lens.forEach((len, b) => {
      // Gather the sequence's K/V rows position by position with kvSlot, then run the prefill oracle on the
      // last position with a 1-query view: q row = the decode query.
      const row = Array.from(c.table.subarray(b * c.table.length / lens.length, (b + 1) * c.table.length / lens.length));
      const kSeq = new Float32Array(len * nKv * d);
      const vSeq = new Float32Array(len * nKv * d);
      for (let t = 0; t < len; t++) {
        const slot = kvSlot(row, t);
        kSeq.set(kAll.subarray(slot * nKv * d, (slot + 1) * nKv * d), t * nKv * d);
        vSeq.set(vAll.subarray(slot * nKv * d, (slot + 1) * nKv * d), t * nKv * d);
      }
      const qSeq = new Float32Array(len * nHeads * d);
      qSeq.set(qd.subarray(b * nHeads * d, (b + 1) * nHeads * d), (len - 1) * nHeads * d);
      const full = jsPrefill(qSeq, kSeq, vSeq, [1, len, nHeads, nKv, d], false, null, 0.5);
      want.set(full.subarray((len - 1) * nHeads * d), b * nHeads * d);
    });
    const q = tensorF32(qd, [lens.length, nHeads, d]);
    expectClose(f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens, { scale: 0.5, reference: true })), want, 1e-6, 1e-7, 'ref');
  });

  // Decode over pages must agree with causal prefill's last query for the same K/V. Both fold the same keys
  // in blocks of 16 from position 0 with the same inner step, so they agree to f32 rounding (rtol 1e-6).
  it("equals causal prefill's last row for the same K/V written into pages with kvSlot", () => {
    let seed = 800;
    for (const [nHeads, nKv] of HEAD_SPLITS) {
      for (const d of [7, 64]) {
        for (const seq of [1, 16, 17, 40]) {
          const kd = randomFloats(seq * nKv * d, seed++);
          const vd = randomFloats(seq * nKv * d, seed++);
          const qd = randomFloats(seq * nHeads * d, seed++);
          const c = pagedCache([seq], nKv, d, seed);
          seed += 3;
          const kCacheData = f32(c.kCache);
          const vCacheData = f32(c.vCache);
          const row = Array.from(c.table);
          for (let t = 0; t < seq; t++) {
            const slot = kvSlot(row, t);
            kCacheData.set(kd.subarray(t * nKv * d, (t + 1) * nKv * d), slot * nKv * d);
            vCacheData.set(vd.subarray(t * nKv * d, (t + 1) * nKv * d), slot * nKv * d);
          }
          c.kCache.write(kCacheData);
          c.vCache.write(vCacheData);
          const qLast = tensorF32(qd.slice((seq - 1) * nHeads * d), [1, nHeads, d]);
          const q = tensorF32(qd, [1, seq, nHeads, d]);
          const k = tensorF32(kd, [1, seq, nKv, d]);
          const v = tensorF32(vd, [1, seq, nKv, d]);
          forEachIsa((isa) => {
            const prefill = f32(attentionPrefill(q, k, v, { causal: true })).slice((seq - 1) * nHeads * d);
            const decode = f32(attentionDecode(qLast, c.kCache, c.vCache, c.blockTable, c.contextLens));
            expectClose(decode, prefill, 1e-6, 1e-7, `${isa} h=${nHeads}/${nKv} d=${d} seq=${seq}`);
          });
        }
      }
    }
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const lens = [33, 17, 5, 48];
    const c = pagedCache(lens, 2, 64, 900);
    const q = tensorF32(randomFloats(lens.length * 8 * 64, 903), [lens.length, 8, 64]);
    forEachIsa((isa) => {
      const one = withThreads(1, () => f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens)));
      const two = withThreads(2, () => f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens)));
      expectBitwiseEqual(one, two, isa);
    });
  });

  it('handles empty batches, zero heads and zero head dim', () => {
    for (const [batch, nHeads, nKv, d] of [[0, 4, 2, 8], [2, 0, 0, 8], [2, 4, 2, 0]]) {
      const cache = Tensor.zeros([1, PAGE_SIZE, nKv!, d!], 'f32', cpu());
      const blockTable = i32(new Int32Array(batch!), [batch!, 1]);
      const contextLens = i32(new Int32Array(batch!).fill(3), [batch!]);
      for (const reference of [false, true]) {
        const out = attentionDecode(Tensor.zeros([batch!, nHeads!, d!], 'f32', cpu()), cache, cache, blockTable, contextLens, { reference });
        expect(out.shape).toEqual([batch, nHeads, d]);
      }
    }
  });

  it('rejects bad shapes, page ids and context lengths in TS, naming the values', () => {
    const c = pagedCache([20, 3], 2, 8, 1000); // 2 + 1 pages used, 3 spare: numPages 6, maxPages 3
    const q = tensorF32(randomFloats(2 * 4 * 8, 1001), [2, 4, 8]);
    const call = (o: Partial<{ q: Tensor; kCache: Tensor; vCache: Tensor; blockTable: Tensor; contextLens: Tensor }>) => () =>
      attentionDecode(o.q ?? q, o.kCache ?? c.kCache, o.vCache ?? c.vCache, o.blockTable ?? c.blockTable, o.contextLens ?? c.contextLens);
    expect(call({})).not.toThrow();
    const badTable = (entry: number, value: number) => {
      const t = c.table.slice();
      t[entry] = value;
      return i32(t, [2, 3]);
    };
    expect(call({ blockTable: badTable(1, 6) })).toThrow(InvalidArgumentError);
    expect(call({ blockTable: badTable(1, 6) })).toThrow(/blockTable\[0, 1\] = 6 is not a page of kCache \[6, 16, 2, 8\] \(valid: 0 to 5\)/);
    expect(call({ blockTable: badTable(3, -2) })).toThrow(/blockTable\[1, 0\] = -2/);
    expect(call({ blockTable: badTable(2, 99) })).not.toThrow(); // entry past ceil(20/16) = 2 pages is never read
    expect(call({ contextLens: i32(Int32Array.from([-1, 3]), [2]) })).toThrow(/contextLens\[0\] = -1 is negative/);
    expect(call({ contextLens: i32(Int32Array.from([20, 49]), [2]) })).toThrow(/contextLens\[1\] = 49 needs 4 pages of 16 but blockTable \[2, 3\] has 3/);
    expect(call({ contextLens: i32(Int32Array.from([20]), [1]) })).toThrow(/contextLens \[1\].*\[2\].*q \[2, 4, 8\]/);
    expect(call({ blockTable: i32(new Int32Array(3), [1, 3]) })).toThrow(/blockTable \[1, 3\].*q \[2, 4, 8\]/);
    expect(call({ q: tensorF32(new Float32Array(2 * 4 * 7), [2, 4, 7]) })).toThrow(/kCache \[6, 16, 2, 8\] does not fit q \[2, 4, 7\]/);
    expect(call({ q: tensorF32(new Float32Array(2 * 3 * 8), [2, 3, 8]) })).toThrow(/q \[2, 3, 8\] has 3 heads.*2 kv heads of kCache \[6, 16, 2, 8\]/);
    const cache8 = Tensor.zeros([12, 8, 2, 8], 'f32', cpu());
    expect(call({ kCache: cache8, vCache: cache8 })).toThrow(/kCache \[12, 8, 2, 8\].*\[numPages, 16, kvHeads, 8\]/);
    expect(call({ vCache: Tensor.zeros([5, 16, 2, 8], 'f32', cpu()) })).toThrow(/vCache \[5, 16, 2, 8\] and kCache \[6, 16, 2, 8\]/);
    expect(call({ blockTable: Tensor.zeros([2, 3], 'f32', cpu()) })).toThrow(DTypeMismatchError);
    expect(call({ contextLens: Tensor.zeros([2], 'i32', cpu()) })).not.toThrow();
    expect(() => attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens, { out: q })).toThrow(/in place/);
  });

  it('checks a host mirror of the block table and lengths instead of reading them back; the binding still checks the tensors', () => {
    const c = pagedCache([20, 3], 2, 8, 1050);
    const q = tensorF32(randomFloats(2 * 4 * 8, 1051), [2, 4, 8]);
    const lens = Int32Array.from([20, 3]);
    const hostIndices = { blockTable: c.table, contextLens: lens };
    const want = f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens));
    expectBitwiseEqual(f32(attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens, { hostIndices })), want, 'with a host mirror');
    // The TS checks read the mirror: a bad page there is refused by name, though the tensor is fine.
    const badMirror = c.table.slice();
    badMirror[1] = 6;
    expect(() => attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens, { hostIndices: { blockTable: badMirror, contextLens: lens } }))
      .toThrow(/blockTable\[0, 1\] = 6 is not a page of kCache/);
    expect(() => attentionDecode(q, c.kCache, c.vCache, c.blockTable, c.contextLens, { hostIndices: { blockTable: c.table, contextLens: Int32Array.from([20]) } }))
      .toThrow(/hostIndices hold 6 block-table and 1 length entries/);
    // A mirror that does not match the tensors cannot make the kernel read out of bounds: the binding checks the tensors.
    const badTensor = c.table.slice();
    badTensor[1] = 6;
    expect(() => attentionDecode(q, c.kCache, c.vCache, i32(badTensor, [2, 3]), c.contextLens, { hostIndices })).toThrow(InvalidArgumentError);
  });

  it('the binding re-checks page ids and lengths on a direct call', () => {
    const c = pagedCache([20, 3], 2, 8, 1100);
    const binding = cpu().binding;
    const q = Tensor.zeros([2, 4, 8], 'f32', cpu()).native;
    const out = Tensor.zeros([2, 4, 8], 'f32', cpu()).native;
    const run = (table: Int32Array, lens: number[]) => () =>
      binding.attentionDecode(q, c.kCache.native, c.vCache.native, i32(table, [2, 3]).native, i32(Int32Array.from(lens), [2]).native, out, { scale: 1 });
    expect(run(c.table, [20, 3])).not.toThrow();
    const bad = c.table.slice();
    bad[1] = 1_000_000;
    expect(run(bad, [20, 3])).toThrow(/blockTable\[0, 1\] = 1000000 is not a page/);
    expect(run(c.table, [-5, 3])).toThrow(/contextLens\[0\] = -5 is outside \[0, 48\]/);
    expect(run(c.table, [20, 49])).toThrow(/contextLens\[1\] = 49 is outside \[0, 48\]/);
    expect(run(c.table, [20, 17])).toThrow(/blockTable\[1, 1\] = -1 is not a page/);
  });
});

describe('kvSlot', () => {
  it('maps a position to page * 16 + offset through the block-table row', () => {
    const row = [7, 2, 5];
    expect(kvSlot(row, 0)).toBe(7 * 16);
    expect(kvSlot(row, 15)).toBe(7 * 16 + 15);
    expect(kvSlot(row, 16)).toBe(2 * 16);
    expect(kvSlot(Int32Array.from(row), 47)).toBe(5 * 16 + 15);
  });

  it('rejects positions outside the row and invalid entries, naming the values', () => {
    expect(() => kvSlot([7, 2], 32)).toThrow(/position 32 is in page 2 of the sequence, but its block-table row has 2 entries/);
    expect(() => kvSlot([7, -1], 20)).toThrow(/block-table entry 1 \(for position 20\) is -1/);
    expect(() => kvSlot([7], -1)).toThrow(/position -1 is not a non-negative integer/);
    expect(() => kvSlot([7], 1.5)).toThrow(InvalidArgumentError);
  });
});

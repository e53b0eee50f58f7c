import { describe, expect, it } from 'vitest';
import {
  adamw,
  attentionPrefillBackward,
  clipGradNorm,
  crossEntropy,
  globalGradNorm,
  InvalidArgumentError,
  ShapeMismatchError,
  sumSquares,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, randomInts, tensorF32, withThreads } from './helpers.js';
import { centralDiff, dotLoss, i32, u8 } from './train-helpers.js';

// Tolerances against float64 central differences (step 1e-5 on smooth float64 forwards, FD error ~1e-9): the f32
// kernels' own rounding of O(1) gradients. Attention: f32 dot products and exp over a few keys, rtol 1e-4 / atol 2e-5
// (measured worst ~3e-6); cross-entropy: rtol 1e-4 / atol 1e-6 on gradients of size ~1/rows.
const FD_RTOL = 1e-4;

// ---------------------------------------------------------------- attention

interface AttnShape { b: number; s: number; h: number; kvh: number; d: number }

function jsAttention(q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, sh: AttnShape, causal: boolean, mask: ArrayLike<number> | null, scale: number): Float64Array {
  const { b: B, s: S, h: H, kvh: KVH, d: D } = sh;
  const group = H / KVH;
  const out = new Float64Array(B * S * H * D);
  const sc = new Float64Array(S);
  for (let b = 0; b < B; b++) for (let i = 0; i < S; i++) for (let h = 0; h < H; h++) {
    const g = Math.floor(h / group);
    const qo = ((b * S + i) * H + h) * D;
    let m = -Infinity;
    const vis = (j: number) => (!causal || j <= i) && (!mask || mask[b * S + j] !== 0);
    for (let j = 0; j < S; j++) {
      if (!vis(j)) continue;
      let dot = 0;
      for (let c = 0; c < D; c++) dot += q[qo + c]! * k[((b * S + j) * KVH + g) * D + c]!;
      sc[j] = dot * scale;
      m = Math.max(m, sc[j]!);
    }
    if (m === -Infinity) continue;
    let sum = 0;
    for (let j = 0; j < S; j++) if (vis(j)) sum += Math.exp(sc[j]! - m);
    for (let j = 0; j < S; j++) {
      if (!vis(j)) continue;
      const p = Math.exp(sc[j]! - m) / sum;
      for (let c = 0; c < D; c++) out[qo + c]! += p * v[((b * S + j) * KVH + g) * D + c]!;
    }
  }
  return out;
}

describe('attentionPrefillBackward', () => {
  const cases: { name: string; sh: AttnShape; causal: boolean; mask: number[] | null }[] = [
    { name: 'causal GQA', sh: { b: 2, s: 5, h: 4, kvh: 2, d: 3 }, causal: true, mask: null },
    { name: 'bidirectional MHA with padding', sh: { b: 2, s: 4, h: 2, kvh: 2, d: 5 }, causal: false, mask: [1, 1, 1, 0, 1, 1, 0, 0] },
    { name: 'causal MQA with padding', sh: { b: 1, s: 6, h: 3, kvh: 1, d: 4 }, causal: true, mask: [0, 1, 1, 1, 1, 0] },
  ];

  for (const { name, sh, causal, mask } of cases) {
    it(`${name}: dq, dk, dv match central differences (fast and reference)`, () => {
      const { b, s, h, kvh, d } = sh;
      const qs = randomFloats(b * s * h * d, 1 + d, -1.5, 1.5), ks = randomFloats(b * s * kvh * d, 2 + d, -1.5, 1.5);
      const vs = randomFloats(b * s * kvh * d, 3 + d), dos = randomFloats(b * s * h * d, 4 + d);
      const scale = 1 / Math.sqrt(d);
      const fdq = centralDiff((x) => dotLoss(jsAttention(x, ks, vs, sh, causal, mask, scale), dos), qs);
      const fdk = centralDiff((x) => dotLoss(jsAttention(qs, x, vs, sh, causal, mask, scale), dos), ks);
      const fdv = centralDiff((x) => dotLoss(jsAttention(qs, ks, x, sh, causal, mask, scale), dos), vs);
      const keyMask = mask ? u8(mask, [b, s]) : undefined;
      const args = [tensorF32(qs, [b, s, h, d]), tensorF32(ks, [b, s, kvh, d]), tensorF32(vs, [b, s, kvh, d]), tensorF32(dos, [b, s, h, d])] as const;
      for (const reference of [false, true]) {
        const g = attentionPrefillBackward(...args, { causal, keyMask, reference });
        expectClose(f32(g.dq), fdq, FD_RTOL, 2e-5, `dq ref=${reference}`);
        expectClose(f32(g.dk), fdk, FD_RTOL, 2e-5, `dk ref=${reference}`);
        expectClose(f32(g.dv), fdv, FD_RTOL, 2e-5, `dv ref=${reference}`);
      }
      if (mask) {
        // Padding keys get exactly zero dk / dv.
        const g = attentionPrefillBackward(...args, { causal, keyMask });
        const dk = f32(g.dk);
        for (let p = 0; p < b * s; p++) {
          if (mask[p] !== 0) continue;
          for (let e = 0; e < kvh * d; e++) expect(dk[p * kvh * d + e]).toBe(0);
        }
      }
    });
  }

  // s = 150: the fast path's blocks of 64 queries end ragged (64 + 64 + 22), and causal blocks read growing key ranges.
  it.each([
    { b: 2, s: 37, h: 8, kvh: 2, d: 20 },
    { b: 2, s: 150, h: 4, kvh: 2, d: 16 },
  ])('matches the reference on larger ragged shapes and is bitwise identical on 1 and 2 threads (s $s)', (sh) => {
    const { b, s, h, kvh, d } = sh;
    const q = tensorF32(randomFloats(b * s * h * d, 11), [b, s, h, d]);
    const k = tensorF32(randomFloats(b * s * kvh * d, 12), [b, s, kvh, d]);
    const v = tensorF32(randomFloats(b * s * kvh * d, 13), [b, s, kvh, d]);
    const dout = tensorF32(randomFloats(b * s * h * d, 14), [b, s, h, d]);
    const keyMask = u8(Array.from({ length: b * s }, (_, i) => (i % s < (i < s ? s - 7 : s) ? 1 : 0)), [b, s]);
    for (const causal of [false, true]) {
      const run = (reference = false) => {
        const g = attentionPrefillBackward(q, k, v, dout, { causal, keyMask, reference });
        return [f32(g.dq), f32(g.dk), f32(g.dv)];
      };
      const ref = run(true);
      const one = withThreads(1, () => run()), two = withThreads(2, () => run());
      one.forEach((a, i) => {
        expectClose(a, ref[i]!, 1e-4, 1e-5, `causal=${causal} ${i} vs ref`);
        expectBitwiseEqual(a, two[i]!, `causal=${causal} ${i} threads`);
      });
    }
  });

  it('handles empty shapes, fully masked sequences and validates its arguments', () => {
    for (const [b, s, h, kvh, d] of [[0, 4, 2, 1, 3], [2, 0, 2, 1, 3], [1, 3, 2, 2, 0]]) {
      const g = attentionPrefillBackward(Tensor.zeros([b!, s!, h!, d!], 'f32', cpu()), Tensor.zeros([b!, s!, kvh!, d!], 'f32', cpu()),
        Tensor.zeros([b!, s!, kvh!, d!], 'f32', cpu()), Tensor.zeros([b!, s!, h!, d!], 'f32', cpu()));
      expect(g.dk.shape).toEqual([b, s, kvh, d]);
    }
    // A fully padded sequence: every gradient is zero (queries see no key, keys get no weight).
    const q = tensorF32(randomFloats(3 * 2 * 4, 21), [1, 3, 2, 4]);
    const k = tensorF32(randomFloats(3 * 4, 22), [1, 3, 1, 4]);
    const g = attentionPrefillBackward(q, k, k, q, { keyMask: u8([0, 0, 0], [1, 3]) });
    for (const t of [g.dq, g.dk, g.dv]) expect(Array.from(f32(t)).every((x) => x === 0)).toBe(true);
    expect(() => attentionPrefillBackward(q, Tensor.zeros([1, 3, 3, 4], 'f32', cpu()), Tensor.zeros([1, 3, 3, 4], 'f32', cpu()), q)).toThrow(ShapeMismatchError);
    expect(() => attentionPrefillBackward(q, k, k, Tensor.zeros([1, 3, 2, 5], 'f32', cpu()))).toThrow(/dout/);
    expect(() => attentionPrefillBackward(q, k, k, q, { dq: q })).toThrow(InvalidArgumentError);
    expect(() => attentionPrefillBackward(q, k, k, q, { keyMask: u8([1, 1], [1, 2]) })).toThrow(/keyMask/);
    const bnd = cpu().binding;
    const dk = Tensor.zeros([1, 3, 1, 4], 'f32', cpu());
    expect(() => bnd.attentionPrefillBackward(q.native, k.native, k.native, q.native, q.native, dk.native, dk.native,
      { causal: false, scale: 1, keyMask: null })).toThrow(/overlaps/);
  });
});

// ---------------------------------------------------------------- cross-entropy

function jsCrossEntropyMean(x: ArrayLike<number>, targets: ArrayLike<number>, rows: number, vocab: number, ignore: number, s: number): number {
  let total = 0, count = 0;
  for (let r = 0; r < rows; r++) {
    const t = targets[r]!;
    if (t === ignore) continue;
    let m = -Infinity, sx = 0;
    for (let j = 0; j < vocab; j++) {
      m = Math.max(m, x[r * vocab + j]!);
      sx += x[r * vocab + j]!;
    }
    let se = 0;
    for (let j = 0; j < vocab; j++) se += Math.exp(x[r * vocab + j]! - m);
    const lse = m + Math.log(se);
    total += (1 - s) * (lse - x[r * vocab + t]!) + s * (lse - sx / vocab);
    count++;
  }
  return total / count;
}

describe('crossEntropy', () => {
  it('loss and dlogits match float64 central differences, with ignore index and label smoothing', () => {
    const rows = 6, vocab = 13;
    const xs = randomFloats(rows * vocab, 31, -4, 4);
    const targets = [3, -100, 12, 0, 7, -100];
    for (const s of [0, 0.1]) {
      const want = jsCrossEntropyMean(xs, targets, rows, vocab, -100, s);
      const fd = centralDiff((x) => jsCrossEntropyMean(x, targets, rows, vocab, -100, s), xs);
      forEachIsa((isa) => {
        for (const reference of [false, true]) {
          const r = crossEntropy(tensorF32(xs, [rows, vocab]), i32(targets), { labelSmoothing: s, reference });
          expect(r.count).toBe(4);
          expect(Math.abs(r.loss - want)).toBeLessThan(1e-6 * Math.abs(want) + 1e-7);
          expectClose(f32(r.dlogits!), fd, FD_RTOL, 1e-6, `${isa} s=${s} ref=${reference}`);
          const per = f32(r.losses);
          expect(per[1]).toBe(0);
          expect(per[5]).toBe(0);
        }
      });
    }
  });

  it('fast paths match the reference for ragged vocabularies, run in place, and are thread independent', () => {
    forEachIsa((isa) => {
      for (const vocab of [1, 7, 8, 17, 33, 1000]) {
        for (const rows of [0, 1, 5]) {
          const xs = randomFloats(rows * vocab, rows * 7 + vocab, -10, 10);
          const t = i32(randomInts(rows, vocab + rows, 0, vocab));
          const opts = { labelSmoothing: 0.2, ignoreIndex: 0, reduction: 'sum' as const };
          const fast = crossEntropy(tensorF32(xs, [rows, vocab]), t, opts);
          const ref = crossEntropy(tensorF32(xs, [rows, vocab]), t, { ...opts, reference: true });
          expectClose(f32(fast.losses), f32(ref.losses), 1e-5, 1e-5, `${isa} [${rows}, ${vocab}] losses`);
          expectClose(f32(fast.dlogits!), f32(ref.dlogits!), 1e-5, 1e-7, `${isa} [${rows}, ${vocab}] dlogits`);
          const logits = tensorF32(xs, [rows, vocab]);
          const inPlace = crossEntropy(logits, t, { ...opts, dlogits: logits });
          expect(inPlace.dlogits).toBe(logits);
          expectBitwiseEqual(f32(logits), f32(fast.dlogits!), `${isa} [${rows}, ${vocab}] in place`);
        }
      }
      const big = tensorF32(randomFloats(64 * 3000, 41, -5, 5), [64, 3000]);
      const t = i32(randomInts(64, 42, 0, 3000));
      const run = () => {
        const r = crossEntropy(big, t);
        return [f32(r.losses), f32(r.dlogits!)];
      };
      const one = withThreads(1, run), two = withThreads(2, run);
      one.forEach((a, i) => expectBitwiseEqual(a, two[i]!, `${isa} threads ${i}`));
    });
  });

  it('reports a NaN mean when every row is ignored, skips the gradient on request, and validates', () => {
    const x = tensorF32(randomFloats(2 * 4, 51), [2, 4]);
    const r = crossEntropy(x, i32([-100, -100]));
    expect(r.loss).toBeNaN();
    expect(Array.from(f32(r.dlogits!))).toEqual(new Array(8).fill(0));
    expect(crossEntropy(x, i32([1, 2]), { grad: false }).dlogits).toBeNull();
    expect(() => crossEntropy(x, i32([1, 4]))).toThrow(/targets\[1\] = 4 is outside \[0, 4\)/);
    expect(() => crossEntropy(x, i32([1]))).toThrow(ShapeMismatchError);
    expect(() => crossEntropy(x, i32([1, 2]), { labelSmoothing: 1.5 })).toThrow(InvalidArgumentError);
    expect(() => cpu().binding.crossEntropy(x.native, i32([1, 9]).native, Tensor.zeros([2], 'f32', cpu()).native, null,
      { ignoreIndex: -100, labelSmoothing: 0, gradScale: 1 })).toThrow(/targets\[1\] = 9/);
  });
});

// ---------------------------------------------------------------- AdamW, gradient norm

describe('adamw', () => {
  it('matches PyTorch AdamW in float64 over several steps, on every ISA, bitwise across threads', () => {
    const n = 1037;
    const p0 = randomFloats(n, 61), grads = [62, 63, 64].map((seed) => randomFloats(n, seed, -0.1, 0.1));
    const o = { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 };
    // float64 PyTorch AdamW (torch.optim.AdamW._single_tensor_adamw), rounding the state to f32 each step as the kernel stores it.
    const want = Float64Array.from(p0), m = new Float64Array(n), v = new Float64Array(n);
    grads.forEach((g, s) => {
      const t = s + 1;
      for (let i = 0; i < n; i++) {
        want[i] = want[i]! * (1 - o.lr * o.weightDecay);
        m[i] = Math.fround(o.beta1 * m[i]! + (1 - o.beta1) * g[i]!);
        v[i] = Math.fround(o.beta2 * v[i]! + (1 - o.beta2) * g[i]! * g[i]!);
        const denom = Math.sqrt(v[i]!) / Math.sqrt(1 - o.beta2 ** t) + o.eps;
        want[i] = Math.fround(want[i]! - (o.lr / (1 - o.beta1 ** t)) * (m[i]! / denom));
      }
    });
    const run = (reference: boolean) => {
      const p = tensorF32(p0, [n]), mt = Tensor.zeros([n], 'f32', cpu()), vt = Tensor.zeros([n], 'f32', cpu());
      grads.forEach((g, s) => adamw(p, tensorF32(g, [n]), mt, vt, { ...o, step: s + 1, reference }));
      return [f32(p), f32(mt), f32(vt)];
    };
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const [p, mt, vt] = run(reference);
        expectClose(p!, want, 1e-6, 1e-6, `${isa} param ref=${reference}`);
        expectClose(mt!, m, 1e-5, 1e-9, `${isa} m ref=${reference}`);
        expectClose(vt!, v, 1e-5, 1e-12, `${isa} v ref=${reference}`);
      }
      const one = withThreads(1, () => run(false)), two = withThreads(2, () => run(false));
      one.forEach((a, i) => expectBitwiseEqual(a, two[i]!, `${isa} threads ${i}`));
    });
  });

  it('applies gradScale, handles empty tensors and validates', () => {
    const p1 = tensorF32(Float32Array.of(1, 2), [2]), p2 = tensorF32(Float32Array.of(1, 2), [2]);
    const z = () => Tensor.zeros([2], 'f32', cpu());
    adamw(p1, tensorF32(Float32Array.of(0.5, -1), [2]), z(), z(), { step: 1, gradScale: 0.5 });
    adamw(p2, tensorF32(Float32Array.of(0.25, -0.5), [2]), z(), z(), { step: 1 });
    expectBitwiseEqual(f32(p1), f32(p2), 'gradScale');
    const e = Tensor.zeros([0], 'f32', cpu());
    adamw(e, e.reshape([0]), Tensor.zeros([0], 'f32', cpu()), Tensor.zeros([0], 'f32', cpu()), { step: 1 });
    expect(() => adamw(p1, z(), z(), z(), { step: 0 })).toThrow(/step/);
    expect(() => adamw(p1, z(), z(), z(), { step: 1, beta2: 1 })).toThrow(/beta2/);
    expect(() => adamw(p1, z(), p1, z(), { step: 1 })).toThrow(InvalidArgumentError);
    expect(() => adamw(p1, Tensor.zeros([3], 'f32', cpu()), z(), z(), { step: 1 })).toThrow(ShapeMismatchError);
    const b = cpu().binding;
    expect(() => b.adamw(p1.native, p1.native, z().native, z().native, { lr: 1, beta1: 0.9, beta2: 0.9, eps: 1e-8, weightDecay: 0, step: 1, gradScale: 1 }))
      .toThrow(/overlaps/);
  });
});

describe('sumSquares, globalGradNorm, clipGradNorm', () => {
  it('sums in double in a fixed order for any thread count and clips by the global norm', () => {
    for (const n of [0, 1, 17, 16384, 16385, 100003]) {
      const xs = randomFloats(n, n + 1);
      let want = 0;
      for (let i = 0; i < n; i++) want += xs[i]! * xs[i]!;
      const x = tensorF32(xs, [n]);
      forEachIsa((isa) => {
        const got = sumSquares(x);
        expect(Math.abs(got - want)).toBeLessThanOrEqual(1e-12 * want);
        expect(Math.abs(sumSquares(x, { reference: true }) - want)).toBeLessThanOrEqual(1e-12 * want);
        expect(withThreads(1, () => sumSquares(x))).toBe(withThreads(2, () => sumSquares(x)));
        if (n === 0) expect(got).toBe(0);
        void isa;
      });
    }
    const a = tensorF32(Float32Array.of(3, 0), [2]), b = tensorF32(Float32Array.of(4), [1]);
    expect(globalGradNorm([a, b])).toBe(5);
    const kept = clipGradNorm([a, b], 10);
    expect(kept).toEqual({ norm: 5, coefficient: 1 });
    expect(Array.from(f32(a))).toEqual([3, 0]);
    const dry = clipGradNorm([a, b], 1, { apply: false });
    expect(dry.coefficient).toBeCloseTo(1 / 5, 6);
    expect(Array.from(f32(a))).toEqual([3, 0]);
    const clipped = clipGradNorm([a, b], 1);
    expect(clipped.norm).toBe(5);
    expectClose(f32(a), [0.6, 0], 1e-6, 1e-7, 'a clipped');
    expectClose(f32(b), [0.8], 1e-6, 1e-7, 'b clipped');
    expect(() => clipGradNorm([a], 0)).toThrow(InvalidArgumentError);
    expect(() => sumSquares(Tensor.zeros([2], 'i32', cpu()))).toThrow(/f32/);
  });
});

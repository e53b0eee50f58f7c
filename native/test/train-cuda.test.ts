/**
 * The training kernels on the CUDA backend against the CPU backend (fast and reference paths), and bitwise reruns.
 * Skipped unless `getBackend('auto')` picked CUDA; the CUDA code is still compiled (and its exports checked in
 * cuda.test.ts) everywhere.
 */
import { describe, expect, it } from 'vitest';
import {
  adamw,
  attentionPrefillBackward,
  type Backend,
  columnSum,
  crossEntropy,
  embeddingBackward,
  geluErfBackward,
  geluTanhBackward,
  getBackend,
  getCpuBackend,
  layerNormBackward,
  rmsNormBackward,
  ropeBackward,
  siluBackward,
  siluMulBackward,
  softmaxBackward,
  sumSquares,
  Tensor,
} from '../src/index.js';
import { expectBitwiseEqual, expectClose, randomFloats, randomInts } from './helpers.js';

const hasDevice = getBackend('auto').device === 'cuda';

describe.skipIf(!hasDevice)('CUDA training kernels', () => {
  const gpu = (): Backend => getBackend('auto');
  const on = (b: Backend, data: Float32Array | Int32Array | Uint8Array, shape: number[], dtype: 'f32' | 'i32' | 'u8' = 'f32') =>
    Tensor.from(data, shape, { dtype, backend: b });
  const both = <T>(fn: (b: Backend, reference: boolean) => T): { cpu: T; gpu: T; gpuRef: T } =>
    ({ cpu: fn(getCpuBackend(), true), gpu: fn(gpu(), false), gpuRef: fn(gpu(), true) });
  const arr = (t: Tensor | null) => t!.toArray() as Float32Array;

  it('norm, softmax and activation backward agree with the CPU reference', () => {
    const [rows, dim] = [37, 300];
    const xs = randomFloats(rows * dim, 1, -3, 3), dys = randomFloats(rows * dim, 2), gs = randomFloats(dim, 3, 0.5, 1.5);
    const ln = both((b, reference) => {
      const r = layerNormBackward(on(b, xs, [rows, dim]), on(b, gs, [dim]), on(b, dys, [rows, dim]), { reference });
      return [arr(r.dx), arr(r.dgamma), arr(r.dbeta)];
    });
    const rms = both((b, reference) => {
      const r = rmsNormBackward(on(b, xs, [rows, dim]), on(b, gs, [dim]), on(b, dys, [rows, dim]), { reference });
      return [arr(r.dx), arr(r.dgamma)];
    });
    for (const [name, r] of [['layerNorm', ln], ['rmsNorm', rms]] as const) {
      r.cpu.forEach((want, i) => {
        expectClose(r.gpu[i]!, want, 1e-4, 1e-4, `${name} fast ${i}`);
        expectClose(r.gpuRef[i]!, want, 1e-6, 1e-6, `${name} ref ${i}`);
      });
    }
    const ys = Float32Array.from(xs, (v) => Math.abs(v) / 100);
    const sm = both((b, reference) => arr(softmaxBackward(on(b, ys, [rows, dim]), on(b, dys, [rows, dim]), { scale: 0.5, reference })));
    expectClose(sm.gpu, sm.cpu, 1e-4, 1e-6, 'softmax');
    for (const fn of [geluErfBackward, geluTanhBackward, siluBackward]) {
      const r = both((b, reference) => arr(fn(on(b, xs, [rows, dim]), on(b, dys, [rows, dim]), { reference })));
      expectClose(r.gpu, r.cpu, 1e-5, 1e-6, fn.name);
      expectClose(r.gpuRef, r.cpu, 1e-6, 1e-7, `${fn.name} ref`);
    }
    const sw = both((b, reference) => {
      const r = siluMulBackward(on(b, xs, [rows, dim]), on(b, ys, [rows, dim]), on(b, dys, [rows, dim]), { reference });
      return [arr(r.dgate), arr(r.dup)];
    });
    sw.cpu.forEach((want, i) => expectClose(sw.gpu[i]!, want, 1e-5, 1e-6, `siluMul ${i}`));
  });

  it('cross-entropy, column sums, embedding, RoPE, AdamW and sum of squares agree with the CPU reference', () => {
    const [rows, vocab] = [19, 5000];
    const logits = randomFloats(rows * vocab, 11, -6, 6);
    const targets = randomInts(rows, 12, 0, vocab);
    targets[3] = -100;
    const ce = both((b, reference) => {
      const r = crossEntropy(on(b, logits, [rows, vocab]), on(b, targets, [rows], 'i32'), { labelSmoothing: 0.1, reference });
      return [arr(r.losses), arr(r.dlogits)];
    });
    ce.cpu.forEach((want, i) => expectClose(ce.gpu[i]!, want, 1e-4, 1e-7, `crossEntropy ${i}`));
    const cs = both((b, reference) => arr(columnSum(on(b, logits, [rows * 10, vocab / 10]), { reference })));
    expectClose(cs.gpu, cs.cpu, 1e-6, 1e-6, 'columnSum');
    const ids = randomInts(64, 13, 0, 50);
    const dy = randomFloats(64 * 96, 14);
    const emb = both((b, reference) => arr(embeddingBackward(on(b, dy, [64, 96]), on(b, ids, [64], 'i32'), 50, { reference })));
    expectClose(emb.gpu, emb.cpu, 1e-5, 1e-6, 'embeddingBackward');
    expectClose(emb.gpuRef, emb.cpu, 0, 0, 'embeddingBackward ref');
    const pos = Int32Array.from({ length: 16 }, (_, i) => i * 37);
    const rp = both((b, reference) => arr(ropeBackward(on(b, randomFloats(16 * 4 * 64, 15), [16, 4, 64]), on(b, pos, [16], 'i32'), { reference })));
    expectClose(rp.gpu, rp.cpu, 0, 1e-6, 'ropeBackward');
    const n = 100003;
    const p0 = randomFloats(n, 16), g = randomFloats(n, 17, -0.1, 0.1);
    const ad = both((b, reference) => {
      const p = on(b, p0, [n]), m = Tensor.zeros([n], 'f32', b), v = Tensor.zeros([n], 'f32', b);
      adamw(p, on(b, g, [n]), m, v, { lr: 1e-2, step: 1, reference });
      adamw(p, on(b, g, [n]), m, v, { lr: 1e-2, step: 2, reference });
      return [arr(p), arr(m), arr(v)];
    });
    ad.cpu.forEach((want, i) => expectClose(ad.gpu[i]!, want, 1e-6, 1e-9, `adamw ${i}`));
    const ss = both((b, reference) => sumSquares(on(b, p0, [n]), { reference }));
    expect(Math.abs(ss.gpu - ss.cpu)).toBeLessThan(1e-10 * ss.cpu);
    expect(sumSquares(on(gpu(), p0, [n]))).toBe(ss.gpu);
  });

  it('attention backward agrees with the CPU reference and reruns bit for bit', () => {
    const [B, S, H, KVH, D] = [2, 33, 8, 2, 64];
    const q = randomFloats(B * S * H * D, 21), k = randomFloats(B * S * KVH * D, 22), v = randomFloats(B * S * KVH * D, 23);
    const dout = randomFloats(B * S * H * D, 24);
    const mask = Uint8Array.from({ length: B * S }, (_, i) => (i % S < 30 || i < S ? 1 : 0));
    const run = (b: Backend, reference: boolean) => {
      const r = attentionPrefillBackward(on(b, q, [B, S, H, D]), on(b, k, [B, S, KVH, D]), on(b, v, [B, S, KVH, D]), on(b, dout, [B, S, H, D]),
        { causal: true, keyMask: on(b, mask, [B, S], 'u8'), reference });
      return [arr(r.dq), arr(r.dk), arr(r.dv)];
    };
    const r = both(run);
    r.cpu.forEach((want, i) => {
      expectClose(r.gpu[i]!, want, 1e-4, 1e-5, `attention fast ${i}`);
      expectClose(r.gpuRef[i]!, want, 1e-6, 1e-7, `attention ref ${i}`);
    });
    run(gpu(), false).forEach((a, i) => expectBitwiseEqual(a, r.gpu[i]!, `rerun ${i}`));
  });
});

import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import { DecoderModel } from '../src/models/decoder.js';
import { decoderTensorShapes } from '../src/models/names.js';
import { ModelWeights } from '../src/models/weights.js';
import { BatchSampler, type LmExample, causalLmBatch } from '../src/train/data.js';
import { TrainableDecoder } from '../src/train/decoder.js';
import { AdamW, learningRate } from '../src/train/optim.js';
import { Trainer } from '../src/train/trainer.js';
import { randomHostWeights, randomIds, tinyDecoderConfig } from './support/random-models.js';
import { type F64Weights, centralDiffAt, referenceDecoderLoss } from './support/train-reference.js';

const config = tinyDecoderConfig();
const examples: LmExample[] = [0, 1, 2, 3].map((i) => {
  const ids = randomIds(5 + i, config.vocabSize, 30 + i, 3);
  return { ids, loss: Uint8Array.from(ids, (_, t) => (t >= 2 ? 1 : 0)), line: i + 1 };
});

function newTrainable(spec: ConstructorParameters<typeof TrainableDecoder>[1]) {
  const model = new DecoderModel(config, ModelWeights.fromHost(randomHostWeights(decoderTensorShapes(config), 9)));
  const t = new TrainableDecoder(model, spec, { seed: 2 });
  return { t, dispose: () => { t.dispose(); model.dispose(); } };
}

describe('learning rate schedule', () => {
  it('warms up linearly, then follows a cosine (or linear, or constant) to the floor', () => {
    const o = { lr: 1e-3, totalSteps: 110, warmupSteps: 10, minLrRatio: 0.1 };
    expect(learningRate(1, o)).toBeCloseTo(1e-4, 15);
    expect(learningRate(10, o)).toBeCloseTo(1e-3, 15);
    expect(learningRate(11, o)).toBeCloseTo(1e-3, 15);
    expect(learningRate(61, o)).toBeCloseTo(0.55e-3, 15);
    expect(learningRate(110, o)).toBeCloseTo(1e-4 + 0.9e-3 * 0.5 * (1 + Math.cos(Math.PI * 0.99)), 15);
    expect(learningRate(110, o)).toBeGreaterThan(1e-4);
    expect(learningRate(36, { ...o, schedule: 'linear' })).toBeCloseTo(1e-3 - 0.25 * 0.9e-3, 15);
    expect(learningRate(1, { lr: 1e-3, totalSteps: 1 })).toBe(1e-3); // a one-step run still steps
    expect(learningRate(80, { ...o, schedule: 'constant' })).toBe(1e-3);
  });
});

describe('AdamW step', () => {
  it('equals a float64 reference step (clipping by the global norm, decay on matrices only)', () => {
    const { t, dispose } = newTrainable({ kind: 'full' });
    try {
      const batch = causalLmBatch(examples);
      t.zeroGrad();
      t.accumulateGradients(batch, 1 / 12);
      const before = t.params.map((p) => Float64Array.from(p.value.toArray() as Float32Array));
      const g = t.params.map((p) => Float64Array.from(p.grad.toArray() as Float32Array));
      let sq = 0;
      for (const a of g) for (const x of a) sq += x * x;
      const norm = Math.sqrt(sq);
      const maxGradNorm = norm / 3; // clipping active
      const opt = new AdamW(t.params, { weightDecay: 0.1, beta1: 0.8, beta2: 0.95, eps: 1e-6 });
      const lr = 3e-3;
      try {
        const r = opt.step({ lr, maxGradNorm });
        expect(r.gradNorm / norm - 1).toBeLessThan(1e-12);
        const coef = Math.min(1, maxGradNorm / (norm + 1e-6));
        let worst = 0;
        t.params.forEach((p, i) => {
          const after = p.value.toArray() as Float32Array;
          const wd = p.decay ? 0.1 : 0;
          for (let j = 0; j < after.length; j++) {
            const gj = g[i]![j]! * coef;
            const m = 0.2 * gj;
            const v = 0.05 * gj * gj;
            const ref = before[i]![j]! * (1 - lr * wd) - (lr / 0.2) * m / (Math.sqrt(v) / Math.sqrt(0.05) + 1e-6);
            worst = Math.max(worst, Math.abs(after[j]! - ref) / Math.max(Math.abs(ref), 1e-3));
          }
        });
        console.log(`AdamW vs float64: max relative error ${worst.toExponential(2)}`);
        expect(worst).toBeLessThan(2e-6);
        expect(t.params.some((p) => !p.decay)).toBe(true); // the norm gains are excluded from decay
      } finally {
        opt.dispose();
      }
    } finally {
      dispose();
    }
  });

  it('gradient accumulation: 2 micro-batches of 2 give the step of 1 batch of 4', () => {
    const after: Float32Array[][] = [];
    for (const [batchSize, gradAccum] of [[4, 1], [2, 2]] as const) {
      const { t, dispose } = newTrainable({ kind: 'lora', r: 4 });
      try {
        for (const p of t.lora.values()) p.b.value.write(randomFloats(p.b.value.numel, 5, -0.1, 0.1));
        const trainer = new Trainer(t, examples, { steps: 2, batchSize, gradAccum, lr: 1e-2, seed: 4 });
        const p = trainer.trainStep();
        expect(p.tokens).toBe(examples.reduce((n, e) => n + e.ids.length - 2, 0));
        after.push(t.params.map((x) => x.value.toArray() as Float32Array));
        trainer.dispose();
      } finally {
        dispose();
      }
    }
    let worst = 0;
    after[0]!.forEach((a, i) => a.forEach((x, j) => { worst = Math.max(worst, Math.abs(x - after[1]![i]![j]!)); }));
    expect(worst).toBeLessThan(1e-6);
  });
});

describe('one training step against a float64 reference step', () => {
  it('a micro decoder: float64 central-difference gradients of the token-mean loss, clipping, AdamW, all in float64', () => {
    // Small enough for central differences of every parameter (~1.3k forwards of the float64 reference).
    const micro = tinyDecoderConfig({ vocabSize: 11, hiddenSize: 8, numLayers: 1, numHeads: 2, numKvHeads: 1, headDim: 4, intermediateSize: 12 });
    const host = randomHostWeights(decoderTensorShapes(micro), 31);
    const model = new DecoderModel(micro, ModelWeights.fromHost(host));
    const t = new TrainableDecoder(model, { kind: 'full' });
    const ex: LmExample[] = [0, 1, 2].map((i) => {
      const ids = randomIds(4 + i, micro.vocabSize, 40 + i, 3);
      return { ids, loss: Uint8Array.from(ids, (_, k) => (k >= 1 ? 1 : 0)), line: i + 1 };
    });
    const lr = 1e-2;
    const cfg = { beta1: 0.9, beta2: 0.99, eps: 1e-4, weightDecay: 0.1 };
    const trainer = new Trainer(t, ex, { steps: 1, batchSize: 2, gradAccum: 2, lr, maxGradNorm: 0.5, ...cfg, seed: 6 });
    try {
      // The examples the step will see, in its order (2 micro-batches of 2: the 4th draw wraps into epoch 1).
      const probe = new BatchSampler(ex.length, 2, 6);
      const picked = [probe.next(), probe.next()].map((idx) => idx.map((i) => ex[i]!));
      const batches = picked.map((b) => causalLmBatch(b, micro.eosTokenIds[0]!));
      const tokens = batches.reduce((n, b) => n + b.targets.filter((y) => y !== -100).length, 0);
      const f64: F64Weights = new Map([...host].map(([n, { data }]) => [n, Float64Array.from(data)]));
      const loss = () => batches.reduce((sum, b, i) => sum + referenceDecoderLoss(micro, f64, { ...b, lengths: picked[i]!.map((e) => e.ids.length) }), 0) / tokens;
      const grads = new Map([...f64].map(([n, a]) => [n, Float64Array.from(a, (_, i) => centralDiffAt(loss, a, i))]));
      let sq = 0;
      for (const g of grads.values()) for (const x of g) sq += x * x;
      const norm = Math.sqrt(sq);
      const coef = Math.min(1, 0.5 / (norm + 1e-6));
      const progress = trainer.trainStep();
      expect(progress.tokens).toBe(tokens);
      expect(Math.abs(progress.loss / loss() - 1)).toBeLessThan(1e-5);
      expect(Math.abs(progress.gradNorm / norm - 1)).toBeLessThan(1e-4);
      expect(coef).toBeLessThan(1); // clipping is active
      let worst = 0;
      for (const p of t.params) {
        const before = f64.get(p.name)!;
        const g = grads.get(p.name)!;
        const after = p.value.toArray() as Float32Array;
        const wd = p.decay ? cfg.weightDecay : 0;
        for (let i = 0; i < after.length; i++) {
          const gi = g[i]! * coef;
          const m = (1 - cfg.beta1) * gi / (1 - cfg.beta1);
          const v = Math.sqrt((1 - cfg.beta2) * gi * gi / (1 - cfg.beta2));
          const ref = before[i]! * (1 - lr * wd) - lr * m / (v + cfg.eps);
          worst = Math.max(worst, Math.abs(after[i]! - ref) / lr);
        }
      }
      console.log(`training step vs float64: max |Δθ error| ${worst.toExponential(2)} × lr over ${t.params.reduce((n, p) => n + p.value.numel, 0)} parameters`);
      expect(worst).toBeLessThan(1e-4);
    } finally {
      trainer.dispose();
      t.dispose();
      model.dispose();
    }
  });
});

import { Tensor, deviceInfo, fromHalfBits, getCpuBackend, setThreads, toHalfBits } from '@tessera/native';
import { SplitMix32, streamState } from '@tessera/core';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import type { DecoderConfig } from '../src/config.js';
import { DecoderModel } from '../src/models/decoder.js';
import { decoderLinearModules, decoderTensorShapes } from '../src/models/names.js';
import { ModelWeights } from '../src/models/weights.js';
import { IGNORE_INDEX, type LmBatch, TrainableDecoder } from '../src/train/decoder.js';
import type { TrainableSpec } from '../src/train/params.js';
import { randomHostWeights, tinyDecoderConfig } from './support/random-models.js';
import { type F64Lora, type F64Weights, centralDiffAt, referenceDecoderLoss } from './support/train-reference.js';

/**
 * A padded batch: row 0 has 8 real tokens with a 2-token prompt (targets ignored), row 1 has 5 real tokens and 3
 * of padding (token 0, mask 0, targets ignored). Targets are the next tokens.
 */
function makeBatch(config: DecoderConfig, seed: number): LmBatch & { lengths: number[] } {
  const B = 2;
  const S = 8;
  const lengths = [8, 5];
  const prompt = [2, 0];
  const u = randomFloats(B * S, seed, 0, 1);
  const tokens = new Int32Array(B * S);
  const targets = new Int32Array(B * S).fill(IGNORE_INDEX);
  const mask = new Uint8Array(B * S);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < lengths[b]!; t++) {
      tokens[b * S + t] = 3 + Math.floor(u[b * S + t]! * (config.vocabSize - 3));
      mask[b * S + t] = 1;
    }
    for (let t = prompt[b]!; t + 1 < lengths[b]!; t++) targets[b * S + t] = tokens[b * S + t + 1]!;
  }
  return { batch: B, seq: S, tokens, targets, mask, lengths };
}

function setup(config: DecoderConfig, spec: TrainableSpec, seed = 5) {
  const host = randomHostWeights(decoderTensorShapes(config), seed);
  const model = new DecoderModel(config, ModelWeights.fromHost(host));
  const trainer = new TrainableDecoder(model, spec, { seed: 1 });
  const f64: F64Weights = new Map([...host].map(([n, { data }]) => [n, Float64Array.from(data)]));
  return { host, model, trainer, f64, dispose: () => { trainer.dispose(); model.dispose(); } };
}

function grads(trainer: TrainableDecoder, batch: LmBatch): Map<string, Float32Array> {
  trainer.zeroGrad();
  trainer.accumulateGradients(batch, 1);
  return new Map(trainer.params.map((p) => [p.name, p.grad.toArray() as Float32Array]));
}

/** Indices to check per tensor: the largest |gradient| and two seeded random ones. */
function probeIndices(g: Float32Array, seed: number): number[] {
  let best = 0;
  for (let i = 1; i < g.length; i++) if (Math.abs(g[i]!) > Math.abs(g[best]!)) best = i;
  const r = randomFloats(2, seed, 0, 1);
  return [best, Math.floor(r[0]! * g.length), Math.floor(r[1]! * g.length)];
}

/** Worst |g - fd| / (atol + rtol |fd|) over the probes; <= 1 passes. */
function checkAgainstFd(
  g: Map<string, Float32Array>, arrays: Map<string, Float64Array>, loss: () => number, tol: { atol: number; rtol: number },
): { worst: number; maxAbs: number; maxRel: number; probes: number } {
  let worst = 0;
  let maxAbs = 0;
  let maxRel = 0;
  let probes = 0;
  let seed = 100;
  for (const [name, grad] of g) {
    const arr = arrays.get(name)!;
    for (const i of probeIndices(grad, seed++)) {
      const fd = centralDiffAt(loss, arr, i);
      const err = Math.abs(grad[i]! - fd);
      maxAbs = Math.max(maxAbs, err);
      if (Math.abs(fd) > 1e-3) maxRel = Math.max(maxRel, err / Math.abs(fd));
      const ratio = err / (tol.atol + tol.rtol * Math.abs(fd));
      if (ratio > worst) worst = ratio;
      if (ratio > 1) console.log(`${name}[${i}]: native ${grad[i]} vs fd ${fd}`);
      probes++;
    }
  }
  return { worst, maxAbs, maxRel, probes };
}

const TOL = { atol: 5e-6, rtol: 2e-4 };

describe('TrainableDecoder: gradients against float64 central differences', () => {
  for (const tie of [false, true]) {
    it(`full fine-tuning, ${tie ? 'tied' : 'untied'} LM head: loss and every tensor's gradient`, () => {
      const config = tinyDecoderConfig({ tieWordEmbeddings: tie });
      const s = setup(config, { kind: 'full' });
      try {
        const batch = makeBatch(config, 11);
        s.trainer.zeroGrad();
        const { lossSum, count } = s.trainer.accumulateGradients(batch, 1);
        const g = new Map(s.trainer.params.map((p) => [p.name, p.grad.toArray() as Float32Array]));
        expect(g.size).toBe(decoderTensorShapes(config).size);
        const loss = () => referenceDecoderLoss(config, s.f64, batch);
        expect(count).toBe(5 + 4);
        expect(Math.abs(lossSum - loss()) / loss()).toBeLessThan(1e-5);
        const r = checkAgainstFd(g, s.f64, loss, TOL);
        console.log(`full tie=${tie}: ${r.probes} probes, max |err| ${r.maxAbs.toExponential(2)}, max rel ${r.maxRel.toExponential(2)}`);
        expect(r.worst).toBeLessThanOrEqual(1);
      } finally {
        s.dispose();
      }
    });
  }

  it('LoRA (r 4, rsLoRA on, every Linear): dA and dB through the frozen base', () => {
    const config = tinyDecoderConfig();
    const s = setup(config, { kind: 'lora', r: 4, alpha: 8, useRslora: true });
    try {
      // B starts at zero (so dA = 0); give it values so both factors' gradients are exercised.
      let seed = 40;
      for (const p of s.trainer.lora.values()) p.b.value.write(randomFloats(p.b.value.numel, seed++, -0.2, 0.2));
      const batch = makeBatch(config, 12);
      const g = grads(s.trainer, batch);
      expect(g.size).toBe(2 * 7 * config.numLayers);
      const arrays = new Map<string, Float64Array>();
      const lora: F64Lora = new Map();
      for (const p of s.trainer.lora.values()) {
        const a = Float64Array.from(p.a.value.toArray() as Float32Array);
        const b = Float64Array.from(p.b.value.toArray() as Float32Array);
        expect(p.scale).toBeCloseTo(8 / 2, 12);
        lora.set(p.module, { a, b, r: p.r, scale: p.scale });
        arrays.set(p.a.name, a);
        arrays.set(p.b.name, b);
      }
      const loss = () => referenceDecoderLoss(config, s.f64, batch, lora);
      const r = checkAgainstFd(g, arrays, loss, TOL);
      console.log(`lora: ${r.probes} probes, max |err| ${r.maxAbs.toExponential(2)}, max rel ${r.maxRel.toExponential(2)}`);
      expect(r.worst).toBeLessThanOrEqual(1);
    } finally {
      s.dispose();
    }
  });
});

describe('TrainableDecoder: LoRA dropout', () => {
  it('gradients equal central differences of the reference with the same masks (p 0.5, drawn from the seeded stream)', () => {
    const config = tinyDecoderConfig();
    const p = 0.5;
    const s = setup(config, { kind: 'lora', r: 3, alpha: 6, dropout: p });
    try {
      let seed = 60;
      for (const l of s.trainer.lora.values()) l.b.value.write(randomFloats(l.b.value.numel, seed++, -0.2, 0.2));
      const batch = makeBatch(config, 15);
      const T = batch.batch * batch.seq;
      // The forward draws each site's [T, in] mask in forward order from the (seed, 'lora_dropout/<n>') stream.
      const rng = new SplitMix32(streamState(1, 'lora_dropout/0'));
      const lora: F64Lora = new Map();
      const arrays = new Map<string, Float64Array>();
      for (let l = 0; l < config.numLayers; l++) {
        for (const module of Object.values(decoderLinearModules(l))) {
          const lp = s.trainer.lora.get(module)!;
          const inF = lp.a.value.shape[1]!;
          const mask = Float64Array.from({ length: T * inF }, () => (rng.nextFloat() < p ? 0 : 1 / (1 - p)));
          const a = Float64Array.from(lp.a.value.toArray() as Float32Array);
          const b = Float64Array.from(lp.b.value.toArray() as Float32Array);
          lora.set(module, { a, b, r: lp.r, scale: lp.scale, mask });
          arrays.set(lp.a.name, a);
          arrays.set(lp.b.name, b);
        }
      }
      const g = grads(s.trainer, batch);
      expect(s.trainer.dropoutDraws).toBe(1);
      const r = checkAgainstFd(g, arrays, () => referenceDecoderLoss(config, s.f64, batch, lora), TOL);
      console.log(`lora dropout: ${r.probes} probes, max |err| ${r.maxAbs.toExponential(2)}, max rel ${r.maxRel.toExponential(2)}`);
      expect(r.worst).toBeLessThanOrEqual(1);
      // Evaluation runs without dropout: the loss of the unmasked reference.
      const evalLoss = s.trainer.loss(batch).lossSum;
      const plain: F64Lora = new Map([...lora].map(([m, v]) => [m, { a: v.a, b: v.b, r: v.r, scale: v.scale }]));
      expect(Math.abs(evalLoss / referenceDecoderLoss(config, s.f64, batch, plain) - 1)).toBeLessThan(1e-5);
    } finally {
      s.dispose();
    }
  });
});

describe('TrainableDecoder: trainable sets', () => {
  const config = tinyDecoderConfig();
  const batch = makeBatch(config, 13);
  const full = setup(config, { kind: 'full' });
  const fullGrads = grads(full.trainer, batch);
  full.dispose();

  it('layers [1, 2) and head-only train exactly their tensors, with the full run\'s gradients bit for bit', () => {
    for (const [spec, expected] of [
      [{ kind: 'layers', from: 1, to: 2 }, [...decoderTensorShapes(config).keys()].filter((n) => n.startsWith('model.layers.1.'))],
      [{ kind: 'head' }, ['lm_head.weight']],
    ] as const) {
      const s = setup(config, spec);
      try {
        const g = grads(s.trainer, batch);
        expect([...g.keys()]).toEqual(expected);
        for (const [name, v] of g) expect(Buffer.from(v.buffer).equals(Buffer.from(fullGrads.get(name)!.buffer)), name).toBe(true);
      } finally {
        s.dispose();
      }
    }
  });

  it('refuses a layer range outside the model and LoRA targets that match nothing', () => {
    const host = randomHostWeights(decoderTensorShapes(config), 5);
    const model = new DecoderModel(config, ModelWeights.fromHost(host));
    try {
      expect(() => new TrainableDecoder(model, { kind: 'layers', from: 1, to: 3 })).toThrow(/\[1, 3\).*\[0, 2\)/);
      expect(() => new TrainableDecoder(model, { kind: 'lora', targetModules: ['query'] })).toThrow(/match none/);
    } finally {
      model.dispose();
    }
  });
});

describe('TrainableDecoder: determinism', () => {
  it('gradients are bitwise identical for 1 and 2 threads and on reruns', () => {
    const config = tinyDecoderConfig();
    const batch = makeBatch(config, 14);
    const cpu = getCpuBackend();
    const before = deviceInfo(cpu).threads ?? 1;
    const runs: Map<string, Float32Array>[] = [];
    for (const spec of [{ kind: 'full' }, { kind: 'lora', r: 4, dropout: 0.1 }] as const) {
      for (const threads of [1, 2, 2]) {
        setThreads(threads, cpu);
        const s = setup(config, spec);
        try {
          if (spec.kind === 'lora') for (const p of s.trainer.lora.values()) p.b.value.write(randomFloats(p.b.value.numel, 3, -0.2, 0.2));
          runs.push(grads(s.trainer, batch));
        } finally {
          s.dispose();
        }
      }
    }
    setThreads(before, cpu);
    for (const [first, others] of [[runs[0]!, runs.slice(1, 3)], [runs[3]!, runs.slice(4, 6)]] as const) {
      for (const other of others) {
        for (const [name, v] of first) expect(Buffer.from(v.buffer).equals(Buffer.from(other.get(name)!.buffer)), name).toBe(true);
      }
    }
  });
});

describe('TrainableDecoder: half-precision base', () => {
  it('LoRA over a bf16 base gives the gradients of LoRA over the same (rounded) weights in f32', () => {
    const config = tinyDecoderConfig();
    const host = randomHostWeights(decoderTensorShapes(config), 5);
    const rounded = new Map([...host].map(([n, { data, shape }]) => [n, { data: fromHalfBits(toHalfBits(data, 'bf16'), 'bf16'), shape }]));
    const bf16 = new Map([...rounded].map(([n, { data, shape }]) =>
      [n, shape.length === 2 ? Tensor.from(toHalfBits(data, 'bf16'), shape, { dtype: 'bf16' }) : Tensor.from(data, shape)]));
    const batch = makeBatch(config, 16);
    const results: Map<string, Float32Array>[] = [];
    for (const weights of [new ModelWeights(bf16, getCpuBackend()), ModelWeights.fromHost(rounded)]) {
      const model = new DecoderModel(config, weights);
      const t = new TrainableDecoder(model, { kind: 'lora', r: 4 }, { seed: 1 });
      try {
        for (const p of t.lora.values()) p.b.value.write(randomFloats(p.b.value.numel, 8, -0.2, 0.2));
        results.push(grads(t, batch));
      } finally {
        t.dispose();
        model.dispose();
      }
    }
    for (const [name, g] of results[0]!) {
      const f = results[1]!.get(name)!;
      let num = 0;
      let den = 0;
      for (let i = 0; i < g.length; i++) {
        num = Math.max(num, Math.abs(g[i]! - f[i]!));
        den = Math.max(den, Math.abs(f[i]!));
      }
      expect(num / den, name).toBeLessThan(1e-5);
    }
  });
});

import { deviceInfo, getCpuBackend, setThreads } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import type { EncoderConfig } from '../src/config.js';
import { EncoderModel } from '../src/models/encoder.js';
import { encoderTensorShapes } from '../src/models/names.js';
import { ModelWeights } from '../src/models/weights.js';
import { type ClassificationExample, classificationBatch } from '../src/train/data.js';
import { TrainableEncoder } from '../src/train/encoder.js';
import type { TrainableSpec } from '../src/train/params.js';
import { randomHostWeights, randomIds, tinyEncoderConfig } from './support/random-models.js';
import { type F64Lora, type F64Weights, centralDiffAt, referenceEncoderLogits, referenceEncoderLoss } from './support/train-reference.js';

const examples = (config: EncoderConfig): ClassificationExample[] =>
  [7, 4, 6].map((n, i) => ({ ids: randomIds(n, config.vocabSize, 70 + i, 1), label: [0, 2, 1][i]!, line: i + 1 }));

function setup(config: EncoderConfig, spec: TrainableSpec) {
  const host = randomHostWeights(encoderTensorShapes(config), 8);
  const model = new EncoderModel(config, ModelWeights.fromHost(host));
  const trainer = new TrainableEncoder(model, spec, { seed: 1 });
  const f64: F64Weights = new Map([...host].map(([n, { data }]) => [n, Float64Array.from(data)]));
  return { model, trainer, f64, dispose: () => { trainer.dispose(); model.dispose(); } };
}

function grads(t: TrainableEncoder, ex: ClassificationExample[]): Map<string, Float32Array> {
  t.zeroGrad();
  t.accumulateGradients(classificationBatch(ex, 0), 1);
  return new Map(t.params.map((p) => [p.name, p.grad.toArray() as Float32Array]));
}

function fdCheck(g: Map<string, Float32Array>, arrays: Map<string, Float64Array>, loss: () => number) {
  const tol = { atol: 5e-6, rtol: 2e-4 };
  let worst = 0;
  let maxAbs = 0;
  let probes = 0;
  let seed = 300;
  for (const [name, grad] of g) {
    let best = 0;
    for (let i = 1; i < grad.length; i++) if (Math.abs(grad[i]!) > Math.abs(grad[best]!)) best = i;
    const r = randomFloats(1, seed++, 0, 1);
    for (const i of [best, Math.floor(r[0]! * grad.length)]) {
      const fd = centralDiffAt(loss, arrays.get(name)!, i);
      const err = Math.abs(grad[i]! - fd);
      maxAbs = Math.max(maxAbs, err);
      const ratio = err / (tol.atol + tol.rtol * Math.abs(fd));
      if (ratio > 1) console.log(`${name}[${i}]: native ${grad[i]} vs fd ${fd}`);
      worst = Math.max(worst, ratio);
      probes++;
    }
  }
  return { worst, maxAbs, probes };
}

describe('TrainableEncoder (sequence classification)', () => {
  it('full fine-tuning: loss, logits and every tensor\'s gradient against float64 central differences (padded batch)', () => {
    const config = tinyEncoderConfig();
    const s = setup(config, { kind: 'full' });
    try {
      const ex = examples(config);
      const loss = () => referenceEncoderLoss(config, s.f64, ex);
      const logits = s.trainer.logits(classificationBatch(ex, 0));
      ex.forEach((e, b) => {
        const ref = referenceEncoderLogits(config, s.f64, e.ids);
        ref.forEach((v, j) => expect(Math.abs(logits[b * 3 + j]! - v)).toBeLessThan(2e-5));
      });
      const g = grads(s.trainer, ex);
      expect(g.size).toBe(encoderTensorShapes(config).size);
      const r = fdCheck(g, s.f64, loss);
      console.log(`encoder full: ${r.probes} probes, max |err| ${r.maxAbs.toExponential(2)}`);
      expect(r.worst).toBeLessThanOrEqual(1);
    } finally {
      s.dispose();
    }
  });

  it('LoRA on every Linear (gelu_new): dA and dB against float64 central differences', () => {
    const config = tinyEncoderConfig({ hiddenAct: 'gelu_new' });
    const s = setup(config, { kind: 'lora', r: 2, alpha: 4, targetModules: ['query', 'key', 'value', 'attention.output.dense', 'intermediate.dense', 'output.dense'] });
    try {
      expect(s.trainer.lora.size).toBe(6 * config.numLayers);
      let seed = 90;
      for (const p of s.trainer.lora.values()) p.b.value.write(randomFloats(p.b.value.numel, seed++, -0.3, 0.3));
      const ex = examples(config);
      const arrays = new Map<string, Float64Array>();
      const lora: F64Lora = new Map();
      for (const p of s.trainer.lora.values()) {
        const a = Float64Array.from(p.a.value.toArray() as Float32Array);
        const b = Float64Array.from(p.b.value.toArray() as Float32Array);
        lora.set(p.module, { a, b, r: p.r, scale: p.scale });
        arrays.set(p.a.name, a);
        arrays.set(p.b.name, b);
      }
      const r = fdCheck(grads(s.trainer, ex), arrays, () => referenceEncoderLoss(config, s.f64, ex, lora));
      console.log(`encoder lora: ${r.probes} probes, max |err| ${r.maxAbs.toExponential(2)}`);
      expect(r.worst).toBeLessThanOrEqual(1);
    } finally {
      s.dispose();
    }
  });

  it('bottleneck adapters (PetS layout) + own head and task LayerNorms: gradients against float64 central differences', () => {
    const config = tinyEncoderConfig();
    const s = setup(config, { kind: 'adapter', bottleneck: 5, activation: 'gelu_tanh' });
    try {
      const t = s.trainer;
      const names = t.params.map((p) => p.name);
      expect(names.slice(0, 2)).toEqual(['classifier.weight', 'classifier.bias']);
      expect(names).toContain('bert.encoder.layer.2.output.dense.adapter.up.weight');
      expect(names).toContain('bert.encoder.layer.0.attention.output.LayerNorm.bias');
      expect(names).toHaveLength(2 + config.numLayers * (8 + 4));
      let seed = 120;
      for (const a of t.adapters.values()) {
        for (const p of [a.up, a.upBias, a.downBias]) p.value.write(randomFloats(p.value.numel, seed++, -0.2, 0.2));
      }
      const ex = examples(config);
      const g = grads(t, ex);
      // The reference reads the task's tensors (adapters, head and LayerNorm copies) by the same names.
      const w: F64Weights = new Map(s.f64);
      for (const p of t.params) w.set(p.name, Float64Array.from(p.value.toArray() as Float32Array));
      const r = fdCheck(g, w, () => referenceEncoderLoss(config, w, ex, undefined, 'gelu_tanh'));
      console.log(`encoder adapters: ${r.probes} probes, max |err| ${r.maxAbs.toExponential(2)}`);
      expect(r.worst).toBeLessThanOrEqual(1);
      // The shared model is never written: the head and norms trained are copies.
      const { metadata, tensors } = t.petParams();
      expect(metadata).toMatchObject({ format: 'tessera-pet', format_version: '1', pet_type: 'adapter' });
      expect(JSON.parse(metadata.pet_config!)).toEqual({ labels: ['a', 'b', 'c'], bottleneck: 5, activation: 'gelu_tanh' });
      expect(tensors.get('bert.encoder.layer.1.attention.output.dense.adapter.down.weight')!.shape).toEqual([5, 48]);
      expect(tensors.get('bert.encoder.layer.1.attention.output.dense.adapter.up.weight')!.shape).toEqual([48, 5]);
      expect(s.model.weights.get('classifier.weight')).not.toBe(t.params[0]!.value);
    } finally {
      s.dispose();
    }
  });

  it("HMI's placement (upper layers, one adapter after attention, no task norms): gradients and the flat per-layer vectors", () => {
    const config = tinyEncoderConfig();
    const s = setup(config, { kind: 'adapter', bottleneck: 4, layers: { from: 1, to: 3 }, sites: ['attn_out'], taskNorms: false });
    try {
      const t = s.trainer;
      expect(t.params.map((p) => p.name)).toEqual([
        'classifier.weight', 'classifier.bias',
        ...[1, 2].flatMap((l) => ['down.weight', 'down.bias', 'up.weight', 'up.bias'].map((x) => `bert.encoder.layer.${l}.attention.output.dense.adapter.${x}`)),
      ]);
      let seed = 140;
      for (const a of t.adapters.values()) for (const p of [a.up, a.upBias, a.downBias]) p.value.write(randomFloats(p.value.numel, seed++, -0.2, 0.2));
      const ex = examples(config);
      const g = grads(t, ex);
      const w: F64Weights = new Map(s.f64);
      for (const p of t.params) w.set(p.name, Float64Array.from(p.value.toArray() as Float32Array));
      const r = fdCheck(g, w, () => referenceEncoderLoss(config, w, ex));
      expect(r.worst).toBeLessThanOrEqual(1);
      const flat = t.hmiAdapters();
      expect(flat.map((f) => f.layer)).toEqual([1, 2]);
      const a1 = t.adapters.get('bert.encoder.layer.1.attention.output.dense')!;
      const parts = [a1.down, a1.downBias, a1.up, a1.upBias].map((p) => Array.from(p.value.toArray() as Float32Array));
      expect(Array.from(flat[0]!.data)).toEqual(parts.flat());
      expect(flat[0]!.data.length).toBe(2 * 48 * 4 + 4 + 48);
      expect(() => t.petParams()).toThrow(/both sites of every layer/);
    } finally {
      s.dispose();
    }
  });

  it('BitFit, head and layers [1, 3) train exactly their tensors, with the full run\'s gradients bit for bit', () => {
    const config = tinyEncoderConfig();
    const ex = examples(config);
    const full = setup(config, { kind: 'full' });
    const fullGrads = grads(full.trainer, ex);
    full.dispose();
    const names = [...encoderTensorShapes(config).keys()];
    for (const [spec, expected] of [
      [{ kind: 'bitfit' }, names.filter((n) => n.endsWith('.bias') || n === 'classifier.weight')],
      [{ kind: 'head' }, ['bert.pooler.dense.weight', 'bert.pooler.dense.bias', 'classifier.weight', 'classifier.bias']],
      [{ kind: 'layers', from: 1, to: 3 }, names.filter((n) => /^bert\.encoder\.layer\.[12]\./.test(n))],
    ] as const) {
      const s = setup(config, spec);
      try {
        const g = grads(s.trainer, ex);
        expect([...g.keys()]).toEqual(expected);
        for (const [name, v] of g) expect(Buffer.from(v.buffer).equals(Buffer.from(fullGrads.get(name)!.buffer)), name).toBe(true);
      } finally {
        s.dispose();
      }
    }
  });

  it('refuses LoRA targets that reach the head', () => {
    const config = tinyEncoderConfig();
    const model = new EncoderModel(config, ModelWeights.fromHost(randomHostWeights(encoderTensorShapes(config), 8)));
    try {
      expect(() => new TrainableEncoder(model, { kind: 'lora', targetModules: ['dense'] })).toThrow(/bert\.pooler\.dense/);
    } finally {
      model.dispose();
    }
  });

  it('gradients are bitwise identical for 1 and 2 threads and on reruns', () => {
    const config = tinyEncoderConfig();
    const ex = examples(config);
    const cpu = getCpuBackend();
    const before = deviceInfo(cpu).threads ?? 1;
    const runs: Map<string, Float32Array>[] = [];
    try {
      for (const threads of [1, 2, 2]) {
        setThreads(threads, cpu);
        const s = setup(config, { kind: 'full' });
        try {
          runs.push(grads(s.trainer, ex));
        } finally {
          s.dispose();
        }
      }
    } finally {
      setThreads(before, cpu);
    }
    for (const other of runs.slice(1)) for (const [name, v] of runs[0]!) expect(Buffer.from(v.buffer).equals(Buffer.from(other.get(name)!.buffer)), name).toBe(true);
  });
});

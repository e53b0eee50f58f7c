/**
 * The registry and the seven operators: documented layouts, validation (every failure names the tensor), what a
 * load puts on the device (MaskBert's derived CSR, BitFit's b_t − b, …), the PetOps per site in the §3.9 order,
 * device bytes against the allocator, and the analytic cost.
 */
import { type EncoderConfig, EncoderModel, ModelWeights, encoderLinearModules, encoderNormModules } from '@tessera/engine';
import { Tensor, allocatorStats, getBackend, petOpCost } from '@tessera/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type HostTensor,
  PET_TYPES,
  PetConfigError,
  type PetParams,
  PetShapeError,
  type PetType,
  SharedEncoder,
  TaskStateError,
  UnknownPetTypeError,
  adapterTensorNames,
  defaultPetRegistry,
  diffTensorNames,
  generatePetParams,
  isConfigValidating,
  loraTensorNames,
  maskTensorName,
  prefixTensorNames,
  seededSharedWeights,
} from '../src/index.js';

const config: EncoderConfig = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 50,
  hiddenSize: 20,
  numLayers: 2,
  numHeads: 4,
  intermediateSize: 36,
  maxPositions: 16,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 3,
  labels: ['a', 'b', 'c'],
};
const registry = defaultPetRegistry();
const gen = (type: PetType, seed = 1, extra: Parameters<typeof generatePetParams>[2] extends infer O ? Partial<O> : never = {}) =>
  generatePetParams(type, config, { seed, ...extra });

function validate(params: PetParams): void {
  const op = registry.get(params.type);
  if (!isConfigValidating(op)) throw new Error('expected a config-validating operator');
  op.validateForConfig(config, params);
}

/** A copy of `params` with one tensor replaced (or removed with `null`). */
function withTensor(params: PetParams, name: string, t: HostTensor | null): PetParams {
  const tensors = new Map(params.tensors);
  if (t === null) tensors.delete(name);
  else tensors.set(name, t);
  return { ...params, tensors };
}

function expectShapeError(fn: () => void, tensor: string, text?: RegExp): void {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(PetShapeError);
    expect((err as PetShapeError).tensor).toBe(tensor);
    expect((err as Error).message).toContain(tensor);
    if (text) expect((err as Error).message).toMatch(text);
    return;
  }
  throw new Error(`expected a PetShapeError naming ${tensor}`);
}

describe('PetRegistry', () => {
  it('holds all seven types and rejects unknown ones by listing the known', () => {
    expect(registry.types()).toEqual([...PET_TYPES]);
    for (const t of PET_TYPES) expect(registry.get(t).type).toBe(t);
    expect(() => registry.get('ia3')).toThrow(UnknownPetTypeError);
    expect(() => registry.get('ia3')).toThrow(/ia3.*adapter, maskbert, diff, bitfit, lora, prefix, standard/);
  });
});

describe('layouts', () => {
  const l0 = encoderLinearModules(config, 0);
  const names = (type: PetType, pet = gen(type).config) => new Map(registry.get(type).layout(config, pet).map((s) => [s.name, s]));

  it('every type stores the head; STANDARD only the head', () => {
    for (const t of PET_TYPES) {
      const n = names(t);
      expect(n.get('classifier.weight')?.shape).toEqual([3, 20]);
      expect(n.get('classifier.bias')?.shape).toEqual([3]);
    }
    expect([...names('standard').keys()]).toEqual(['classifier.weight', 'classifier.bias']);
  });

  it('diff: CSR + bias_diff per Linear module under its HF name, optional task LayerNorms', () => {
    const n = names('diff');
    expect(n.get(`${l0.query}.delta.indptr`)).toMatchObject({ dtype: 'i32', shape: [21] });
    expect(n.get(`${l0.ffn_in}.delta.indptr`)).toMatchObject({ dtype: 'i32', shape: [37] });
    expect(n.get(`${l0.ffn_out}.delta.indices`)).toMatchObject({ dtype: 'i32', shape: [-1] });
    expect(n.get(`${l0.attn_out}.delta.values`)).toMatchObject({ dtype: 'f32', shape: [-1] });
    expect(n.get(`${l0.value}.bias_diff`)).toMatchObject({ dtype: 'f32', shape: [20] });
    expect(n.get(`${encoderNormModules(config, 1).ffn_ln}.weight`)).toMatchObject({ optional: true, shape: [20] });
    expect(n.size).toBe(2 + 2 * 6 * 4 + 2 * 2 * 2);
  });

  it('maskbert: one bit-packed u8 mask per Linear, [out, ceil(in/8)]', () => {
    const n = names('maskbert');
    expect(n.get(`${l0.key}.mask`)).toMatchObject({ dtype: 'u8', shape: [20, 3] });
    expect(n.get(`${l0.ffn_out}.mask`)).toMatchObject({ dtype: 'u8', shape: [20, 5] });
    expect(n.size).toBe(2 + 12);
  });

  it('bitfit: every Linear bias under the shared name, optional task LayerNorms', () => {
    const n = names('bitfit');
    expect(n.get(`${l0.ffn_in}.bias`)).toMatchObject({ dtype: 'f32', shape: [36] });
    expect(n.size).toBe(2 + 12 + 8);
  });

  it('adapter: down/up pairs after attention.output.dense and output.dense', () => {
    const n = names('adapter', { labels: ['a'], bottleneck: 3 });
    const a = adapterTensorNames(l0.attn_out);
    expect(n.get(a.down)?.shape).toEqual([3, 20]);
    expect(n.get(a.up)?.shape).toEqual([20, 3]);
    expect(n.get(adapterTensorNames(l0.ffn_out).upBias)?.shape).toEqual([20]);
    expect(n.has(adapterTensorNames(l0.ffn_in).down)).toBe(false);
    expect(() => registry.get('adapter').layout(config, { labels: ['a'] })).toThrow(PetConfigError);
  });

  it('lora: PEFT lora_A/lora_B under the target modules only', () => {
    const n = names('lora', { labels: ['a'], rank: 4, targetModules: ['query', 'output.dense'] });
    expect(n.get(loraTensorNames(l0.query).a)?.shape).toEqual([4, 20]);
    expect(n.get(loraTensorNames(l0.query).b)?.shape).toEqual([20, 4]);
    expect(n.get(loraTensorNames(l0.ffn_out).a)?.shape).toEqual([4, 36]);
    expect(n.get(loraTensorNames(l0.attn_out).a)?.shape).toEqual([4, 20]); // attention.output.dense ends in .output.dense
    expect(n.has(loraTensorNames(l0.value).a)).toBe(false);
    expect(() => registry.get('lora').layout(config, { labels: ['a'], rank: 4, targetModules: ['q_proj'] })).toThrow(/q_proj.*matches no Linear/);
  });

  it('prefix: keys and values per layer under attention.self', () => {
    const n = names('prefix', { labels: ['a'], prefixLength: 5 });
    expect(prefixTensorNames(config, 1).key).toBe('bert.encoder.layer.1.attention.self.prefix.key');
    expect(n.get(prefixTensorNames(config, 1).value)?.shape).toEqual([5, 20]);
  });
});

describe('validation', () => {
  it('accepts generated parameters of every type', () => {
    for (const t of PET_TYPES) expect(() => validate(gen(t)), t).not.toThrow();
  });

  it('names a missing, unknown, mistyped or misshapen tensor', () => {
    const p = gen('diff');
    const l0 = encoderLinearModules(config, 0);
    const bias = diffTensorNames(l0.query).biasDiff;
    expectShapeError(() => validate(withTensor(p, bias, null)), bias, /no such tensor/);
    expectShapeError(() => validate(withTensor(p, 'extra.weight', { dtype: 'f32', shape: [1], data: new Float32Array(1) })), 'extra.weight', /does not name it/);
    expectShapeError(() => validate(withTensor(p, bias, { dtype: 'i32', shape: [20], data: new Int32Array(20) })), bias, /f32 \[20\].*i32 \[20\]/);
    expectShapeError(() => validate(withTensor(p, bias, { dtype: 'f32', shape: [21], data: new Float32Array(21) })), bias, /expected f32 \[20\], got f32 \[21\]/);
    expectShapeError(() => validate(withTensor(p, bias, { dtype: 'f32', shape: [20], data: new Float32Array(19) })), bias, /19/);
    expectShapeError(() => validate(withTensor(p, bias, { dtype: 'f32', shape: [20], data: new Float32Array(20).fill(Number.NaN) })), bias, /finite/);
  });

  it('checks CSR structure: indptr from 0 to nnz, monotone; indices in range and strictly increasing per row', () => {
    const m = encoderLinearModules(config, 1).ffn_in; // [36, 20]
    const n = diffTensorNames(m);
    const base = withTensor(withTensor(gen('diff', 1, { density: 0 }), n.indices, { dtype: 'i32', shape: [3], data: Int32Array.from([2, 7, 4]) }), n.values, { dtype: 'f32', shape: [3], data: new Float32Array(3) });
    const indptr = (v: number[]) => withTensor(base, n.indptr, { dtype: 'i32', shape: [37], data: Int32Array.from(v) });
    const ok = Array.from({ length: 37 }, (_, i) => (i < 1 ? 0 : i < 2 ? 2 : 3)); // row 0: {2, 7}, row 1: {4}
    expect(() => validate(indptr(ok))).not.toThrow();
    expectShapeError(() => validate(indptr(ok.map((v) => v + 1))), n.indptr, /indptr\[0\] = 0/);
    expectShapeError(() => validate(indptr(ok.map((v, i) => (i === 36 ? 2 : v)))), n.indptr, /nnz = 3/);
    expectShapeError(() => validate(indptr(ok.map((v, i) => (i === 2 ? 1 : v)))), n.indptr, /non-decreasing/);
    const idx = (v: number[]) => withTensor(indptr(ok), n.indices, { dtype: 'i32', shape: [3], data: Int32Array.from(v) });
    expectShapeError(() => validate(idx([7, 2, 4])), n.indices, /strictly increasing/);
    expectShapeError(() => validate(idx([2, 2, 4])), n.indices, /strictly increasing/);
    expectShapeError(() => validate(idx([2, 20, 4])), n.indices, /\[0, 20\)/);
    expectShapeError(() => validate(idx([-1, 2, 4])), n.indices, /\[0, 20\)/);
    expectShapeError(() => validate(withTensor(indptr(ok), n.values, { dtype: 'f32', shape: [2], data: new Float32Array(2) })), n.values, /3 values/);
  });

  it('checks mask padding bits (LSB-first bit order)', () => {
    const p = gen('maskbert');
    const name = maskTensorName(encoderLinearModules(config, 0).query); // 20 inputs: 3 bytes, 4 padding bits
    const mask = (p.tensors.get(name)!.data as Uint8Array).slice();
    expect(() => validate(withTensor(p, name, { dtype: 'u8', shape: [20, 3], data: mask }))).not.toThrow();
    mask[5]! |= 0x10; // row 1, byte 2, bit 4 = input 20: past the end
    expectShapeError(() => validate(withTensor(p, name, { dtype: 'u8', shape: [20, 3], data: mask })), name, /padding/);
  });

  it('checks labels, the head width, LayerNorm pairs, config fields and the type', () => {
    const p = gen('bitfit');
    expect(() => validate({ ...p, config: { labels: [] } })).toThrow(PetConfigError);
    expect(() => validate({ ...p, config: { labels: ['a', 'a', 'b'] } })).toThrow(/twice/);
    expectShapeError(() => validate({ ...p, config: { labels: ['a', 'b'] } }), 'classifier.weight', /f32 \[2, 20\].*f32 \[3, 20\]/);
    const ln = encoderNormModules(config, 0).attn_ln;
    expectShapeError(() => validate(withTensor(p, `${ln}.bias`, null)), `${ln}.bias`, /only .*weight/);
    const bitfitOp = registry.get('bitfit');
    expect(() => bitfitOp.validate({ config } as never, { ...gen('diff') })).toThrow(/of type diff, not bitfit/);
    expect(() => validate({ ...gen('lora'), config: { ...gen('lora').config, rank: 0 } })).toThrow(/rank must be a positive integer/);
    expect(() => validate({ ...gen('prefix'), config: { labels: ['a', 'b', 'c'] } })).toThrow(/prefixLength/);
    expect(() => validate({ ...gen('adapter'), config: { ...gen('adapter').config, activation: 'swish' as 'gelu' } })).toThrow(/activation/);
    const op = registry.get('standard');
    if (!isConfigValidating(op)) throw new Error('unreachable');
    expect(() => op.validateForConfig({ ...config, architecture: 'BertModel', numLabels: 0, labels: [] }, gen('standard'))).toThrow(/pooler/);
  });

  it('storedBytes counts the compressed tensors (bit-packed masks, CSR)', () => {
    const mask = gen('maskbert');
    const bytes = registry.get('maskbert').storedBytes(mask);
    const maskBytes = 2 * (4 * 20 * 3 + 36 * 3 + 20 * 5);
    expect(bytes).toBe(maskBytes + (3 * 20 + 3) * 4);
  });
});

describe('stored bytes at BERT-base width follow pets.md §2.7', () => {
  it('MaskBert ≈ 3.1% of the f32 linear weights (bit-packed), Diff ≈ 1.2% (0.5% nnz as CSR, row pointers, b_t), BitFit ≈ 0.1%', () => {
    const base: EncoderConfig = { ...config, vocabSize: 8, hiddenSize: 768, numHeads: 12, intermediateSize: 3072, numLayers: 1, maxPositions: 4, numLabels: 2, labels: ['a', 'b'] };
    const weightBytes = 4 * (4 * 768 * 768 + 2 * 768 * 3072);
    const head = (2 * 768 + 2) * 4;
    const share = (type: PetType) => (registry.get(type).storedBytes(generatePetParams(type, base, { seed: 1, taskLayerNorm: false })) - head) / weightBytes;
    expect(share('maskbert')).toBeCloseTo(1 / 32, 6);
    expect(share('diff')).toBeGreaterThan(0.01);
    expect(share('diff')).toBeLessThan(0.013);
    expect(share('bitfit')).toBeCloseTo((4 * 768 + 3072 + 768) / (4 * 768 * 768 + 2 * 768 * 3072), 9);
  });
});

describe('loaded tasks', () => {
  let shared: SharedEncoder;
  const backend = getBackend();

  beforeAll(() => {
    shared = new SharedEncoder('toy', new EncoderModel(config, ModelWeights.fromHost(seededSharedWeights(config, 5), backend)), null);
  });
  afterAll(() => shared.dispose());

  function load(params: PetParams) {
    return registry.get(params.type).load(shared, params, backend);
  }

  /** A site context over `rows` fresh tensors (contents irrelevant: the ops are inspected, not run). */
  function siteTensors(layer: number) {
    const lin = encoderLinearModules(config, layer);
    const t = (cols: number) => Tensor.zeros([4, cols], 'f32', backend);
    const x = t(20);
    const q = t(20), k = t(20), v = t(20);
    return {
      x, q, k, v,
      qkv: { layer, site: 'qkv' as const, x, rows: { start: 1, seqs: 1, stride: 3, tokens: 3 }, outputs: [{ slice: 'query', module: lin.query, y: q }, { slice: 'key', module: lin.key, y: k }, { slice: 'value', module: lin.value, y: v }] },
      attnOut: { layer, site: 'attn_out' as const, x, rows: { start: 0, seqs: 2, stride: 2, tokens: 2 }, outputs: [{ slice: 'attn_out', module: lin.attn_out, y: q }] },
      dispose: () => [x, q, k, v].forEach((a) => a.dispose()),
    };
  }

  it('bytes equal what the allocator charged; dispose gives it all back and later use throws', () => {
    for (const type of PET_TYPES) {
      const before = allocatorStats(backend).inUse;
      const pet = load(gen(type, 3, { shared: (n) => shared.hostWeight(n) }));
      expect(allocatorStats(backend).inUse - before, type).toBe(pet.bytes);
      pet.dispose();
      expect(allocatorStats(backend).inUse, type).toBe(before);
      expect(() => pet.attentionPrefix(0)).toThrow(TaskStateError);
      pet.dispose(); // idempotent
    }
  });

  it('MaskBert: S = W ⊙ M̄ as CSR with scale −1, per q/k/v slice', () => {
    const params = gen('maskbert', 7);
    const pet = load(params);
    const s = siteTensors(1);
    try {
      const ops = pet.linearOps(s.qkv);
      expect(ops.map((o) => o.kind)).toEqual(['csr', 'csr', 'csr']);
      expect(ops.map((o) => o.y)).toEqual([s.q, s.k, s.v]);
      const module = encoderLinearModules(config, 1).key;
      const op = ops[1]!;
      if (op.kind !== 'csr') throw new Error('unreachable');
      expect(op.scale).toBe(-1);
      expect(op.x).toBe(s.x);
      expect(op.rows).toEqual(s.qkv.rows);
      const indptr = op.indptr.toArray() as Int32Array;
      const indices = op.indices.toArray() as Int32Array;
      const values = op.values.toArray() as Float32Array;
      const mask = params.tensors.get(maskTensorName(module))!.data as Uint8Array;
      const w = shared.hostWeight(`${module}.weight`);
      let zeros = 0;
      for (let o = 0; o < 20; o++) {
        const expected: number[] = [];
        for (let i = 0; i < 20; i++) if (((mask[o * 3 + (i >> 3)]! >> (i & 7)) & 1) === 0) expected.push(i);
        zeros += expected.length;
        expect([...indices.subarray(indptr[o]!, indptr[o + 1]!)]).toEqual(expected);
        expect([...values.subarray(indptr[o]!, indptr[o + 1]!)]).toEqual(expected.map((i) => w[o * 20 + i]!));
      }
      expect(zeros).toBe(Math.round(0.05 * 400));
      expect(pet.normOps({ layer: 0, site: 'attn_ln', x: s.x, y: s.q, rows: s.qkv.rows })).toEqual([]);
      expect(pet.lora).toBeNull();
      expect(pet.attentionPrefix(0)).toBeNull();
    } finally {
      s.dispose();
      pet.dispose();
    }
  });

  it('Diff: SpMM then bias per slice; the task LayerNorm at the norm sites', () => {
    const params = gen('diff', 4, { density: 0.1 });
    const pet = load(params);
    const s = siteTensors(0);
    try {
      const ops = pet.linearOps(s.qkv);
      expect(ops.map((o) => `${o.kind}:${ops.indexOf(o) < 2 ? 'q' : ops.indexOf(o) < 4 ? 'k' : 'v'}`)).toEqual(['csr:q', 'bias:q', 'csr:k', 'bias:k', 'csr:v', 'bias:v']);
      const bias = ops[3]!;
      if (bias.kind !== 'bias') throw new Error('unreachable');
      expect(bias.y).toBe(s.k);
      expect(bias.bias.toArray()).toEqual(params.tensors.get(diffTensorNames(encoderLinearModules(config, 0).key).biasDiff)!.data);
      const csr = ops[0]!;
      if (csr.kind !== 'csr') throw new Error('unreachable');
      expect(csr.scale).toBeUndefined();
      const ln = pet.normOps({ layer: 1, site: 'ffn_ln', x: s.x, y: s.q, rows: s.attnOut.rows });
      expect(ln).toHaveLength(1);
      const op = ln[0]!;
      if (op.kind !== 'layernorm') throw new Error('unreachable');
      expect(op.eps).toBe(config.layerNormEps);
      expect(op.gamma.toArray()).toEqual(params.tensors.get(`${encoderNormModules(config, 1).ffn_ln}.weight`)!.data);
    } finally {
      s.dispose();
      pet.dispose();
    }
    const noNorm = load(gen('diff', 4, { taskLayerNorm: false }));
    expect(noNorm.normOps({ layer: 0, site: 'attn_ln', x: shared.model.weights.get('classifier.bias'), y: shared.model.weights.get('classifier.bias'), rows: { start: 0, seqs: 1, stride: 1, tokens: 1 } })).toEqual([]);
    noNorm.dispose();
  });

  it('BitFit: the op adds b_t − b (the engine already added b)', () => {
    const params = gen('bitfit', 9, { shared: (n) => shared.hostWeight(n) });
    const pet = load(params);
    const s = siteTensors(1);
    try {
      const ops = pet.linearOps(s.attnOut);
      expect(ops.map((o) => o.kind)).toEqual(['bias']);
      const module = encoderLinearModules(config, 1).attn_out;
      const taskBias = params.tensors.get(`${module}.bias`)!.data as Float32Array;
      const sharedBias = shared.hostWeight(`${module}.bias`);
      const op = ops[0]!;
      if (op.kind !== 'bias') throw new Error('unreachable');
      expect(op.bias.toArray()).toEqual(Float32Array.from(taskBias, (b, i) => b - sharedBias[i]!));
    } finally {
      s.dispose();
      pet.dispose();
    }
  });

  it('Adapter: one op at attn_out / ffn_out, none at qkv', () => {
    const pet = load(gen('adapter', 2, { activation: 'gelu_tanh', bottleneck: 4 }));
    const s = siteTensors(0);
    try {
      expect(pet.linearOps(s.qkv)).toEqual([]);
      const ops = pet.linearOps(s.attnOut);
      expect(ops).toHaveLength(1);
      const op = ops[0]!;
      if (op.kind !== 'adapter') throw new Error('unreachable');
      expect(op.act).toBe('gelu_tanh');
      expect(op.down.shape).toEqual([4, 20]);
      expect(op.up.shape).toEqual([20, 4]);
      expect(op.y).toBe(s.q);
    } finally {
      s.dispose();
      pet.dispose();
    }
  });

  it('LoRA: SGMV weights with the scale folded into B; no PetOps', () => {
    const params = gen('lora', 3, { rank: 2, alpha: 6, targetModules: ['value', 'intermediate.dense'] });
    const pet = load(params);
    const s = siteTensors(1);
    try {
      expect(pet.linearOps(s.qkv)).toEqual([]);
      expect([...pet.lora!.projections.keys()].sort()).toEqual(['ffn_in', 'value']);
      const v = pet.lora!.projections.get('value')!;
      expect(v.a.shape).toEqual([2, 2, 20]);
      expect(v.b.shape).toEqual([2, 2, 20]);
      const module = encoderLinearModules(config, 1).value;
      const b = params.tensors.get(loraTensorNames(module).b)!.data as Float32Array; // [20, 2]
      const packed = v.b.toArray() as Float32Array; // [L, r, out]
      for (let j = 0; j < 2; j++) for (let o = 0; o < 20; o++) expect(packed[1 * 40 + j * 20 + o]).toBeCloseTo(b[o * 2 + j]! * 3, 6);
    } finally {
      s.dispose();
      pet.dispose();
    }
  });

  it('prefix: per-layer keys/values; cost adds p keys per token per layer', () => {
    const params = gen('prefix', 5, { prefixLength: 3 });
    const pet = load(params);
    try {
      const p = pet.attentionPrefix(1)!;
      expect(p.key.shape).toEqual([3, 20]);
      expect(p.value.toArray()).toEqual(params.tensors.get(prefixTensorNames(config, 1).value)!.data);
      expect(pet.cost(10).flops).toBe(2 * 4 * 10 * 3 * 20);
    } finally {
      pet.dispose();
    }
  });

  it("cost(tokens) is the sum of petOpCost over the task's ops at every site (adapters: the §6.2 form, within 5%)", () => {
    const tokens = 6;
    const backend = getBackend();
    const t = (cols: number) => Tensor.zeros([tokens, cols], 'f32', backend);
    for (const type of ['diff', 'maskbert', 'bitfit', 'adapter', 'standard'] as const) {
      const pet = load(gen(type, 2, { density: 0.05 }));
      const made: Tensor[] = [];
      const keep = (x: Tensor) => (made.push(x), x);
      try {
        let flops = 0;
        let bytes = 0;
        const add = (ops: ReturnType<typeof pet.linearOps>) => ops.forEach((op) => {
          const c = petOpCost(op);
          flops += c.flops;
          bytes += c.bytes;
        });
        const rows = { start: 0, seqs: 1, stride: tokens, tokens };
        for (let layer = 0; layer < config.numLayers; layer++) {
          const lin = encoderLinearModules(config, layer);
          const h = keep(t(20));
          const outs = (...ms: [string, string, number][]) => ms.map(([slice, module, cols]) => ({ slice, module, y: keep(t(cols)) }));
          add(pet.linearOps({ layer, site: 'qkv', x: h, rows, outputs: outs(['query', lin.query, 20], ['key', lin.key, 20], ['value', lin.value, 20]) }));
          add(pet.linearOps({ layer, site: 'attn_out', x: h, rows, outputs: outs(['attn_out', lin.attn_out, 20]) }));
          add(pet.linearOps({ layer, site: 'ffn_in', x: h, rows, outputs: outs(['ffn_in', lin.ffn_in, 36]) }));
          add(pet.linearOps({ layer, site: 'ffn_out', x: keep(t(36)), rows, outputs: outs(['ffn_out', lin.ffn_out, 20]) }));
          for (const site of ['attn_ln', 'ffn_ln'] as const) add(pet.normOps({ layer, site, x: h, y: keep(t(20)), rows }));
        }
        const cost = pet.cost(tokens);
        if (type === 'adapter') {
          expect(Math.abs(cost.flops - flops) / flops).toBeLessThan(0.05);
          expect(Math.abs(cost.bytes - bytes) / bytes).toBeLessThan(0.05);
        } else {
          expect(cost, type).toEqual({ flops, bytes });
        }
      } finally {
        made.forEach((x) => x.dispose());
        pet.dispose();
      }
    }
  });

  it('cost is linear in tokens and zero for STANDARD', () => {
    for (const type of PET_TYPES) {
      const pet = load(gen(type));
      const a = pet.cost(16);
      const b = pet.cost(32);
      expect(b.flops, type).toBeCloseTo(2 * a.flops, 6);
      if (type === 'standard') expect(a).toEqual({ flops: 0, bytes: 0 });
      else expect(a.flops, type).toBeGreaterThan(0);
      pet.dispose();
    }
  });
});

describe('analytic intensity at BERT-base width (pets.md §6.2): BitFit < Diff < MaskBert < Adapter', () => {
  it('orders the paper four by FLOPs per byte', () => {
    const base: EncoderConfig = { ...config, vocabSize: 8, hiddenSize: 768, numHeads: 12, intermediateSize: 3072, numLayers: 1, maxPositions: 4 };
    const backend = getBackend();
    const shared = new SharedEncoder('base', new EncoderModel(base, ModelWeights.fromHost(seededSharedWeights(base, 1), backend)), null);
    try {
      const intensity = (type: PetType) => {
        const pet = registry.get(type).load(shared, generatePetParams(type, base, { seed: 1 }), backend);
        try {
          const c = pet.cost(32 * 128);
          return c.flops / c.bytes;
        } finally {
          pet.dispose();
        }
      };
      const [bitfit, diff, mask, adapter] = (['bitfit', 'diff', 'maskbert', 'adapter'] as const).map(intensity);
      expect(bitfit!).toBeLessThan(diff!);
      expect(diff!).toBeLessThan(mask!);
      expect(mask!).toBeLessThan(adapter!);
    } finally {
      shared.dispose();
    }
  });
});

/**
 * exportEncoderOnnx's extensions (Houlsby adapters, prefix-tuning prefixes, a head of another width) run in
 * onnxruntime against the native encoder driven by equivalent deltas: an adapter delta computed on the host in
 * float64 at the attn_out / ffn_out sites, and the encoder's attention-prefix hook. The two paths share no code
 * beyond the weights, so agreement checks the graph wiring (placement before residual + LayerNorm, prefix
 * positions unmasked, the numLabels override).
 *
 * Metric: normwise relative error max|ort − native| / max|native| over each sequence's logits and hidden rows,
 * ≤ 1e-4 (two f32 computations with different summation orders through 2 layers land near 1e-6).
 */
import { InvalidArgumentError, Tensor } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import type { EncoderConfig } from '../src/config.js';
import { ConfigError, MissingTensorError } from '../src/errors.js';
import type { AttentionPrefix, LinearSiteCall, ModelDelta } from '../src/hooks/sites.js';
import { EncoderModel } from '../src/models/encoder.js';
import { ModelWeights } from '../src/models/weights.js';
import { type EncoderOnnxAdapter, type EncoderOnnxExtensions, type EncoderOnnxPrefix, exportEncoderOnnx } from '../src/onnx/export-encoder.js';
import type { HostWeights } from '../src/onnx/host-weights.js';
import { OrtModel, runEncoderOrt } from '../src/onnx/ort-runner.js';
import { normwiseError } from './support/numerics.js';
import { randomEncoder, randomIds, tinyEncoderConfig } from './support/random-models.js';
import { geluErf, geluTanh } from './support/reference-models.js';

const TOLERANCE = 1e-4;
const config: EncoderConfig = tinyEncoderConfig({ numLayers: 2, hiddenSize: 64, numHeads: 4, intermediateSize: 128 });
const H = config.hiddenSize;
const WIDE_LABELS = 5;
const M = 8;

const { host } = randomEncoder(config, 31);
// The task head is wider than the shared config's: the export reads it through extensions.numLabels.
const wideHead = {
  weight: randomFloats(WIDE_LABELS * H, 901, -0.3, 0.3),
  bias: randomFloats(WIDE_LABELS, 902, -0.1, 0.1),
};
const hostWeights: HostWeights = (name) => {
  if (name === 'classifier.weight') return wideHead.weight;
  if (name === 'classifier.bias') return wideHead.bias;
  const t = host.get(name);
  if (t === undefined) throw new MissingTensorError('<test>', `no tensor ${name}`);
  return t.data;
};

function makeAdapter(seed: number, act?: 'gelu' | 'gelu_tanh'): EncoderOnnxAdapter {
  return {
    down: randomFloats(M * H, seed, -0.4, 0.4),
    downBias: randomFloats(M, seed + 1, -0.2, 0.2),
    up: randomFloats(H * M, seed + 2, -0.4, 0.4),
    upBias: randomFloats(H, seed + 3, -0.1, 0.1),
    m: M,
    ...(act ? { act } : {}),
  };
}

function makePrefix(length: number, seed: number): EncoderOnnxPrefix {
  return { key: randomFloats(length * H, seed, -1, 1), value: randomFloats(length * H, seed + 1, -1, 1), length };
}

// Layer 0: adapters at both sites (erf GELU) and a 3-long prefix; layer 1: an adapter at ffn_out only (tanh GELU)
// and a 5-long prefix. Mixed coverage catches a site or layer mix-up.
const adapters = new Map<string, EncoderOnnxAdapter>([
  ['0:attn_out', makeAdapter(100)],
  ['0:ffn_out', makeAdapter(200)],
  ['1:ffn_out', makeAdapter(300, 'gelu_tanh')],
]);
const prefixes = new Map<number, EncoderOnnxPrefix>([
  [0, makePrefix(3, 400)],
  [1, makePrefix(5, 500)],
]);
const extensions: EncoderOnnxExtensions = {
  adapters: (layer, site) => adapters.get(`${layer}:${site}`) ?? null,
  prefixes: (layer) => prefixes.get(layer) ?? null,
  numLabels: WIDE_LABELS,
};

/** The adapter as a ModelDelta: y ← y + act(y·downᵀ + bd)·upᵀ + bu, in float64 on the host, over every row. */
function hostAdapterDelta(): ModelDelta {
  return {
    linear(call: LinearSiteCall) {
      if (call.site !== 'attn_out' && call.site !== 'ffn_out') return;
      const a = adapters.get(`${call.layer}:${call.site}`);
      if (!a) return;
      const out = call.outputs[0]!.y;
      const y = out.toArray() as Float32Array;
      const rows = y.length / H;
      const act = a.act === 'gelu_tanh' ? geluTanh : geluErf;
      const h = new Float64Array(M);
      for (let r = 0; r < rows; r++) {
        const yr = y.subarray(r * H, (r + 1) * H);
        for (let j = 0; j < M; j++) {
          let acc = a.downBias[j]!;
          for (let c = 0; c < H; c++) acc += yr[c]! * a.down[j * H + c]!;
          h[j] = act(acc);
        }
        const add = new Float64Array(H);
        for (let c = 0; c < H; c++) {
          let acc = a.upBias[c]!;
          for (let j = 0; j < M; j++) acc += h[j]! * a.up[c * M + j]!;
          add[c] = acc;
        }
        for (let c = 0; c < H; c++) yr[c] = yr[c]! + add[c]!;
      }
      out.write(y);
    },
  };
}

const prefixTensors = new Map<number, AttentionPrefix>(
  [...prefixes].map(([layer, p]) => [layer, { key: Tensor.from(p.key, [p.length, H]), value: Tensor.from(p.value, [p.length, H]) }]),
);
const prefixDelta: ModelDelta = { attentionPrefix: (call) => prefixTensors.get(call.layer) ?? null };

const wideConfig: EncoderConfig = { ...config, numLabels: WIDE_LABELS, labels: Array.from({ length: WIDE_LABELS }, (_, i) => `L${i}`) };
const nativeHost = new Map(host);
nativeHost.set('classifier.weight', { data: wideHead.weight, shape: [WIDE_LABELS, H] });
nativeHost.set('classifier.bias', { data: wideHead.bias, shape: [WIDE_LABELS] });
const native = new EncoderModel(wideConfig, ModelWeights.fromHost(nativeHost));

const sessions: OrtModel[] = [];
async function session(bytes: Uint8Array): Promise<OrtModel> {
  const m = await OrtModel.create(bytes, { threads: 1 });
  sessions.push(m);
  return m;
}
afterAll(async () => {
  for (const s of sessions) await s.release();
  native.dispose();
  for (const p of prefixTensors.values()) {
    p.key.dispose();
    p.value.dispose();
  }
});

const seqs = [randomIds(9, config.vocabSize, 1), randomIds(3, config.vocabSize, 2), randomIds(14, config.vocabSize, 3), randomIds(1, config.vocabSize, 4)];

function nativeRun(deltas: ModelDelta[]) {
  const out = native.forward(seqs.map((ids) => ({ ids })), { deltas });
  const logits = out.logits!.toArray() as Float32Array;
  const hidden = out.hidden!.toArray() as Float32Array;
  const result = seqs.map((ids, b) => ({
    logits: logits.slice(b * WIDE_LABELS, (b + 1) * WIDE_LABELS),
    hidden: hidden.slice(out.offsets[b]! * H, (out.offsets[b]! + ids.length) * H),
  }));
  out.hidden!.dispose();
  out.logits!.dispose();
  out.pooled?.dispose();
  return result;
}

describe('exportEncoderOnnx extensions', () => {
  it('adapters + prefixes + a wider head match the native encoder with equivalent deltas, in a padded ORT batch', async () => {
    const model = await session(exportEncoderOnnx(config, hostWeights, {}, extensions));
    const ort = await runEncoderOrt(model, seqs);
    const want = nativeRun([hostAdapterDelta(), prefixDelta]);
    seqs.forEach((_, b) => {
      expect(ort.logits![b]!.length).toBe(WIDE_LABELS);
      expect(normwiseError(ort.logits![b]!, want[b]!.logits)).toBeLessThan(TOLERANCE);
      expect(normwiseError(ort.lastHidden[b]!, want[b]!.hidden)).toBeLessThan(TOLERANCE);
    });
    // The extensions matter: the plain model (same wide head) is far from the extended one.
    const plain = nativeRun([]);
    expect(normwiseError(plain[0]!.logits, want[0]!.logits)).toBeGreaterThan(1e-2);
  });

  it('each extension alone matches its delta alone (adapters only, prefixes only)', async () => {
    const onlyAdapters = await session(exportEncoderOnnx(config, hostWeights, {}, { adapters: extensions.adapters!, numLabels: WIDE_LABELS }));
    const onlyPrefixes = await session(exportEncoderOnnx(config, hostWeights, {}, { prefixes: extensions.prefixes!, numLabels: WIDE_LABELS }));
    for (const [model, deltas] of [[onlyAdapters, [hostAdapterDelta()]], [onlyPrefixes, [prefixDelta]]] as const) {
      const ort = await runEncoderOrt(model, seqs);
      const want = nativeRun([...deltas]);
      seqs.forEach((_, b) => expect(normwiseError(ort.logits![b]!, want[b]!.logits)).toBeLessThan(TOLERANCE));
    }
  });

  it('a sequence’s result does not depend on the padding of its ORT batch (prefix positions unmasked, pads masked)', async () => {
    const model = await session(exportEncoderOnnx(config, hostWeights, {}, extensions));
    const batched = await runEncoderOrt(model, seqs);
    const alone = await runEncoderOrt(model, [seqs[1]!]);
    expect(normwiseError(batched.logits![1]!, alone.logits![0]!)).toBeLessThan(1e-5);
  });

  it('is byte-identical to the plain export when no extension applies', () => {
    // Buffer.equals: vitest's deep equality walks a large Uint8Array element by element (seconds).
    const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
    const plain = exportEncoderOnnx(config, hostWeightsPlain);
    expect(same(exportEncoderOnnx(config, hostWeightsPlain, {}, {}), plain)).toBe(true);
    expect(same(exportEncoderOnnx(config, hostWeightsPlain, {}, { adapters: () => null, prefixes: () => null }), plain)).toBe(true);
    expect(same(exportEncoderOnnx(config, hostWeightsPlain, {}, { numLabels: config.numLabels }), plain)).toBe(true);
    const wide = exportEncoderOnnx(config, hostWeights, {}, { numLabels: WIDE_LABELS });
    expect(same(exportEncoderOnnx(config, hostWeights, {}, { adapters: extensions.adapters!, numLabels: WIDE_LABELS }), wide)).toBe(false);
  });

  it('rejects mis-sized extensions, naming the tensor', () => {
    const bad = { ...makeAdapter(700), up: new Float32Array(H * M - 1) };
    expect(() => exportEncoderOnnx(config, hostWeightsPlain, {}, { adapters: (l, s) => (l === 1 && s === 'attn_out' ? bad : null) })).toThrow(
      `adapter bert.encoder.layer.1.attention.output.dense.adapter.up has ${H * M - 1} elements, expected [${H}, ${M}] = ${H * M}`,
    );
    expect(() => exportEncoderOnnx(config, hostWeightsPlain, {}, { adapters: () => ({ ...makeAdapter(710), m: 0 }) })).toThrow(InvalidArgumentError);
    expect(() => exportEncoderOnnx(config, hostWeightsPlain, {}, { prefixes: () => ({ ...makePrefix(2, 720), length: 3 }) })).toThrow(
      `prefix.layer.0.key has ${2 * H} elements, expected [3, ${H}] = ${3 * H}`,
    );
    expect(() => exportEncoderOnnx(config, hostWeightsPlain, {}, { numLabels: 0 })).toThrow(/numLabels must be a positive integer, got 0/);
    const bare: EncoderConfig = { ...config, architecture: 'BertModel', numLabels: 0, labels: [] };
    expect(() => exportEncoderOnnx(bare, hostWeightsPlain, {}, { numLabels: 2 })).toThrow(ConfigError);
    // The wider head is checked against the numLabels it declares.
    expect(() => exportEncoderOnnx(config, hostWeights, {}, { numLabels: 4 })).toThrow(/classifier.weight: has 320 elements/);
  });
});

function hostWeightsPlain(name: string): Float32Array {
  const t = host.get(name);
  if (t === undefined) throw new MissingTensorError('<test>', `no tensor ${name}`);
  return t.data;
}

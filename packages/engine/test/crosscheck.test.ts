/**
 * The engine against two independent implementations of the same weights: the float64 TypeScript reference
 * (test/support/reference-models.ts) and onnxruntime running the engine's ONNX export.
 * Metric: normwise relative error, max |got − want| / max |want| over each output tensor.
 *   engine vs float64: 1e-5 (f32 rounding through a few layers is ~1e-6);
 *   engine vs ORT: 1e-4, the bound (two f32 implementations, different summation orders).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import { DecoderModel } from '../src/models/decoder.js';
import { EncoderModel } from '../src/models/encoder.js';
import { OrtModel, exportDecoderOnnx, exportEncoderOnnx, runDecoderOrt, runEncoderOrt } from '../src/onnx/index.js';
import { type HostArrays, randomDecoder, randomEncoder, randomIds, tinyDecoderConfig, tinyEncoderConfig } from './support/random-models.js';
import { referenceDecoder, referenceEncoder } from './support/reference-models.js';
import { normwiseError } from './support/numerics.js';


const hostFn = (host: HostArrays) => (name: string) => host.get(name)!.data;
const sessions: OrtModel[] = [];
afterAll(async () => {
  for (const s of sessions) await s.release();
});

describe.each([
  ['gelu (erf)', tinyEncoderConfig()],
  ['gelu_new (tanh), BertModel', tinyEncoderConfig({ hiddenAct: 'gelu_new', architecture: 'BertModel', numLabels: 0, labels: [] })],
])('encoder %s: engine = float64 reference = onnxruntime', (_, config) => {
  it('agrees on a ragged batch', async () => {
    const { host, weights } = randomEncoder(config, 5);
    const model = new EncoderModel(config, weights());
    const seqs = [randomIds(11, config.vocabSize, 1), randomIds(4, config.vocabSize, 2), randomIds(23, config.vocabSize, 3)];
    const ours = model.forward(seqs.map((ids) => ({ ids })));
    const hidden = ours.hidden!.toArray() as Float32Array;
    const logits = ours.logits?.toArray() as Float32Array | undefined;
    const session = await OrtModel.create(exportEncoderOnnx(config, hostFn(host)));
    sessions.push(session);
    const ort = await runEncoderOrt(session, seqs);
    seqs.forEach((ids, b) => {
      const ref = referenceEncoder(config, hostFn(host), ids);
      const rows = hidden.subarray(ours.offsets[b]! * config.hiddenSize, ours.offsets[b + 1]! * config.hiddenSize);
      expect(normwiseError(rows, ref.hidden)).toBeLessThan(1e-5);
      expect(normwiseError(rows, ort.lastHidden[b]!)).toBeLessThan(1e-4);
      if (logits) {
        const mine = logits.subarray(b * config.numLabels, (b + 1) * config.numLabels);
        expect(normwiseError(mine, ref.logits!)).toBeLessThan(1e-5);
        expect(normwiseError(mine, ort.logits![b]!)).toBeLessThan(1e-4);
      }
    });
    model.dispose();
  });
});

describe.each([
  ['GQA, untied head', tinyDecoderConfig()],
  ['MQA, tied embeddings, headDim ≠ hidden/heads', tinyDecoderConfig({ numKvHeads: 1, headDim: 16, tieWordEmbeddings: true, ropeTheta: 500000 })],
])('decoder %s: engine = float64 reference = onnxruntime', (_, config) => {
  it('agrees on every position of a prompt, and on decode steps from the paged cache', async () => {
    const { host, weights } = randomDecoder(config, 8);
    const model = new DecoderModel(config, weights());
    const ids = randomIds(41, config.vocabSize, 6, 3);
    const ref = referenceDecoder(config, hostFn(host), ids);
    const session = await OrtModel.create(exportDecoderOnnx(config, hostFn(host)));
    sessions.push(session);
    const ort = await runDecoderOrt(session, ids);
    expect(normwiseError(ort, ref)).toBeLessThan(1e-4);

    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
    const prefill = model.forward([{ id: 0, tokens: ids.slice(0, 30) }], { cache, logits: 'all' }).logits!;
    const V = config.vocabSize;
    const got = new Float32Array(ids.length * V);
    got.set(prefill.toArray() as Float32Array);
    for (let t = 30; t < ids.length; t++) {
      got.set(model.forward([{ id: 0, tokens: [ids[t]!] }], { cache }).logits!.toArray() as Float32Array, t * V);
    }
    expect(normwiseError(got, ref)).toBeLessThan(1e-5);
    expect(normwiseError(got, ort)).toBeLessThan(1e-4);
    cache.dispose();
    model.dispose();
  });
});

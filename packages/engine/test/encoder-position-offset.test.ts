/**
 * `EncoderSequence.positionOffset`: a sequence's tokens take position ids offset, offset + 1, … (HMI's window mode
 * runs `(PAD, c, r)` as `[c, r]` at positions 1, 2). Checked against plain float64: the embeddings against
 * LayerNorm(word + position[offset + i] + type) from the host weights, and whole forwards against the float64
 * reference encoder run on a copy of the weights whose position table is shifted by the offset (the reference
 * only knows positions 0…n−1, and attention itself never sees position ids).
 */
import { InvalidArgumentError } from '@tessera/native';
import { describe, expect, it } from 'vitest';
import { EncoderModel, type EncoderSequence } from '../src/models/encoder.js';
import { encoderTopModules } from '../src/models/names.js';
import { normwiseError } from './support/numerics.js';
import { type HostArrays, randomEncoder, randomIds, tinyEncoderConfig } from './support/random-models.js';
import { referenceEncoder } from './support/reference-models.js';

const config = tinyEncoderConfig({ architecture: 'BertModel', numLabels: 0, labels: [], maxPositions: 40 });
const top = encoderTopModules(config);
const H = config.hiddenSize;
const { host, weights } = randomEncoder(config, 11);
const hostFn = (arrays: HostArrays) => (name: string) => arrays.get(name)!.data;

/** The host weights with position row t replaced by row offset + t (rows past the end are never read). */
function shiftedPositions(offset: number): HostArrays {
  const name = `${top.positionEmbeddings}.weight`;
  const table = host.get(name)!;
  const data = new Float32Array(table.data.length);
  data.set(table.data.subarray(offset * H));
  return new Map([...host, [name, { data, shape: table.shape }]]);
}

/** LayerNorm(word[id] + position[p] + type[0]) in float64. */
function embeddingRow(id: number, p: number): Float64Array {
  const get = (n: string) => host.get(`${n}.weight`)!.data;
  const word = get(top.wordEmbeddings);
  const pos = get(top.positionEmbeddings);
  const type = get(top.tokenTypeEmbeddings);
  const gamma = get(top.embeddingsNorm);
  const beta = host.get(`${top.embeddingsNorm}.bias`)!.data;
  const x = Float64Array.from({ length: H }, (_, c) => word[id * H + c]! + pos[p * H + c]! + type[c]!);
  const mean = x.reduce((a, v) => a + v, 0) / H;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / H;
  const inv = 1 / Math.sqrt(variance + config.layerNormEps);
  return x.map((v, c) => (v - mean) * inv * gamma[c]! + beta[c]!);
}

describe('EncoderSequence.positionOffset', () => {
  const model = new EncoderModel(config, weights());
  // Ragged lengths and offsets, including one that ends exactly at maxPositions and the default (no offset).
  const batch: EncoderSequence[] = [
    { ids: randomIds(1, config.vocabSize, 1, 1), positionOffset: 1 },
    { ids: randomIds(2, config.vocabSize, 2, 1), positionOffset: 1 },
    { ids: randomIds(3, config.vocabSize, 3, 1) },
    { ids: randomIds(7, config.vocabSize, 4, 1), positionOffset: 33 },
    { ids: randomIds(5, config.vocabSize, 5, 1), positionOffset: 0 },
  ];

  it('embeds token i of a sequence at offset p with the position-(p + i) row', () => {
    const ctx = model.prepare(batch);
    try {
      const h = model.embed(ctx);
      const all = h.toArray() as Float32Array;
      h.dispose();
      batch.forEach((s, b) => {
        for (let i = 0; i < s.ids.length; i++) {
          const row = all.subarray((ctx.offsets[b]! + i) * H, (ctx.offsets[b]! + i + 1) * H);
          expect(normwiseError(row, embeddingRow(s.ids[i]!, (s.positionOffset ?? 0) + i))).toBeLessThan(1e-6);
        }
      });
    } finally {
      ctx.dispose();
    }
  });

  it('an offset changes the result (so the checks here are not vacuous)', () => {
    const ids = randomIds(3, config.vocabSize, 9, 1);
    const a = model.forward([{ ids }]).hidden!;
    const b = model.forward([{ ids, positionOffset: 1 }]).hidden!;
    expect(normwiseError(b.toArray() as Float32Array, a.toArray() as Float32Array)).toBeGreaterThan(1e-2);
    a.dispose();
    b.dispose();
  });

  for (const [name, padTo] of [['packed', undefined], ['padded', 8]] as const) {
    it(`${name}: every sequence's hidden states equal the float64 reference at the shifted positions (normwise < 1e-5)`, () => {
      const out = model.forward(batch, padTo === undefined ? {} : { padTo });
      const hidden = out.hidden!.toArray() as Float32Array;
      out.hidden!.dispose();
      batch.forEach((s, b) => {
        const ref = referenceEncoder(config, hostFn(shiftedPositions(s.positionOffset ?? 0)), Array.from(s.ids));
        const start = out.offsets[b]! * H;
        expect(normwiseError(hidden.subarray(start, start + s.ids.length * H), ref.hidden)).toBeLessThan(1e-5);
      });
    });
  }

  it('rejects an offset that is negative, fractional or runs past maxPositions, with the limits in the message', () => {
    const ids = [5, 6, 7];
    for (const positionOffset of [-1, 0.5, config.maxPositions - 2, Number.NaN]) {
      expect(() => model.prepare([{ ids }, { ids, positionOffset }])).toThrow(InvalidArgumentError);
    }
    expect(() => model.prepare([{ ids, positionOffset: 38 }])).toThrow(/sequence 0 has positionOffset 38 and 3 tokens.*40 positions/);
    model.prepare([{ ids, positionOffset: config.maxPositions - 3 }]).dispose();
  });
});

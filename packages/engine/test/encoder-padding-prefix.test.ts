import { InvalidArgumentError, Tensor } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import type { AttentionSiteCall, LinearSiteCall, ModelDelta } from '../src/hooks/sites.js';
import { EncoderModel } from '../src/models/encoder.js';
import { normwiseError } from './support/numerics.js';
import { randomEncoder, randomIds, tinyEncoderConfig } from './support/random-models.js';

const config = tinyEncoderConfig();
const H = config.hiddenSize;

function rowsOf(t: Tensor, start: number, count: number): Float32Array {
  const w = t.shape[1]!;
  return (t.toArray() as Float32Array).slice(start * w, (start + count) * w);
}

describe('EncoderModel padded batches (padTo)', () => {
  const { weights } = randomEncoder(config, 11);
  const model = new EncoderModel(config, weights());
  const seqs = [randomIds(9, config.vocabSize, 1), randomIds(3, config.vocabSize, 2), randomIds(17, config.vocabSize, 3)];

  // Pad rows go through the GEMMs, whose kernel choice depends on the row count, so packed and padded runs agree
  // to f32 rounding (1e-5 relative after the layers), not bitwise.
  it('gives each sequence the same results as the packed batch, for any pad length', () => {
    const packed = model.forward(seqs.map((ids) => ({ ids })));
    for (const padTo of [17, 24, 40]) {
      const padded = model.forward(seqs.map((ids) => ({ ids })), { padTo });
      expect(padded.hidden!.shape).toEqual([3 * padTo, H]);
      expect(Array.from(padded.offsets)).toEqual([0, padTo, 2 * padTo, 3 * padTo]);
      seqs.forEach((ids, b) => {
        expect(normwiseError(rowsOf(padded.hidden!, b * padTo, ids.length), rowsOf(packed.hidden!, packed.offsets[b]!, ids.length))).toBeLessThan(1e-5);
      });
      expect(normwiseError(padded.logits!.toArray() as Float32Array, packed.logits!.toArray() as Float32Array)).toBeLessThan(1e-5);
      // Pad rows stay finite (they run through every layer).
      expect((padded.hidden!.toArray() as Float32Array).every(Number.isFinite)).toBe(true);
    }
  });

  it('hands the hooks a layout over the padded rows', () => {
    const seen: number[] = [];
    const delta: ModelDelta = { linear: (c: LinearSiteCall) => void seen.push(c.layout.rows, c.x.shape[0]!) };
    model.forward([{ ids: seqs[0]!, key: 'a' }, { ids: seqs[1]!, key: 'b' }], { padTo: 20, deltas: [delta] });
    expect(new Set(seen)).toEqual(new Set([40]));
  });

  it('rejects a pad length shorter than a sequence or beyond the positions', () => {
    expect(() => model.forward([{ ids: seqs[2]! }], { padTo: 10 })).toThrow(/17 tokens, more than padTo = 10/);
    expect(() => model.forward([{ ids: seqs[0]! }], { padTo: config.maxPositions + 1 })).toThrow(InvalidArgumentError);
    expect(() => model.forward([{ ids: seqs[0]! }], { padTo: 2.5 })).toThrow(/padTo = 2.5/);
  });
});

describe('EncoderModel attention prefixes (prefix-tuning hook)', () => {
  const { weights } = randomEncoder(config, 12);
  const model = new EncoderModel(config, weights());
  const p = 5;
  const prefixes = new Map([0, 1].map((l) => [l, {
    key: Tensor.from(randomFloats(p * H, 100 + l, -1, 1), [p, H]),
    value: Tensor.from(randomFloats(p * H, 200 + l, -1, 1), [p, H]),
  }]));

  /** Captures layer 0's q/k/v (after the qkv site) and the attention context (the attn_out site's input). */
  function capture(prefixKey: string | null) {
    const got: { q?: Float32Array; k?: Float32Array; v?: Float32Array; ctx?: Float32Array; calls: AttentionSiteCall[] } = { calls: [] };
    const delta: ModelDelta = {
      linear(c) {
        if (c.layer !== 0) return;
        if (c.site === 'qkv') for (const o of c.outputs) got[o.slice === 'query' ? 'q' : o.slice === 'key' ? 'k' : 'v'] = o.y.toArray() as Float32Array;
        if (c.site === 'attn_out') got.ctx = c.x.toArray() as Float32Array;
      },
      attentionPrefix(call) {
        got.calls.push(call);
        return call.key === prefixKey ? prefixes.get(call.layer)! : null;
      },
    };
    return { got, delta };
  }

  it('attends over [prefix; own keys] for the sequences whose task has a prefix, in float64 agreement', () => {
    const a = randomIds(7, config.vocabSize, 5);
    const b = randomIds(4, config.vocabSize, 6);
    const { got, delta } = capture('tuned');
    model.forward([{ ids: a, key: 'tuned' }, { ids: b, key: null }], { deltas: [delta] });
    expect(got.calls.filter((c) => c.layer === 0).map((c) => [c.sequence, c.key])).toEqual([[0, 'tuned'], [1, null]]);
    const nh = config.numHeads;
    const hd = H / nh;
    const pk = prefixes.get(0)!.key.toArray() as Float32Array;
    const pv = prefixes.get(0)!.value.toArray() as Float32Array;
    // float64 reference for sequence 0 (rows 0..6) with the prefix, and sequence 1 (rows 7..10) without.
    const reference = (rows: number[], withPrefix: boolean) => {
      const out = new Float64Array(rows.length * H);
      rows.forEach((r, i) => {
        for (let h = 0; h < nh; h++) {
          const keys: { k: (d: number) => number; v: (d: number) => number }[] = [];
          if (withPrefix) for (let j = 0; j < p; j++) keys.push({ k: (d) => pk[j * H + h * hd + d]!, v: (d) => pv[j * H + h * hd + d]! });
          for (const s of rows) keys.push({ k: (d) => got.k![s * H + h * hd + d]!, v: (d) => got.v![s * H + h * hd + d]! });
          const scores = keys.map((key) => {
            let dot = 0;
            for (let d = 0; d < hd; d++) dot += got.q![r * H + h * hd + d]! * key.k(d);
            return dot / Math.sqrt(hd);
          });
          const m = Math.max(...scores);
          const e = scores.map((x) => Math.exp(x - m));
          const z = e.reduce((x, y) => x + y, 0);
          for (let d = 0; d < hd; d++) out[i * H + h * hd + d] = keys.reduce((acc, key, j) => acc + (e[j]! / z) * key.v(d), 0);
        }
      });
      return out;
    };
    const ctx = got.ctx!;
    expect(normwiseError(ctx.slice(0, 7 * H), Float32Array.from(reference([0, 1, 2, 3, 4, 5, 6], true)))).toBeLessThan(1e-5);
    expect(normwiseError(ctx.slice(7 * H, 11 * H), Float32Array.from(reference([7, 8, 9, 10], false)))).toBeLessThan(1e-5);
  });

  it('changes only the sequences with a prefix, also in a padded batch', () => {
    const a = randomIds(6, config.vocabSize, 7);
    const b = randomIds(9, config.vocabSize, 8);
    const plain = model.forward([{ ids: a, key: 'x' }, { ids: b, key: 'y' }]);
    const { delta } = capture('x');
    const tuned = model.forward([{ ids: a, key: 'x' }, { ids: b, key: 'y' }], { deltas: [delta], padTo: 12 });
    expect(normwiseError(rowsOf(tuned.hidden!, 12, 9), rowsOf(plain.hidden!, 6, 9))).toBeLessThan(1e-5);
    expect(normwiseError(rowsOf(tuned.hidden!, 0, 6), rowsOf(plain.hidden!, 0, 6))).toBeGreaterThan(1e-3);
  });

  it('rejects a prefix of the wrong shape, naming it', () => {
    const bad: ModelDelta = { attentionPrefix: () => ({ key: Tensor.zeros([3, H + 1]), value: Tensor.zeros([3, H]) }) };
    expect(() => model.forward([{ ids: randomIds(4, config.vocabSize, 9) }], { deltas: [bad] })).toThrow(`attention prefix key is f32 [3, ${H + 1}], expected f32 [3, ${H}]`);
  });
});

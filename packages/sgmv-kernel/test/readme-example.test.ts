/**
 * The README's examples, run. Every ```ts block of README.md is, character for character, one of the
 * `// #region readme-…` blocks below (in order; the first test checks it), so the README cannot drift from the API.
 */
import { readFileSync, rmSync } from 'node:fs';
import { LoraDelta, loadLoraAdapter } from '@tessera/engine';
import { afterAll, describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-add-lora
import { Tensor } from '@tessera/native';
import { addLora, referenceAddLora } from '@tessera/sgmv-kernel';

// 5 rows in 3 segments: rows 0–1 use adapter A0/B0, row 2 is a base-model row (null), rows 3–4 use A1/B1.
const L = 2;
const [hIn, hOut] = [8, 6];
const values = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(seed + i * 1.7) / 2);
const stack = (rank: number, h: number, seed: number) => Tensor.from(values(L * rank * h, seed), [L, rank, h]); // [L, r, h]
const a = [stack(4, hIn, 1), null, stack(2, hIn, 2)]; // shrink weights, [L, r, h_in]
const b = [stack(4, hOut, 3), null, stack(2, hOut, 4)]; // expand weights, [L, r, h_out]
const indptr = new Int32Array([0, 2, 3, 5]);
const x = Tensor.from(values(5 * hIn, 5), [5, hIn]);
const y = Tensor.zeros([5, hOut]);

// y[rows_i] += 0.5 · (x[rows_i] · A_i[1]ᵀ) · B_i[1]: one shrink and one expand for the whole batch.
addLora(y, x, a, b, indptr, 1, { scale: 0.5 });

const host = (t: Tensor | null) => t && { data: t.toArray() as Float32Array, layers: L, rank: t.shape[1]!, features: t.shape[2]! };
const want = referenceAddLora(
  { data: new Float32Array(5 * hOut), rows: 5, cols: hOut }, { data: x.toArray() as Float32Array, rows: 5, cols: hIn },
  a.map(host), b.map(host), indptr, 1, [0.5, 0.5, 0.5],
);
console.log(y.toArray(), want); // equal to ~1e-7; row 2 stays 0
for (const t of [x, y, ...a, ...b]) t?.dispose();
// #endregion readme-add-lora

// #region readme-delta
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PagedKvCache, generateLoraAdapter, generateModel, loadDecoder } from '@tessera/engine';
import { LoraWeightSet, SgmvLoraDelta, readLoraForSgmv } from '@tessera/sgmv-kernel';

const root = mkdtempSync(join(tmpdir(), 'sgmv-'));
const { config } = generateModel(join(root, 'base'), { family: 'decoder', size: 'tiny', seed: 0 });
const model = loadDecoder(join(root, 'base'));

// Two PEFT adapters of different ranks and targets, read from disk, packed to SGMV layout, uploaded.
const adapters = new Map<string, LoraWeightSet>();
for (const [name, rank, targets] of [['tenant-a', 8, ['q_proj', 'v_proj']], ['tenant-b', 16, ['o_proj', 'down_proj']]] as const) {
  generateLoraAdapter(join(root, name), { base: config, rank, targets: [...targets], seed: rank });
  adapters.set(name, LoraWeightSet.upload(await readLoraForSgmv(join(root, name), config)));
}

// One forward for three tenants (key null = the base model); each hook site runs one shrink + one expand.
const delta = new SgmvLoraDelta((key) => adapters.get(key));
const cache = PagedKvCache.create({ ...model.kvShape, numPages: 16 });
const batch = [
  { id: 1, tokens: [5, 6, 7], key: 'tenant-a' },
  { id: 2, tokens: [8, 9], key: null },
  { id: 3, tokens: [10, 11, 12, 13], key: 'tenant-b' },
];
const logits = model.forward(batch, { cache, deltas: [delta] }).logits!;
console.log(logits.shape); // [3, vocab]: the last position of each sequence
// #endregion readme-delta

afterAll(() => {
  for (const owner of [logits, cache, delta, model, ...adapters.values()]) owner.dispose();
  rmSync(root, { recursive: true, force: true });
});

describe('README examples', () => {
  it('every ```ts block of the README is a region of this file, in order', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
    const regions = [...source.matchAll(/^\/\/ #region (readme-[\w-]+)\n([\s\S]*?)^\/\/ #endregion \1$/gm)].map((m) => m[2]);
    expect(regions).toHaveLength(2);
    expect(blocks).toEqual(regions);
  });

  it('addLora: what it printed agrees with the float64 reference, and the base row is untouched', () => {
    const [got, ref] = printed[0] as [Float32Array, Float64Array];
    for (let i = 0; i < ref.length; i++) expect(got[i]).toBeCloseTo(ref[i]!, 6);
    expect(Array.from(got.subarray(2 * hOut, 3 * hOut))).toEqual(new Array(hOut).fill(0));
    expect(got.some((v) => v !== 0)).toBe(true);
  });

  it('delta: the batch gives the logits the engine\'s LoraDelta gives', () => {
    expect(printed[1]).toEqual([[3, config.vocabSize]]);
    const loaded = new Map(['tenant-a', 'tenant-b'].map((n) => [n, loadLoraAdapter(join(root, n), { base: config })]));
    const plainCache = PagedKvCache.create({ ...model.kvShape, numPages: 16 });
    try {
      const plain = model.forward(batch, { cache: plainCache, deltas: [new LoraDelta(loaded)] }).logits!;
      const p = plain.toArray() as Float32Array;
      const g = logits.toArray() as Float32Array;
      let diff = 0;
      let scale = 0;
      for (let i = 0; i < p.length; i++) {
        diff = Math.max(diff, Math.abs(g[i]! - p[i]!));
        scale = Math.max(scale, Math.abs(p[i]!));
      }
      expect(diff / scale).toBeLessThanOrEqual(1e-5);
      plain.dispose();
    } finally {
      plainCache.dispose();
      for (const a of loaded.values()) a.dispose();
    }
  });
});

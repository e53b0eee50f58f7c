/**
 * Variant batching at the block level: the foundation's attention block and the fused LoRA block that modifies it
 * (equal variantSignature) prepared together over one shared KV cache run as one batch, and every row comes out
 * with the bits its own runtime gives it alone (ragged, single-row and one-sided batches). Blocks that are not
 * variants of one base, or that do not share the cache, are refused.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateLoraAdapter } from '@tessera/engine';
import { Tensor } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';

import { blockKvCache, BlockRuntime, variantSignature } from '../src/chain/index.js';
import { ingestFoundation, ingestLora } from '../src/ingest/index.js';
import { BlockZoo, formatBlock, ZooInvalidError } from '../src/planner/index.js';
import { DevicePool, DiskTensorStore } from '../src/store/index.js';
import { generatePeaky, normals } from './support/fixtures.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-zoo-variants-'));
const F = generatePeaky(root, 'llama', 1);
const lora = generateLoraAdapter(join(root, 'sql'), { base: F.config, rank: 8, seed: 1 }).dir;
const store = DiskTensorStore.open(join(root, 'zoo'));
const zoo = new BlockZoo();
ingestFoundation(zoo, store, F.dir, { id: 'llama' });
ingestLora(zoo, store, lora, { id: 'sql', base: 'llama' });
const pool = new DevicePool(store);
const runtimes: BlockRuntime[] = [];
afterAll(() => {
  for (const r of runtimes) r.dispose();
  pool.dispose();
  rmSync(root, { recursive: true, force: true });
});

const H = F.config.hiddenSize;
const byLabel = (app: string, label: string) => zoo.chain(app).blocks.find((b) => formatBlock(b) === label)!;
const runtime = (m: Parameters<typeof variantSignature>[0], cache?: ReturnType<typeof blockKvCache>) => {
  const r = new BlockRuntime(m, pool, { kvPages: 8, lora: 'delta', maxPositions: 256, ...(cache ? { cache } : {}) });
  runtimes.push(r);
  return r;
};
const rowsOf = (n: number, seed: number) => Float32Array.from(normals(n * H, seed), (x) => x * 0.5);

/** Two steps (a prompt, then one token) of `rt` alone on rows `rows`; returns each step's output rows. */
function alone(rt: BlockRuntime, id: string, steps: Float32Array[]): Float32Array[] {
  return steps.map((rows) => {
    const n = rows.length / H;
    const h = Tensor.from(rows, [n, H]);
    const ctx = rt.prepare([{ id, tokens: Array(n).fill(5) }]);
    try {
      rt.run(h, ctx, 'last');
      ctx.commit();
      return h.toArray() as Float32Array;
    } finally {
      ctx.dispose();
      h.dispose();
    }
  });
}

describe('variant batching (BlockRuntime.prepareTogether)', () => {
  const base = byLabel('llama', 'attn(1)');
  const fused = byLabel('sql', 'attn(1)+lora');

  it('finds the fused LoRA block a variant of the block it modifies, and nothing else', () => {
    expect(variantSignature(fused)).toBe(variantSignature(base));
    expect(variantSignature(byLabel('llama', 'attn(2)'))).not.toBe(variantSignature(base));
    expect(variantSignature(byLabel('llama', 'ffn(1)'))).not.toBe(variantSignature(base));
  });

  it('gives every row of a batch over both variants the bits of its own runtime alone', () => {
    for (const [nf, ns] of [
      [5, 3],
      [1, 1],
      [4, 0],
      [0, 2],
    ] as const) {
      const seed = 10 * nf + ns;
      const fSteps = nf ? [rowsOf(nf, seed), rowsOf(1, seed + 1)] : [];
      const sSteps = ns ? [rowsOf(ns, seed + 2), rowsOf(1, seed + 3)] : [];
      const fAlone = nf ? alone(runtime(base), 'f', fSteps) : [];
      const sAlone = ns ? alone(runtime(fused), 's', sSteps) : [];
      const cache = blockKvCache(base, 16, pool.backend)!;
      const fr = runtime(base, cache);
      const sr = runtime(fused, cache);
      for (let step = 0; step < 2; step++) {
        const parts = [
          ...(nf ? [{ runtime: fr, sequences: [{ id: 'f', tokens: Array(fSteps[step]!.length / H).fill(5) }], rows: fSteps[step]! }] : []),
          ...(ns ? [{ runtime: sr, sequences: [{ id: 's', tokens: Array(sSteps[step]!.length / H).fill(5) }], rows: sSteps[step]! }] : []),
        ];
        const host = new Float32Array(parts.reduce((n, p) => n + p.rows.length, 0));
        let at = 0;
        for (const p of parts) host.set(p.rows, (at += p.rows.length) - p.rows.length);
        const h = Tensor.from(host, [host.length / H, H]);
        const ctx = BlockRuntime.prepareTogether(parts);
        parts[0]!.runtime.run(h, ctx, 'last');
        ctx.commit();
        ctx.dispose();
        const out = h.toArray() as Float32Array;
        h.dispose();
        const fRows = nf ? fSteps[step]!.length : 0;
        if (nf) expect(out.subarray(0, fRows), `foundation rows, batch ${nf}+${ns}, step ${step}`).toEqual(fAlone[step]!);
        if (ns) expect(out.subarray(fRows), `LoRA rows, batch ${nf}+${ns}, step ${step}`).toEqual(sAlone[step]!);
      }
      cache.dispose();
    }
  });

  it('refuses blocks that are not variants of one base, or that keep their own caches', () => {
    const a = runtime(base);
    const b = runtime(fused);
    expect(() => BlockRuntime.prepareTogether([{ runtime: a, sequences: [{ id: 'x', tokens: [1] }] }, { runtime: b, sequences: [{ id: 'y', tokens: [1] }] }])).toThrow(ZooInvalidError);
    const other = runtime(byLabel('llama', 'attn(2)'));
    expect(() => BlockRuntime.prepareTogether([{ runtime: a, sequences: [{ id: 'x', tokens: [1] }] }, { runtime: other, sequences: [{ id: 'y', tokens: [1] }] }])).toThrow(/not variants of one base block/);
    expect(() => BlockRuntime.prepareTogether([])).toThrow(ZooInvalidError);
    // A shared cache must hold the block's attention layers.
    expect(() => runtime(base, blockKvCache(byLabel('llama', 'attn(2)'), 4, pool.backend)!)).toThrow(/shared KV cache does not hold its attention layers/);
  });
});

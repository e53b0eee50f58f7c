/**
 * The serving core's plans carried out on the real chain executor (design note §7, behaviours 17 and 23): a KV
 * migration planned by KvCoordinator (front recompute by chunked prefill on the destination, back pages copied from
 * the source) yields the same tokens as no migration; speculation bookkept by SpeculationLedger, with a surrogate
 * that is a different block and forced mispredictions, rolls back to exactly the non-speculative tokens.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type Clock, mulberry32 } from '@tessera/core';
import { argmax, type DecoderStepContext, generateLoraAdapter, generateModel } from '@tessera/engine';
import { cast, gatherRows, scatterRows, Tensor } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';

import { type BlockRuntime, ChainExecutor } from '../src/chain/index.js';
import { ingestFoundation, ingestLora } from '../src/ingest/index.js';
import { BlockZoo, KvCoordinator, type MigrationPlan, type MigrationRates, meanRowCosine, SpeculationLedger } from '../src/planner/index.js';
import { DevicePool, DiskTensorStore } from '../src/store/index.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-serving-'));
const { config } = generateModel(join(root, 'llama'), { family: 'decoder', size: 'tiny', seed: 0 });
generateLoraAdapter(join(root, 'sql'), { base: config, seed: 1 });
generateLoraAdapter(join(root, 'chat'), { base: config, seed: 2, targets: ['q_proj', 'v_proj', 'up_proj'] });
const zoo = new BlockZoo();
const store = DiskTensorStore.open(join(root, 'zoo'));
ingestFoundation(zoo, store, join(root, 'llama'), { id: 'llama' });
ingestLora(zoo, store, join(root, 'sql'), { id: 'sql', base: 'llama' });
ingestLora(zoo, store, join(root, 'chat'), { id: 'chat', base: 'llama' });
const pool = new DevicePool(store);
const executors: ChainExecutor[] = [];
const executor = () => {
  const ex = new ChainExecutor(zoo, pool, { kvPages: 8 });
  executors.push(ex);
  return ex;
};
afterAll(() => {
  for (const ex of executors) ex.dispose();
  pool.dispose();
  rmSync(root, { recursive: true, force: true });
});

const clock: Clock = { now: () => 0 };
const APP = 'sql';
const promptRand = mulberry32(8);
const prompt = Array.from({ length: 20 }, () => Math.floor(promptRand() * config.vocabSize));
const STEPS = 28;

function reference(): number[] {
  return executor().generate([{ app: APP, prompt, maxTokens: STEPS }])[0]!.tokens;
}

function kvRows(rt: BlockRuntime, id: string, layer: number, start: number, count: number): { k: Float32Array; v: Float32Array } {
  const cache = rt.cache!;
  const idx = Tensor.from(cache.slotsFor(id, start, count), [count], { backend: cache.backend });
  try {
    const rows = cache.layerRows(layer);
    const k = gatherRows(rows.k, idx);
    const v = gatherRows(rows.v, idx);
    try {
      return { k: k.toArray() as Float32Array, v: v.toArray() as Float32Array };
    } finally {
      k.dispose();
      v.dispose();
    }
  } finally {
    idx.dispose();
  }
}

/** Carries out a migration plan for one sequence of the chain from executor `src` to `dst`. */
function migrate(plan: MigrationPlan, src: ChainExecutor, dst: ChainExecutor, id: string, history: readonly number[]): void {
  const seq = plan.sequences[0]!;
  const length = src.length(id)!;
  expect(seq.tokens).toBe(length);
  // Front: chunked prefill on the destination from the token ids (the chain head's input), chunk by chunk.
  for (const [a, b] of seq.recomputeChunks) dst.step([{ app: APP, id, tokens: history.slice(a, b) }]);
  // Back: the remaining pages copied from the source's caches, position for position, in every attention block.
  const from = seq.recomputeTokens;
  const srcBlocks = src.load(APP);
  const dstBlocks = dst.load(APP);
  srcBlocks.forEach((s, i) => {
    const d = dstBlocks[i]!;
    if (!s.cache || !d.cache) return;
    if (!d.cache.hasSequence(id)) d.cache.addSequence(id);
    d.cache.reserve(id, length);
    if (length > from) {
      const idx = Tensor.from(d.cache.slotsFor(id, from, length - from), [length - from], { backend: d.cache.backend });
      try {
        for (let l = s.cache.firstLayer; l < s.cache.firstLayer + s.cache.numLayers; l++) {
          const rows = kvRows(s, id, l, from, length - from);
          const shape = [length - from, s.cache.numKvHeads * s.cache.headDim];
          const k = Tensor.from(rows.k, shape, { backend: d.cache.backend });
          const v = Tensor.from(rows.v, shape, { backend: d.cache.backend });
          try {
            scatterRows(k, idx, d.cache.layerRows(l).k);
            scatterRows(v, idx, d.cache.layerRows(l).v);
          } finally {
            k.dispose();
            v.dispose();
          }
        }
      } finally {
        idx.dispose();
      }
    }
    d.cache.commit(id, length);
    // Copied positions are bit for bit the source's; recomputed ones agree within float tolerance.
    for (let l = s.cache.firstLayer; l < s.cache.firstLayer + s.cache.numLayers; l++) {
      const a = kvRows(s, id, l, 0, length);
      const b = kvRows(d, id, l, 0, length);
      const width = s.cache.numKvHeads * s.cache.headDim;
      for (const [x, y] of [[a.k, b.k], [a.v, b.v]] as const) {
        expect(y.subarray(from * width)).toEqual(x.subarray(from * width));
        for (let j = 0; j < from * width; j++) expect(Math.abs(x[j]! - y[j]!)).toBeLessThan(1e-4);
      }
    }
  });
  for (const d of dstBlocks) if (d.cache) expect(d.cache.length(id)).toBe(length);
}

describe('KV migration on the chain executor (behaviour 17)', () => {
  const cases: { name: string; at: number; rates: MigrationRates; split: 'mixed' | 'recompute' | 'copy' }[] = [
    { name: 'overlapped: copy twice as fast as recompute', at: 14, rates: { copyPagesPerMs: 2, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 1 }, split: 'mixed' },
    { name: 'recompute only (copy far slower)', at: 5, rates: { copyPagesPerMs: 1e-6, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 1 }, split: 'recompute' },
    { name: 'copy only (recompute far slower)', at: 9, rates: { copyPagesPerMs: 1, recomputePagesPerMs: 1e-6, chunkOverheadMs: 0, chunkPages: 2 }, split: 'copy' },
  ];
  const expected = reference();
  for (const c of cases) {
    it(`yields the same tokens as no migration — ${c.name}`, () => {
      const a = executor();
      const b = executor();
      const kv = new KvCoordinator({ clock });
      const id = `mig-${c.at}`;
      const chainKv = `chain:${APP}`;
      const history: number[] = [];
      const tokens: number[] = [];
      let next = [...prompt];
      let ex = a;
      let at = 'A';
      for (let k = 0; k < STEPS; k++) {
        if (k === c.at) {
          const plan = kv.planMigration([{ request: id, block: chainKv }], 'A', 'B', c.rates);
          const s = plan.sequences[0]!;
          if (c.split === 'mixed') expect(s.recomputeTokens > 0 && s.copyPages.length > 0).toBe(true);
          if (c.split === 'recompute') expect(s.copyPages).toHaveLength(0);
          if (c.split === 'copy') expect(s.recomputeTokens).toBe(0);
          migrate(plan, a, b, id, history);
          kv.applyMigration(plan);
          a.release(id);
          expect(kv.owner(id, chainKv)).toBe('B');
          ex = b;
          at = 'B';
        }
        const logits = ex.step([{ app: APP, id, tokens: next }]);
        kv.append(id, chainKv, at, next.length);
        history.push(...next);
        const t = argmax(logits[0]!);
        tokens.push(t);
        next = [t];
      }
      expect(tokens).toEqual(expected);
      expect(kv.tokensAt(id, chainKv, 'B')).toBe(b.length(id));
      b.release(id);
      kv.release(id);
      kv.audit();
    });
  }
});

/** Runs one block for the sequence on `hidden` (null at the embedding); the context is committed and kept for disposal. */
function runBlock(rt: BlockRuntime, hidden: Tensor | null, id: string, tokens: readonly number[], keep: DecoderStepContext[]): { hidden: Tensor | null; logits: Tensor | null } {
  const ctx = rt.prepare([{ id, tokens }]);
  keep.push(ctx);
  const out = rt.run(hidden, ctx, 'last');
  ctx.commit();
  return out;
}

function copyOf(t: Tensor): Tensor {
  const c = Tensor.empty(t.shape, 'f32', t.backend);
  cast(t, 'f32', { out: c });
  return c;
}

describe('speculation on the chain executor (behaviour 23)', () => {
  it('with forced mispredictions of a surrogate that is another block, rolls back to exactly the non-speculative tokens', () => {
    const expected = reference();
    const ex = executor();
    const chain = ex.load(APP);
    const position = chain.findIndex((rt) => rt.manifest.kind === 'ffn');
    // The speculated block: sql's first FFN (not last, KV-free); the wrong surrogate: chat's FFN+LoRA of the same
    // layer, another block (same shape, other weights).
    const wrong = ex.load('chat')[position]!;
    expect(position).toBeGreaterThan(0);
    expect(position).toBeLessThan(chain.length - 1);
    expect(wrong.manifest.blockId).not.toBe(chain[position]!.manifest.blockId);
    expect(wrong.manifest.span).toEqual(chain[position]!.manifest.span);
    const ledger = new SpeculationLedger();
    const rand = mulberry32(4);
    const id = 'spec';
    const tokens: number[] = [];
    let next = [...prompt];
    const width = config.hiddenSize;
    for (let iteration = 0; iteration < STEPS; iteration++) {
      const keep: DecoderStepContext[] = [];
      const owned: Tensor[] = [];
      try {
        let h: Tensor | null = null;
        for (let p = 0; p < position; p++) {
          const out = runBlock(chain[p]!, h, id, next, keep);
          if (h === null) owned.push(out.hidden!);
          h = out.hidden;
          ledger.record({ request: id, iteration, position: p, instance: 'd0', block: chain[p]!.manifest.blockId, kvTokens: chain[p]!.cache ? next.length : 0 });
        }
        // Exact surrogate (the block itself) half the time, the wrong block the other half.
        const miss = rand() < 0.5;
        const surrogate = miss ? wrong : chain[position]!;
        const tag = ledger.open(id, iteration, position, chain.length);
        const predicted = copyOf(h!);
        owned.push(predicted);
        runBlock(surrogate, predicted, id, next, keep);
        const predictedHost = (predicted.toArray() as Float32Array).slice();
        runBlock(chain[position]!, h, id, next, keep);
        ledger.record({ request: id, iteration, position, instance: 'd0', block: chain[position]!.manifest.blockId, kvTokens: 0 });
        // Downstream starts on the prediction: tentative KV appends, tentative logits.
        let logits: Tensor | null = null;
        for (let p = position + 1; p < chain.length; p++) {
          const out = runBlock(chain[p]!, predicted, id, next, keep);
          if (out.logits) owned.push((logits = out.logits));
          const step = ledger.record({ request: id, iteration, position: p, instance: 'd0', block: chain[p]!.manifest.blockId, kvTokens: chain[p]!.cache ? next.length : 0 });
          expect(step.dependsOn).toEqual([tag]);
        }
        expect(ledger.canRelease(id, iteration)).toBe(false);
        const cosine = meanRowCosine(h!.toArray() as Float32Array, predictedHost, width);
        // A miss is forced below the threshold (the wrong block's output is close, being a LoRA of the same FFN).
        if (miss) expect(cosine).toBeLessThan(1);
        else expect(cosine).toBeCloseTo(1, 6);
        const verdict = ledger.verify(tag, miss ? Math.min(cosine, 0.5) : cosine);
        expect(verdict.accepted).toBe(!miss);
        if (!verdict.accepted) {
          expect(verdict.resumeAt).toBe(position + 1);
          for (const t of verdict.truncate) {
            const rt = chain.find((r) => r.manifest.blockId === t.block)!;
            rt.cache!.commit(id, rt.cache!.length(id) - t.tokens);
          }
          for (let p = verdict.resumeAt; p < chain.length; p++) {
            const out = runBlock(chain[p]!, h, id, next, keep);
            if (out.logits) owned.push((logits = out.logits));
            ledger.record({ request: id, iteration, position: p, instance: 'd0', block: chain[p]!.manifest.blockId, kvTokens: chain[p]!.cache ? next.length : 0 });
          }
        }
        expect(ledger.canRelease(id, iteration)).toBe(true);
        expect(ledger.finalSteps(id, iteration).map((s) => s.position)).toEqual(chain.map((_, i) => i));
        ledger.retire(id, iteration);
        const t = argmax(logits!.toArray() as Float32Array);
        tokens.push(t);
        next = [t];
      } finally {
        for (const c of keep) c.dispose();
        for (const t of owned) t.dispose();
      }
    }
    ex.release(id);
    expect(tokens).toEqual(expected);
    const stats = ledger.stats();
    expect(stats.rolledBack).toBeGreaterThan(0);
    expect(stats.accepted).toBeGreaterThan(0);
    expect(stats.speculations).toBe(STEPS);
  });
});

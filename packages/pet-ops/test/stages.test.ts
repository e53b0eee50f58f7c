/**
 * The engine's stages with real PET tasks: embed → layers in pieces → head on the shared encoder equals its whole
 * forward bit for bit with every PET type in one batch (LoRA through SgmvLoraDelta, prefix-tuning through the
 * attention hook), packed and padded, and an awaited beforeLayer changes nothing. The delta here is PetsDelta's
 * data path with one stream; its logits are checked against PetEngine's first, so it is a faithful PET delta.
 */
import {
  type AttentionPrefix,
  type AttentionSiteCall,
  type EncoderBatchOptions,
  type EncoderLinearSite,
  type EncoderNormSite,
  type EncoderSequence,
  type LayerBoundaryCall,
  type LinearSiteCall,
  type ModelDelta,
  type NormSiteCall,
  SegmentLayout,
} from '@tessera/engine';
import { type PetOp, type PetRows, type Tensor, linear, petSiteRun } from '@tessera/native';
import { SgmvLoraDelta } from '@tessera/sgmv-kernel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PetEngine, type PetQuery } from '../src/engine/pet-engine.js';
import type { LoadedPet } from '../src/types.js';
import { type EngineFixture, TAG, engineFixture, queriesFor } from './engine-fixture.js';

const TYPES = ['adapter', 'maskbert', 'diff', 'bitfit', 'lora', 'prefix', 'standard'] as const;

let fx: EngineFixture;
let queries: PetQuery[][];
beforeAll(() => {
  fx = engineFixture([...TYPES]);
  const vocab = fx.shared.config.vocabSize;
  queries = fx.ids.map((id, i) => queriesFor(id, [4 + i, 11 - i], vocab, 20 + i));
}, 30_000);
afterAll(() => fx?.dispose());

/** Each task's queries are adjacent: one segment per task, keyed by task id. */
const sequencesOf = (qs: readonly PetQuery[][]): EncoderSequence[] => qs.flatMap((group) => group.map((q) => ({ ids: q.ids, key: q.taskId })));

/** Every task's PET ops on its own segment, LoRA segments in one SGMV pair: PetsDelta with one stream. */
class TaskDelta implements ModelDelta {
  private readonly lora: SgmvLoraDelta;
  private loraLayout: { of: SegmentLayout; layout: SegmentLayout } | null = null;

  constructor(private readonly tasks: ReadonlyMap<string, LoadedPet>, private readonly groups: ReadonlyMap<string, { n: number; maxLength: number }>, private readonly padTo: number | undefined) {
    this.lora = new SgmvLoraDelta((key) => tasks.get(key)?.lora ?? undefined, { reference: true });
  }

  private rowsOf(key: string, start: number, count: number): PetRows {
    const g = this.groups.get(key)!;
    return this.padTo === undefined ? { start, seqs: 1, stride: count, tokens: count } : { start, seqs: g.n, stride: this.padTo, tokens: g.maxLength };
  }

  private run(build: (pet: LoadedPet, rows: PetRows) => PetOp[], layout: SegmentLayout): void {
    const ops: PetOp[] = [];
    for (const { key, start, count } of layout.segments) if (key !== null) ops.push(...build(this.tasks.get(key)!, this.rowsOf(key, start, count)));
    if (ops.length > 0) petSiteRun(ops, { reference: true });
  }

  linear(call: LinearSiteCall): void {
    // SGMV sees only the LoRA tasks' segments (null: skipped), as PetsDelta's LoRA layout does.
    if (this.loraLayout?.of !== call.layout) {
      this.loraLayout?.layout.dispose();
      const layout = SegmentLayout.fromCounts(call.layout.segments.map((s) => ({ key: s.key !== null && this.tasks.get(s.key)?.lora ? s.key : null, count: s.count })));
      this.loraLayout = { of: call.layout, layout };
    }
    this.lora.linear({ ...call, layout: this.loraLayout.layout });
    this.run((pet, rows) => pet.linearOps({ layer: call.layer, site: call.site as EncoderLinearSite, x: call.x, outputs: call.outputs, rows }), call.layout);
  }

  norm(call: NormSiteCall): void {
    this.run((pet, rows) => pet.normOps({ layer: call.layer, site: call.site as EncoderNormSite, x: call.x, y: call.y, rows }), call.layout);
  }

  attentionPrefix(call: AttentionSiteCall): AttentionPrefix | null {
    return call.key === null ? null : (this.tasks.get(call.key)?.attentionPrefix(call.layer) ?? null);
  }

  dispose(): void {
    this.lora.dispose();
    this.loraLayout?.layout.dispose();
  }
}

function taskDelta(padTo: number | undefined): TaskDelta {
  const tasks = new Map(fx.ids.map((id) => [id, fx.tasks.loadedTask(id).pet] as const));
  const groups = new Map(queries.map((g) => [g[0]!.taskId, { n: g.length, maxLength: Math.max(...g.map((q) => q.ids.length)) }] as const));
  return new TaskDelta(tasks, groups, padTo);
}

/** Each query's task-head logits from the pooled rows (pooled row b is sequence b). */
function headLogits(pooled: Tensor): Float32Array[] {
  let b = 0;
  return queries.flatMap((group) => group.map((q) => {
    const head = fx.tasks.loadedTask(q.taskId).pet.head;
    const row = pooled.rows(b++, 1);
    const logits = linear(row, head.weight, head.bias);
    const out = logits.toArray() as Float32Array;
    row.dispose();
    logits.dispose();
    return out;
  }));
}

describe('PET deltas through the engine stages', () => {
  const layouts: ['packed' | 'padded', (maxLength: number) => number | undefined][] = [['packed', () => undefined], ['padded', (L) => L]];

  for (const [name, padOf] of layouts) {
    it(`embed → layers in 1, 2 and L pieces → head equals the whole forward bit for bit, every PET type in one batch (${name})`, async () => {
      const model = fx.shared.model;
      const L = model.config.numLayers;
      const sequences = sequencesOf(queries);
      const padTo = padOf(Math.max(...sequences.map((s) => s.ids.length)));
      const delta = taskDelta(padTo);
      const options: EncoderBatchOptions = padTo === undefined ? { deltas: [delta] } : { deltas: [delta], padTo };
      try {
        const whole = model.forward(sequences, { ...options, outputs: { hidden: true, pooled: true, logits: false } });
        const want = { hidden: whole.hidden!.toArray(), pooled: whole.pooled!.toArray() };

        // The test delta is PetS's: its task-head logits are PetEngine's, to f32 rounding (the engine may split
        // the PET ops over streams).
        const engine = new PetEngine(fx.tasks, TAG, { layout: name, reference: true });
        const results = engine.run({ miniBatches: queries.map((q) => ({ taskId: q[0]!.taskId, queries: q })) }).results.flat();
        headLogits(whole.pooled!).forEach((logits, i) => {
          const ref = results[i]!.logits;
          logits.forEach((v, j) => expect(Math.abs(v - ref[j]!)).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(ref[j]!))));
        });
        whole.hidden!.dispose();
        whole.pooled!.dispose();

        const cutsList = [[0, L], [0, 1, L], Array.from({ length: L + 1 }, (_, j) => j)];
        for (const cuts of cutsList) {
          const ctx = model.prepare(sequences, options);
          const h = model.embed(ctx);
          for (let p = 0; p + 1 < cuts.length; p++) model.layers(cuts[p]!, cuts[p + 1]!, h, ctx);
          const { pooled } = model.head(h, ctx, { logits: false });
          expect({ hidden: h.toArray(), pooled: pooled!.toArray() }, `split ${cuts.join(',')}`).toEqual(want);
          h.dispose();
          pooled!.dispose();
          ctx.dispose();
        }

        // Awaiting a layer boundary (adapters staged layer by layer) changes nothing.
        const seen: number[] = [];
        const boundary: ModelDelta = {
          async beforeLayer(call: LayerBoundaryCall) {
            seen.push(call.layer);
            await new Promise((resolve) => setTimeout(resolve, 2));
          },
        };
        const out = await model.forwardAsync(sequences, { ...options, deltas: [boundary, delta], outputs: { hidden: true, pooled: true, logits: false } });
        expect({ hidden: out.hidden!.toArray(), pooled: out.pooled!.toArray() }).toEqual(want);
        expect(seen).toEqual(Array.from({ length: L }, (_, j) => j));
        out.hidden!.dispose();
        out.pooled!.dispose();
      } finally {
        delta.dispose();
      }
    });
  }
});

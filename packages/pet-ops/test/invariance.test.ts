/**
 * Batch invariance (pets.md §9 behaviours 6–8): a query's logits do not depend on its batch mates, their PET
 * types, the mini-batch order, the pad length, or its task being split into two mini-batches; and PET ops touch
 * only their own rows (STANDARD queries in a mixed batch equal the plain shared model plus head, bit for bit).
 *
 * Tolerance 1e-5 normwise where the batch composition changes: the shared GEMMs pick their blocking by row count,
 * so the same row can round differently in a batch of another size (the engine's own padded-vs-packed tests use
 * the same bound). Where nothing but other segments' PET ops differs, equality is exact.
 */
import { Tensor, linear } from '@tessera/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PetEngine, type PetMiniBatchInput, type PetQueryResult } from '../src/engine/pet-engine.js';
import { PET_TYPES } from '../src/types.js';
import { type EngineFixture, TAG, engineFixture, normwiseError, queriesFor } from './engine-fixture.js';

const TOLERANCE = 1e-5;
let fx: EngineFixture;
let engine: PetEngine;
let vocab: number;

beforeAll(() => {
  fx = engineFixture(PET_TYPES);
  engine = new PetEngine(fx.tasks, TAG);
  vocab = fx.shared.config.vocabSize;
}, 30_000);
afterAll(() => fx?.dispose());

const idOf = (type: string) => fx.ids.find((id) => fx.types.get(id) === type)!;

function expectClose(got: PetQueryResult, want: PetQueryResult, what: string): void {
  expect(got.taskId).toBe(want.taskId);
  const err = normwiseError(got.logits, want.logits);
  expect(err, `${what}: normwise error ${err}`).toBeLessThan(TOLERANCE);
}

/** Each task's queries with mixed lengths; the mixed macro-batch of all of them. */
function mixedBatch(seed: number): PetMiniBatchInput[] {
  return fx.ids.map((taskId, k) => ({ taskId, queries: queriesFor(taskId, [3 + ((k * 7) % 20), 12, 1 + ((k * 5) % 30)], vocab, seed + k) }));
}

describe('batch invariance', () => {
  for (const layout of ['padded', 'packed'] as const) {
    it(`a query alone equals the same query in a mixed batch of all seven types (${layout})`, () => {
      const miniBatches = mixedBatch(10);
      const mixed = engine.run({ miniBatches }, { layout }).results;
      miniBatches.forEach((mb, k) => {
        mb.queries.forEach((q, j) => {
          const [alone] = engine.run({ miniBatches: [{ taskId: mb.taskId, queries: [q] }] }, { layout }).results;
          expectClose(mixed[k]![j]!, alone![0]!, `${fx.types.get(mb.taskId)} query ${j}`);
        });
      });
    });
  }

  it('does not depend on the mini-batch order', () => {
    const miniBatches = mixedBatch(20);
    const forward = engine.run({ miniBatches }).results;
    const reversed = engine.run({ miniBatches: [...miniBatches].reverse() }).results.reverse();
    const rotated = engine.run({ miniBatches: [...miniBatches.slice(3), ...miniBatches.slice(0, 3)] }).results;
    const unrotated = [...rotated.slice(miniBatches.length - 3), ...rotated.slice(0, miniBatches.length - 3)];
    forward.forEach((mb, k) => mb.forEach((r, j) => {
      expectClose(reversed[k]![j]!, r, `reversed, mini-batch ${k} query ${j}`);
      expectClose(unrotated[k]![j]!, r, `rotated, mini-batch ${k} query ${j}`);
    }));
  });

  it('does not depend on the pad length: a query alone vs padded to 128 in a mixed batch', () => {
    const maxPositions = fx.shared.config.maxPositions;
    expect(maxPositions).toBe(128);
    for (const type of ['adapter', 'maskbert', 'diff', 'bitfit', 'lora', 'prefix', 'standard'] as const) {
      const id = idOf(type);
      const [q] = queriesFor(id, [9], vocab, 30);
      const alone = engine.run({ miniBatches: [{ taskId: id, queries: [q!] }] }, { layout: 'packed' }).results[0]![0]!;
      // Another task's 128-token query makes every row of the padded batch 128 long.
      const other = fx.ids.find((t) => t !== id)!;
      const long = queriesFor(other, [maxPositions, 4], vocab, 31);
      const { results, timing } = engine.run({ miniBatches: [{ taskId: other, queries: long }, { taskId: id, queries: [q!] }] }, { layout: 'padded' });
      expect(timing.paddedRows).toBe(3 * maxPositions);
      expectClose(results[1]![0]!, alone, `${type} alone vs padded to 128`);
    }
  });

  it('lets a task appear as two mini-batches of one macro-batch (behaviour 7)', () => {
    for (const type of ['adapter', 'maskbert', 'diff', 'lora', 'prefix'] as const) {
      const id = idOf(type);
      const queries = queriesFor(id, [14, 3, 22, 8], vocab, 40);
      const whole = engine.run({ miniBatches: [{ taskId: id, queries }] }).results[0]!;
      const between = { taskId: idOf(type === 'lora' ? 'bitfit' : 'lora'), queries: queriesFor(idOf(type === 'lora' ? 'bitfit' : 'lora'), [5, 17], vocab, 41) };
      const { results, timing } = engine.run({ miniBatches: [{ taskId: id, queries: queries.slice(0, 2) }, between, { taskId: id, queries: queries.slice(2) }] });
      expect(timing.segments).toBe(3);
      const split = [...results[0]!, ...results[2]!];
      split.forEach((r, j) => expectClose(r, whole[j]!, `${type} split, query ${j}`));
    }
  });

  for (const layout of ['padded', 'packed'] as const) {
    it(`PET ops touch only their rows: STANDARD queries equal the plain shared model + head exactly (${layout})`, () => {
      // STANDARD between two mini-batches that run PET ops on every site (an op spilling over its rows would hit it).
      const all = mixedBatch(50);
      const std = all.find((mb) => mb.taskId === idOf('standard'))!;
      const rest = all.filter((mb) => mb !== std);
      const miniBatches = [rest.find((mb) => mb.taskId === idOf('bitfit'))!, std, ...rest.filter((mb) => mb.taskId !== idOf('bitfit'))];
      const { results } = engine.run({ miniBatches }, { layout });
      const k = 1;
      // The same forward without any delta: same rows, same GEMMs; only other segments' PET work is missing.
      const sequences = miniBatches.flatMap((mb) => mb.queries.map((q) => ({ ids: q.ids })));
      const L = Math.max(...sequences.map((s) => s.ids.length));
      const out = fx.shared.model.forward(sequences, { ...(layout === 'padded' ? { padTo: L } : {}), outputs: { hidden: false, pooled: true, logits: false } });
      const first = miniBatches.slice(0, k).reduce((n, mb) => n + mb.queries.length, 0);
      const n = miniBatches[k]!.queries.length;
      const pet = fx.tasks.loadedTask(idOf('standard')).pet;
      const view = out.pooled!.rows(first, n);
      const logits = linear(view, pet.head.weight, pet.head.bias);
      const want = logits.toArray() as Float32Array;
      for (const t of [view, logits, out.pooled!] as Tensor[]) t.dispose();
      const width = want.length / n;
      results[k]!.forEach((r, j) => expect(Array.from(r.logits)).toEqual(Array.from(want.subarray(j * width, (j + 1) * width))));
    });
  }
});

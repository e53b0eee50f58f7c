/**
 * Operator scheduling inside PIE (pets.md §9 behaviour 16): the same macro-batch run sequentially and with its PET
 * ops spread over 2, 4 or a dynamic number of streams, by intensity (Algorithm 2) or round-robin, gives bitwise
 * identical logits. The native PET kernels compute each row from its own op only, in a fixed order, whatever the
 * stream grouping; one petSiteRun call per site is the barrier.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PetEngine, type PetMiniBatchInput, type PetSchedulingOptions } from '../src/engine/pet-engine.js';
import type { PetType } from '../src/types.js';
import { type EngineFixture, TAG, engineFixture, queriesFor } from './engine-fixture.js';

// Two tasks of each paper type plus one of each extension: 11 mini-batches, 8 of which run site ops.
const TYPES: PetType[] = ['adapter', 'maskbert', 'diff', 'bitfit', 'adapter', 'maskbert', 'diff', 'bitfit', 'lora', 'prefix', 'standard'];

let fx: EngineFixture;
let miniBatches: PetMiniBatchInput[];

beforeAll(() => {
  fx = engineFixture(TYPES);
  const vocab = fx.shared.config.vocabSize;
  miniBatches = fx.ids.map((taskId, k) => ({ taskId, queries: queriesFor(taskId, [4 + ((k * 11) % 29), 2 + ((k * 3) % 13), 24], vocab, 200 + k) }));
}, 30_000);
afterAll(() => fx?.dispose());

const schedules: { name: string; scheduling: PetSchedulingOptions; streams?: number }[] = [
  { name: 'intensity, 2 streams', scheduling: { mode: 'intensity', streams: 2 }, streams: 2 },
  { name: 'intensity, 4 streams', scheduling: { mode: 'intensity', streams: 4 }, streams: 4 },
  { name: 'intensity, dynamic (max 8)', scheduling: { mode: 'intensity', streams: 'dynamic', thresholds: { small: 1, long: 16, few: 2, max: 8 } }, streams: 8 },
  { name: 'intensity, dynamic (defaults)', scheduling: { mode: 'intensity', streams: 'dynamic' } },
  { name: 'round-robin, 2 streams', scheduling: { mode: 'round-robin', streams: 2 }, streams: 2 },
  { name: 'round-robin, 4 streams', scheduling: { mode: 'round-robin', streams: 4 }, streams: 4 },
  { name: 'intensity, 64 streams (capped at the 8 op mini-batches)', scheduling: { mode: 'intensity', streams: 64 }, streams: 8 },
];

describe('parallel PET operator scheduling vs sequential', () => {
  for (const layout of ['padded', 'packed'] as const) {
    it(`gives bitwise-identical logits for every mode and stream count (${layout})`, () => {
      const engine = new PetEngine(fx.tasks, TAG, { layout });
      const sequential = engine.run({ miniBatches }, { scheduling: { mode: 'sequential' } });
      expect(sequential.timing.streams).toBe(1);
      for (const s of schedules) {
        const parallel = engine.run({ miniBatches }, { scheduling: s.scheduling });
        if (s.streams !== undefined) expect(parallel.timing.streams, s.name).toBe(s.streams);
        parallel.results.forEach((mb, k) => mb.forEach((r, j) => {
          expect(Array.from(r.logits), `${s.name}: mini-batch ${k} query ${j}`).toEqual(Array.from(sequential.results[k]![j]!.logits));
        }));
      }
    });
  }

  it('with the reference kernels too', () => {
    const engine = new PetEngine(fx.tasks, TAG, { reference: true });
    const a = engine.run({ miniBatches }, { scheduling: { mode: 'sequential' } }).results;
    const b = engine.run({ miniBatches }, { scheduling: { mode: 'intensity', streams: 3 } }).results;
    a.forEach((mb, k) => mb.forEach((r, j) => expect(Array.from(b[k]![j]!.logits)).toEqual(Array.from(r.logits))));
  });

  it('uses one stream when no mini-batch runs site ops', () => {
    const engine = new PetEngine(fx.tasks, TAG, { scheduling: { mode: 'intensity', streams: 4 } });
    const only = miniBatches.filter((mb) => ['lora', 'prefix', 'standard'].includes(fx.types.get(mb.taskId)!));
    expect(engine.run({ miniBatches: only }).timing.streams).toBe(1);
  });
});

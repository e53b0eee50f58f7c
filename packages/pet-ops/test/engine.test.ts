/**
 * PetEngine's contract: results and labels, classify's grouping and order, timing, and input validation that fails
 * before any native work and changes nothing.
 */
import { InvalidArgumentError, allocatorStats } from '@tessera/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TaskStateError, UnknownSharedModelError, UnknownTaskError } from '../src/errors.js';
import { PetEngine, type PetQuery } from '../src/engine/pet-engine.js';
import { generatePetParams } from '../src/gen/generate.js';
import { type EngineFixture, TAG, engineFixture, queriesFor } from './engine-fixture.js';

let fx: EngineFixture;
let engine: PetEngine;
let vocab: number;
let unloaded: string;

beforeAll(() => {
  fx = engineFixture(['adapter', 'maskbert', 'bitfit', 'standard']);
  engine = new PetEngine(fx.tasks, TAG);
  vocab = fx.shared.config.vocabSize;
  unloaded = fx.tasks.registerTask('diff', TAG, generatePetParams('diff', fx.shared.config, { seed: 9, labels: ['x', 'y'] }), { id: 'diff-unloaded' });
}, 30_000);
afterAll(() => fx?.dispose());

describe('PetEngine.run', () => {
  it('returns [miniBatch][query] results with logits of the head’s width and the argmax label', () => {
    const [a, m] = fx.ids;
    const { results, timing } = engine.run({
      miniBatches: [
        { taskId: a!, queries: queriesFor(a!, [5, 9], vocab, 1) },
        { taskId: m!, queries: queriesFor(m!, [12], vocab, 2, true) },
      ],
    });
    expect(results.map((r) => r.length)).toEqual([2, 1]);
    for (const [k, id] of [a!, m!].entries()) {
      const labels = fx.params.get(id)!.config.labels;
      for (const r of results[k]!) {
        expect(r.taskId).toBe(id);
        expect(r.logits).toBeInstanceOf(Float32Array);
        expect(r.logits.length).toBe(labels.length);
        expect(r.logits.every(Number.isFinite)).toBe(true);
        const best = r.logits.indexOf(Math.max(...r.logits));
        expect(r.labelIndex).toBe(best);
        expect(r.label).toBe(labels[best]);
      }
    }
    expect(timing).toMatchObject({ segments: 2, rows: 26, paddedRows: 3 * 12 });
    expect(timing.petMs).toBeGreaterThanOrEqual(0);
    expect(timing.totalMs).toBeGreaterThanOrEqual(timing.petMs);
    expect(timing.sharedMs).toBeCloseTo(timing.totalMs - timing.petMs, 9);
  });

  it('measures PET time with the injected clock: the hook sites and heads, not the shared model', () => {
    let t = 0;
    const now = () => (t += 1);
    const [a] = fx.ids;
    const { timing } = engine.run({ miniBatches: [{ taskId: a!, queries: queriesFor(a!, [4], vocab, 3) }] }, { now });
    // Every PET interval reads the clock twice (start, end: +1 each); 2 layers × (4 linear + 2 norm sites) + heads.
    expect(timing.petMs).toBe(2 * 6 + 1);
    expect(timing.sharedMs).toBe(timing.totalMs - timing.petMs);
    expect(timing.totalMs).toBeGreaterThan(timing.petMs);
  });

  it('returns nothing for an empty macro-batch', () => {
    expect(engine.run({ miniBatches: [] })).toEqual({ results: [], timing: { totalMs: 0, petMs: 0, sharedMs: 0, segments: 0, rows: 0, paddedRows: 0, streams: 1 } });
  });
});

describe('PetEngine.classify', () => {
  it('groups queries by task into one mini-batch each and returns results in input order', () => {
    const [a, m, b] = fx.ids;
    const q = (id: string, len: number, seed: number) => queriesFor(id, [len], vocab, seed)[0]!;
    const queries: PetQuery[] = [q(a!, 6, 1), q(m!, 3, 2), q(a!, 11, 3), q(b!, 7, 4), q(m!, 2, 5)];
    const results = engine.classify(queries);
    expect(results.map((r) => r.taskId)).toEqual(queries.map((x) => x.taskId));
    const grouped = engine.run({
      miniBatches: [
        { taskId: a!, queries: [queries[0]!, queries[2]!] },
        { taskId: m!, queries: [queries[1]!, queries[4]!] },
        { taskId: b!, queries: [queries[3]!] },
      ],
    }).results;
    const expected = [grouped[0]![0], grouped[1]![0], grouped[0]![1], grouped[2]![0], grouped[1]![1]];
    results.forEach((r, i) => expect(Array.from(r.logits)).toEqual(Array.from(expected[i]!.logits)));
    expect(engine.classify([])).toEqual([]);
  });
});

describe('PetEngine validation (before any native work, nothing changes)', () => {
  const cases: [string, () => unknown, RegExp | (new (...args: never[]) => Error)][] = [];
  beforeAll(() => {
    const [a] = fx.ids;
    const good = queriesFor(a!, [5], vocab, 7)[0]!;
    cases.push(
      ['unknown task', () => engine.classify([{ taskId: 'nope', ids: [1, 2] }]), UnknownTaskError],
      ['unloaded task', () => engine.classify([{ taskId: unloaded, ids: [1, 2] }]), TaskStateError],
      ['empty query', () => engine.classify([good, { taskId: a!, ids: [] }]), /mini-batch 0 query 1 is empty/],
      ['too long', () => engine.classify([{ taskId: a!, ids: new Array(129).fill(1) }]), /129 tokens, more than the model's 128 positions/],
      ['id out of vocab', () => engine.classify([{ taskId: a!, ids: [1, vocab] }]), new RegExp(`position 1 has token id ${vocab}, outside the vocabulary`)],
      ['negative id', () => engine.classify([{ taskId: a!, ids: [-1] }]), /token id -1/],
      ['fractional id', () => engine.classify([{ taskId: a!, ids: [1.5] }]), /token id 1.5/],
      ['token types length', () => engine.classify([{ taskId: a!, ids: [1, 2], tokenTypes: [0] }]), /2 ids but 1 token types/],
      ['token type range', () => engine.classify([{ taskId: a!, ids: [1, 2], tokenTypes: [0, 2] }]), /token type 2, outside \[0, 2\)/],
      ['query of another task', () => engine.run({ miniBatches: [{ taskId: a!, queries: [{ ...good, taskId: fx.ids[1]! }] }] }), /is for task/],
      ['empty mini-batch', () => engine.run({ miniBatches: [{ taskId: a!, queries: [] }] }), /mini-batch 0 .* has no queries/],
      ['no mini-batch list', () => engine.run({} as never), /batch.miniBatches must be an array/],
      ['bad layout', () => engine.run({ miniBatches: [] }, { layout: 'sparse' as never }), /layout must be 'padded' or 'packed'/],
      ['bad streams', () => engine.run({ miniBatches: [] }, { scheduling: { mode: 'intensity', streams: 0 } }), /scheduling.streams must be a positive integer/],
      ['bad mode', () => engine.run({ miniBatches: [] }, { scheduling: { mode: 'fast' as never } }), /scheduling.mode must be one of/],
    );
  });

  it('throws a clear typed error for each bad input and leaves device memory and the engine as they were', () => {
    const [a] = fx.ids;
    const probe = queriesFor(a!, [8], vocab, 8);
    const before = engine.classify(probe);
    const inUse = allocatorStats().inUse;
    for (const [name, call, want] of cases) {
      expect(call, name).toThrow(want as never);
      expect(allocatorStats().inUse, name).toBe(inUse);
    }
    expect(Array.from(engine.classify(probe)[0]!.logits)).toEqual(Array.from(before[0]!.logits));
  });

  it('rejects input errors as InvalidArgumentError and task errors with the manager’s types', () => {
    const [a] = fx.ids;
    expect(() => engine.classify([{ taskId: a!, ids: [] }])).toThrow(InvalidArgumentError);
    expect(() => new PetEngine(fx.tasks, 'missing').classify([{ taskId: a!, ids: [1] }])).toThrow(UnknownSharedModelError);
    expect(() => new PetEngine(fx.tasks, '')).toThrow(/sharedModelTag must be a non-empty string/);
  });

  it('rejects a task of another shared model', () => {
    fx.tasks.addSharedModel('other', { dir: fx.dir });
    const id = fx.tasks.registerTask('bitfit', 'other', generatePetParams('bitfit', fx.shared.config, { seed: 4 }));
    fx.tasks.loadTasks([id]);
    try {
      expect(() => engine.classify([{ taskId: id, ids: [1, 2] }])).toThrow(/derives from shared model "other", not this engine's "bert-tiny"/);
    } finally {
      fx.tasks.unregisterTask(id);
      fx.tasks.unloadSharedModel('other');
    }
  });
});

/**
 * StepRunner executes plans: driven by hand-made plans (prefills first, then decodes, pages reserved on the
 * cache's allocator as a scheduler does) it produces exactly the greedy tokens of the old path (generateBatch, each
 * request alone), samples with each request's own seeded stream, stops on maxTokens / EOS, and fails only the rows
 * of an adapter a delta cannot resolve before the forward. Also: a PagedKvCache holding a range of layers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, type PlannedSequence, type StepPlan, type StepSegment } from '@tessera/core';
import { UnknownAdapterError } from '../src/errors.js';
import { generateBatch } from '../src/generate.js';
import { LoraDelta } from '../src/hooks/lora-delta.js';
import type { ModelDelta } from '../src/hooks/sites.js';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import { generateLoraAdapter, generateModel, loadDecoder, loadLoraAdapter } from '../src/index.js';
import { StepRunner } from '../src/runner/step-runner.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-runner-'));
const gen = generateModel(join(root, 'model'), { family: 'decoder', size: 'tiny', seed: 21, sharpen: 4 });
const model = loadDecoder(join(root, 'model'));
generateLoraAdapter(join(root, 'lora'), { base: gen.config, rank: 4, seed: 3 });
const lora = loadLoraAdapter(join(root, 'lora'), { base: model.config, name: 'lora' });
const delta = new LoraDelta(new Map([['lora', lora]]));
afterAll(() => {
  delta.dispose();
  lora.dispose();
  model.dispose();
  rmSync(root, { recursive: true, force: true });
});

interface Req {
  id: string;
  adapter: string | null;
  prompt: number[];
  maxTokens: number;
}

function segmentsOf(rows: readonly PlannedSequence[]): StepSegment[] {
  const out: StepSegment[] = [];
  let start = 0;
  for (const s of rows) {
    const last = out.at(-1);
    if (last && last.key === s.adapter) last.count += s.tokens.length;
    else out.push({ key: s.adapter, start, count: s.tokens.length });
    start += s.tokens.length;
  }
  return out;
}

/** A minimal continuous batcher: one prefill per step, then every running decode; pages reserved first. */
function drive(runner: StepRunner, cache: PagedKvCache, requests: readonly Req[]) {
  const queue = [...requests];
  const running: { r: Req; seqId: string; next: number }[] = [];
  const tokens = new Map<string, number[]>(requests.map((r) => [r.id, []]));
  const reasons = new Map<string, string>();
  for (const r of requests) runner.open({ id: r.id, maxTokens: r.maxTokens, ignoreEos: true });
  for (let step = 1; queue.length > 0 || running.length > 0; step++) {
    const rows: PlannedSequence[] = [];
    const joining = queue.shift();
    if (joining) {
      const seqId = `seq-${joining.id}`;
      cache.allocator.addSequence(seqId);
      cache.allocator.reserve(seqId, joining.prompt.length);
      rows.push({ requestId: joining.id, seqId, adapter: joining.adapter, kind: 'prefill', tokens: joining.prompt, position: 0 });
    }
    for (const s of running) {
      const position = cache.length(s.seqId);
      cache.allocator.reserve(s.seqId, position + 1);
      rows.push({ requestId: s.r.id, seqId: s.seqId, adapter: s.r.adapter, kind: 'decode', tokens: [s.next], position });
    }
    if (joining) running.push({ r: joining, seqId: `seq-${joining.id}`, next: -1 });
    const plan: StepPlan = { step, sequences: rows, segments: segmentsOf(rows), rows: rows.reduce((n, s) => n + s.tokens.length, 0), reserved: [], released: [] };
    const outcome = runner.run(plan);
    expect(outcome.ran).toBe(true);
    for (const res of outcome.results) {
      if (res.kind !== 'token') throw res.error;
      tokens.get(res.requestId)!.push(res.token);
      const s = running.find((x) => x.r.id === res.requestId)!;
      s.next = res.token;
      if (res.finish) {
        reasons.set(res.requestId, res.finish);
        cache.release(s.seqId);
        running.splice(running.indexOf(s), 1);
        runner.close(res.requestId);
      }
    }
  }
  return { tokens, reasons };
}

const prompt = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (salt * 13 + i * 7) % (model.config.vocabSize - 2));

describe('StepRunner', () => {
  it('gives the same greedy tokens as the old path (generateBatch, each request alone) under continuous batching', () => {
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 64 }, model.backend);
    const runner = new StepRunner({ model, cache, deltas: [delta] });
    const requests: Req[] = [
      { id: 'a', adapter: 'lora', prompt: prompt(7, 1), maxTokens: 9 },
      { id: 'b', adapter: null, prompt: prompt(20, 2), maxTokens: 5 },
      { id: 'c', adapter: 'lora', prompt: prompt(3, 3), maxTokens: 12 },
    ];
    const { tokens, reasons } = drive(runner, cache, requests);
    for (const r of requests) {
      const alone = PagedKvCache.create({ ...model.kvShape, numPages: 16 }, model.backend);
      const want = generateBatch(model, [{ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter }], { cache: alone, deltas: [delta] })[0]!.tokens;
      alone.dispose();
      expect(tokens.get(r.id)).toEqual(want);
      expect(reasons.get(r.id)).toBe('length');
    }
    expect(cache.usedPages).toBe(0);
    expect(runner.openRequests).toBe(0);
    cache.dispose();
  });

  it('fails only the rows of an adapter a delta cannot resolve before the forward; the rest run', () => {
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 16 }, model.backend);
    const strict: ModelDelta & { prepare(layout: { segments: readonly { key: string | null }[] }): void } = {
      prepare(layout) {
        if (layout.segments.some((s) => s.key === 'ghost')) throw new UnknownAdapterError('ghost');
      },
    };
    const runner = new StepRunner({ model, cache, deltas: [delta, strict] });
    const rows: PlannedSequence[] = [
      { requestId: 'g', seqId: 'g', adapter: 'ghost', kind: 'prefill', tokens: prompt(4, 5), position: 0 },
      { requestId: 'ok', seqId: 'ok', adapter: null, kind: 'prefill', tokens: prompt(5, 6), position: 0 },
    ];
    for (const s of rows) {
      cache.allocator.addSequence(s.seqId);
      cache.allocator.reserve(s.seqId, s.tokens.length);
      runner.open({ id: s.requestId, maxTokens: 4, ignoreEos: true });
    }
    const outcome = runner.run({ step: 1, sequences: rows, segments: segmentsOf(rows), rows: 9, reserved: [], released: [] });
    expect(outcome.excluded).toEqual(['g']);
    expect(outcome.rows).toBe(5);
    expect(outcome.results.map((r) => [r.kind, r.requestId])).toEqual([['failed', 'g'], ['token', 'ok']]);
    expect(cache.length('ok')).toBe(5);
    expect(cache.length('g')).toBe(0);
    cache.dispose();
  });

  it('logprobs: the sampled token and the top k under a float64 log-softmax of the same raw logits (direct forward)', () => {
    const tokens = prompt(6, 9);
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
    const runner = new StepRunner({ model, cache, deltas: [delta] });
    cache.allocator.addSequence('s');
    cache.allocator.reserve('s', tokens.length);
    runner.open({ id: 'r', maxTokens: 4, ignoreEos: true, sampling: { temperature: 0.8, seed: 5 }, logprobs: 5 });
    runner.open({ id: 'plain', maxTokens: 4, ignoreEos: true });
    const rows: PlannedSequence[] = [{ requestId: 'r', seqId: 's', adapter: 'lora', kind: 'prefill', tokens, position: 0 }];
    const [res] = runner.run({ step: 1, sequences: rows, segments: segmentsOf(rows), rows: tokens.length, reserved: [], released: [] }).results;
    if (res?.kind !== 'token') throw new Error('expected a token');

    const direct = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
    direct.addSequence('d');
    direct.reserve('d', tokens.length);
    const out = model.forward([{ id: 'd', tokens, key: 'lora' }], { cache: direct, deltas: [delta], logits: 'last' });
    const logits = Array.from(out.logits!.toArray() as Float32Array, Number);
    out.logits!.dispose();
    direct.dispose();
    const max = Math.max(...logits);
    const lse = max + Math.log(logits.reduce((sum, x) => sum + Math.exp(x - max), 0));
    const want = logits.map((x) => x - lse);
    expect(res.logprobs).toBeDefined();
    expect(Math.abs(res.logprobs!.logprob - want[res.token]!)).toBeLessThan(1e-4);
    const order = want.map((lp, id) => ({ id, lp })).sort((a, b) => b.lp - a.lp || a.id - b.id).slice(0, 5);
    expect(res.logprobs!.top.map((t) => t.token)).toEqual(order.map((o) => o.id));
    res.logprobs!.top.forEach((t, i) => expect(Math.abs(t.logprob - order[i]!.lp)).toBeLessThan(1e-4));
    expect(() => runner.open({ id: 'bad', maxTokens: 1, logprobs: 21 })).toThrow(/logprobs must be an integer from 0 to 20/);
    runner.close('r');
    runner.close('plain');
    cache.dispose();
  });

  it('prompt logprobs: a prefill mixed with another prefill gets every prompt row (entry 0 null), once; the other sequence is unchanged', () => {
    const a = prompt(5, 3);
    const b = prompt(7, 11);
    const run = (withPrompt: boolean) => {
      const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
      const runner = new StepRunner({ model, cache, deltas: [delta] });
      for (const [seq, t] of [['sa', a], ['sb', b]] as const) {
        cache.allocator.addSequence(seq);
        cache.allocator.reserve(seq, t.length);
      }
      runner.open({ id: 'a', maxTokens: 4, ignoreEos: true });
      runner.open({ id: 'b', maxTokens: 4, ignoreEos: true, sampling: withPrompt ? { promptLogprobs: 2 } : {} });
      const rows: PlannedSequence[] = [
        { requestId: 'a', seqId: 'sa', adapter: null, kind: 'prefill', tokens: a, position: 0 },
        { requestId: 'b', seqId: 'sb', adapter: 'lora', kind: 'prefill', tokens: b, position: 0 },
      ];
      const { results } = runner.run({ step: 1, sequences: rows, segments: segmentsOf(rows), rows: a.length + b.length, reserved: [], released: [] });
      runner.close('a');
      runner.close('b');
      cache.dispose();
      return results;
    };
    const plain = run(false);
    const withPrompt = run(true);
    expect(withPrompt.map((r) => (r.kind === 'token' ? r.token : null))).toEqual(plain.map((r) => (r.kind === 'token' ? r.token : null)));
    const [ra, rb] = withPrompt;
    if (ra?.kind !== 'token' || rb?.kind !== 'token') throw new Error('expected tokens');
    expect(ra.logprobs).toBeUndefined();
    const entries = rb.logprobs!.prompt!;
    expect(entries).toHaveLength(b.length);
    expect(entries[0]).toBeNull();

    // Direct: b's logits at every row.
    const direct = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
    direct.addSequence('d');
    direct.reserve('d', b.length);
    const out = model.forward([{ id: 'd', tokens: b, key: 'lora' }], { cache: direct, deltas: [delta], logits: 'all' });
    const all = out.logits!.toArray() as Float32Array;
    out.logits!.dispose();
    direct.dispose();
    const vocab = model.config.vocabSize;
    for (let i = 1; i < b.length; i++) {
      const row = Array.from(all.subarray((i - 1) * vocab, i * vocab), Number);
      const max = Math.max(...row);
      const lse = max + Math.log(row.reduce((sum, x) => sum + Math.exp(x - max), 0));
      expect(Math.abs(entries[i]!.logprob - (row[b[i]!]! - lse))).toBeLessThan(1e-4);
      expect(entries[i]!.top).toHaveLength(2);
    }
    // The first token's own logprobs come along (the object carrying the prompt's).
    expect(rb.logprobs!.logprob).toBeLessThanOrEqual(0);
  });

  it('open validates sampling and stop options, and replays generated tokens', () => {
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 4 }, model.backend);
    const runner = new StepRunner({ model, cache });
    expect(() => runner.open({ id: 'x', maxTokens: 3, stop: ['.'] })).toThrow(/decode function/);
    expect(() => runner.open({ id: 'x', maxTokens: 3, sampling: { temperature: -1 } })).toThrow();
    const eos = model.config.eosTokenIds[0]!;
    expect(() => runner.open({ id: 'x', maxTokens: 3, generated: [eos] })).toThrow(/already ends the request/);
    runner.open({ id: 'x', maxTokens: 3, generated: [1] });
    expect(() => runner.open({ id: 'x', maxTokens: 3 })).toThrow(InvalidArgumentError);
    expect(() => new StepRunner({ model, cache: PagedKvCache.create({ ...model.kvShape, numLayers: 1, numPages: 1 }, model.backend) })).toThrow(/does not fit/);
    cache.dispose();
  });
});

describe('PagedKvCache layer ranges', () => {
  it('a cache of layers [a, b) answers layer(j) for global j in [a, b) and refuses the others', () => {
    const shape = { numKvHeads: model.config.numKvHeads, headDim: model.config.headDim };
    const cache = PagedKvCache.create({ ...shape, numLayers: 2, firstLayer: 3, numPages: 2 }, model.backend);
    expect(cache.firstLayer).toBe(3);
    expect(cache.numLayers).toBe(2);
    expect(cache.layer(3).k.shape).toEqual([2, 16, shape.numKvHeads, shape.headDim]);
    expect(cache.layerRows(4).v).toBeDefined();
    for (const j of [0, 2, 5, 3.5]) expect(() => cache.layer(j)).toThrow(InvalidArgumentError);
    expect(() => cache.layer(5)).toThrow(/layer 5 is outside \[3, 5\)/);
    // A second block's cache on the same allocator: one page id covers every layer of both blocks.
    const rest = PagedKvCache.create({ ...shape, numLayers: 3, firstLayer: 0, allocator: cache.allocator }, model.backend);
    rest.addSequence('s');
    rest.reserve('s', 20);
    expect(cache.pages('s')).toEqual([0, 1]);
    expect(cache.freePages).toBe(0);
    expect(PagedKvCache.create({ ...shape, numLayers: 1, numPages: 1 }, model.backend).firstLayer).toBe(0);
    expect(() => PagedKvCache.create({ ...shape, numLayers: 1, firstLayer: -1, numPages: 1 }, model.backend)).toThrow(InvalidArgumentError);
    rest.dispose();
    cache.dispose();
  });
});

/**
 * The scheduler driving real engines in one process: EngineLoops (a batcher Scheduler + the engine's StepRunner, kvExhaustion 'evict') on a tiny
 * generated decoder with real PEFT adapters. Migration by recompute (T21) and a lost host must give the client
 * exactly the tokens an unmigrated greedy run gives, once each, in order.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type DecoderModel,
  LoraDelta,
  type LoraAdapter,
  PagedKvCache,
  StepRunner,
  generateBatch,
  generateLoraAdapter,
  generateModel,
  loadDecoder,
  loadLoraAdapter,
} from '@tessera/engine';
import { randomInts } from '@tessera/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { type ClientStream, EngineLoop, type GenerateRequest, InProcessCluster, batcherEngine } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-cluster-'));
const gen = generateModel(join(root, 'model'), { family: 'decoder', size: 'tiny', seed: 5, sharpen: 4 });
const model: DecoderModel = loadDecoder(join(root, 'model'));
const adapters = new Map<string, LoraAdapter>();
for (const name of ['a', 'b']) {
  const dir = join(root, name);
  generateLoraAdapter(dir, { base: gen.config, rank: 4, alpha: 8, targets: ['q_proj', 'v_proj', 'down_proj'], seed: name.charCodeAt(0) });
  adapters.set(name, loadLoraAdapter(dir, { base: model.config, name }));
}
const delta = new LoraDelta(adapters);
const caches: PagedKvCache[] = [];
afterAll(() => {
  for (const c of caches) c.dispose();
  delta.dispose();
  for (const a of adapters.values()) a.dispose();
  model.dispose();
  rmSync(root, { recursive: true, force: true });
});

function engine(numPages: number, maxBatch = 8) {
  const cache = PagedKvCache.create({ ...model.kvShape, numPages }, model.backend);
  caches.push(cache);
  const runner = new StepRunner({ model, cache, deltas: [delta] });
  const batcher = new EngineLoop({ runner, pages: cache.allocator, maxBatch, kvExhaustion: 'evict' });
  return { batcher, cache, engine: batcherEngine(batcher) };
}

const request = (id: string, adapter: string | null, seed: number, maxTokens = 40): GenerateRequest => ({
  id,
  adapter,
  prompt: Array.from(randomInts(10, seed, 0, model.config.vocabSize - 2)),
  maxTokens,
  sampling: {},
  stop: [],
  ignoreEos: true,
});

function alone(r: GenerateRequest): number[] {
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: 64 }, model.backend);
  try {
    return generateBatch(model, [{ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter }], { cache, deltas: [delta] })[0]!.tokens;
  } finally {
    cache.dispose();
  }
}

/** Steps every batcher round-robin until no stream is open. */
function drive(batchers: EngineLoop[], streams: ClientStream[], between?: (round: number) => void): void {
  for (let round = 0; streams.some((s) => !s.done); round++) {
    if (round > 10_000) throw new Error('no progress');
    for (const b of batchers) b.step();
    between?.(round);
  }
}

async function collect(stream: ClientStream): Promise<{ tokens: number[]; finish: number[] }> {
  const tokens: number[] = [];
  for await (const ev of stream) {
    if (ev.type === 'token') tokens.push(ev.token);
    else if (ev.type === 'finish') return { tokens, finish: ev.result.tokens };
    else throw ev.error;
  }
  throw new Error('stream ended without finish');
}

describe('InProcessCluster with real batchers', () => {
  it('migration on KV exhaustion (T21): the evicted request moves host, prefills prompt + generated, and the client gets the unmigrated tokens once each', async () => {
    const cluster = new InProcessCluster({ maxBatch: 8 });
    // h2 (the first choice: highest id) has 7 pages: four requests of 10 + 40 tokens need 4 pages each at the end.
    const small = engine(7);
    const big = engine(256);
    cluster.addHost('h1', big.engine);
    cluster.addHost('h2', small.engine);
    const evicted: { id: string; hostId: string; generated: number }[] = [];
    const placed: { id: string; hostId: string; attempt: number }[] = [];
    cluster.scheduler.on('evicted', (e) => evicted.push(e));
    cluster.scheduler.on('placed', (e) => placed.push(e));
    const requests = [request('r0', 'a', 1), request('r1', 'b', 2), request('r2', null, 3), request('r3', 'a', 4)];
    const streams = requests.map((r) => cluster.submit(r));
    drive([small.batcher, big.batcher], streams);
    const results = await Promise.all(streams.map(collect));

    expect(evicted.length).toBeGreaterThan(0);
    for (const e of evicted) {
      expect(e.hostId).toBe('h2');
      expect(e.generated).toBeGreaterThan(0);
      // The next placement of an evicted request is on the other host, as attempt 1.
      expect(placed.find((p) => p.id === e.id && p.attempt === 1)!.hostId).toBe('h1');
    }
    requests.forEach((r, i) => {
      const want = alone(r);
      expect(results[i]!.tokens).toEqual(want);
      expect(results[i]!.finish).toEqual(want);
    });
    expect(small.cache.freePages).toBe(7);
    expect(big.cache.freePages).toBe(256);
    expect(cluster.scheduler.snapshot().requests).toBe(0);
  });

  it('a lost host: its requests finish on another host from the tokens already delivered; the dead host is ignored', async () => {
    const cluster = new InProcessCluster({ maxBatch: 8 });
    const h1 = engine(256);
    const h2 = engine(256);
    cluster.addHost('h1', h1.engine);
    cluster.addHost('h2', h2.engine);
    const requests = [request('x0', 'a', 11, 24), request('x1', 'b', 12, 24), request('x2', null, 13, 24)];
    const streams = requests.map((r) => cluster.submit(r));
    expect(cluster.scheduler.snapshot().hosts.map((h) => h.batch)).toEqual([0, 3]);
    let lost: string[] = [];
    const alive = [h1.batcher, h2.batcher];
    drive(alive, streams, (round) => {
      if (round === 5) {
        // h2 "dies": it is stepped no more, and the cluster re-places its requests after 6 delivered tokens.
        alive.splice(alive.indexOf(h2.batcher), 1);
        lost = cluster.removeHost('h2');
      }
    });
    expect(lost).toEqual(['x0', 'x1', 'x2']);
    const results = await Promise.all(streams.map(collect));
    requests.forEach((r, i) => expect(results[i]!.tokens).toEqual(alone(r)));
    // Events the dead host's batcher emits later are dropped: step it once more, nothing changes.
    h2.batcher.step();
    expect(streams.every((s) => s.done)).toBe(true);
  });

  it('cancel (T22): a running request leaves its host and frees its KV; a queued one never runs; ids are idempotent', async () => {
    const cluster = new InProcessCluster({ maxBatch: 1 });
    const h = engine(64, 1);
    cluster.addHost('h', h.engine);
    const a = cluster.submit(request('a', null, 21, 30));
    expect(cluster.submit(request('a', null, 21, 30))).toBe(a);
    const b = cluster.submit(request('b', null, 22, 30));
    for (let i = 0; i < 3; i++) h.batcher.step();
    expect(cluster.cancel('b')).toBe(true);
    expect(cluster.cancel('a')).toBe(true);
    expect(cluster.cancel('a')).toBe(false);
    const ra = await a.result();
    const rb = await b.result();
    expect(ra.finishReason).toBe('cancelled');
    expect(ra.tokens.length).toBe(3);
    expect(rb).toMatchObject({ finishReason: 'cancelled', tokens: [] });
    expect(h.cache.freePages).toBe(64);
    expect(h.batcher.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it('an engine that refuses a placement (token outside the vocabulary) ends that stream with the typed error only', async () => {
    const cluster = new InProcessCluster();
    const h = engine(64);
    cluster.addHost('h', h.engine);
    const bad = cluster.submit({ ...request('bad', null, 1), prompt: [model.config.vocabSize + 5] });
    const good = cluster.submit(request('good', null, 2, 6));
    await expect(bad.result()).rejects.toMatchObject({ code: 'TESSERA_TOKEN_OUT_OF_VOCAB' });
    drive([h.batcher], [good]);
    expect((await good.result()).tokens).toEqual(alone(request('good', null, 2, 6)));
  });
});

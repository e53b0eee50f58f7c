/**
 * Evicting an instance that live sequences use (design note §4.4: their KV moves with them), on two devices that
 * can each hold the whole zoo, each block instance's KV cache 8 pages of 16 tokens: an `evict` job moves the running
 * sequences routed through the instance to another instance of its block (a replica), their committed K/V copied
 * over and their routes rewritten, so long greedy requests keep the tokens they give alone; when the other
 * instance's cache cannot take that KV, or when no other instance exists, the job is refused with a 409 and the
 * request is unaffected. A `place` job does the same for the instances it removes.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FOUNDATION, makeFixture, serve } from './support/fixture.js';
import { type JobBody, placementJob, type PlacementBody } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
// maxQueueLen 1: a new sequence's first hop leaves an instance another sequence runs through for an idle replica
// (algorithm 5.4), so the tests know where their sequences run; adaptive serving off: every route is the chain's own.
// One cohort (the cases below reason about one lockstep step at a time) and no variant batching: the KV room
// checked below is each instance's own 8 pages (a variant group's shared cache has 8 per variant of the block).
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 3_000_000, kvPages: 8, maxQueueLen: 1, adaptive: false, cohorts: 1, variantBatching: false })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const placement = async () => (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
const other = (d: string) => (d === 'device-0' ? 'device-1' : 'device-0');
const promptOf = (n: number, seed: number) => Array.from({ length: n }, (_, t) => (41 * seed + 13 * t + 7) % 900);
const submit = (id: string, model: string, prompt: number[], maxTokens: number) =>
  app.engine.submit({ request: { id, adapter: model, prompt, maxTokens, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] });

/** Polls a job (submitted straight to the engine) until it completed or failed. */
async function settled(id: string): Promise<JobBody> {
  for (;;) {
    const s = (await (await fetch(`${url}/v1/placement/jobs/${id}`)).json()) as JobBody;
    if (s.state === 'completed' || s.state === 'failed') return s;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A replica of every block of the foundation's chain on the device that has no instance of it yet. */
async function replicateFoundation(): Promise<void> {
  const p = await placement();
  for (const key of p.chains.find((c) => c.app === FOUNDATION)!.instances) {
    const block = p.instances.find((i) => i.instance === key)!.block;
    const on = p.instances.filter((i) => i.block === block).map((i) => i.device);
    if (on.length > 1) continue;
    const job = await placementJob(url, { kind: 'deploy', block, device: other(on[0]!) });
    expect(job.state, JSON.stringify(job)).toBe('completed');
  }
}

/** Per instance, the sequences routed through it since `before` (GET /v1/placement's `routed`). */
const routedSince = (before: PlacementBody, now: PlacementBody) => new Map(now.instances.map((i) => [i.instance, i.routed - (before.instances.find((b) => b.instance === i.instance)?.routed ?? 0)]));

describe('evicting an instance in use', () => {
  it("refuses with a 409 when the other instance's KV cache cannot take the sequences, and changes nothing", async () => {
    // The foundation's chain on both devices; B (70 + 48 tokens: 5 to 8 pages) runs through one instance of each
    // block, then A (50 + 30 tokens: 4 to 5 pages) through the others (maxQueueLen 1). Evicting one of A's attention
    // instances would move its 4 pages into the instance B fills (3 pages free at most).
    const promptB = promptOf(70, 1);
    const promptA = promptOf(50, 2);
    const aloneB = await app.engine.call('alone', { app: FOUNDATION, prompt: promptB, maxTokens: 48 });
    const aloneA = await app.engine.call('alone', { app: FOUNDATION, prompt: promptA, maxTokens: 30 });
    await replicateFoundation();
    const b = submit('room-b', FOUNDATION, promptB, 48);
    let a: Promise<number[]> | null = null;
    let refusal: { status: number; message: string } | null = null;
    let tokensB: number[] = [];
    let seen = 0;
    for await (const ev of b) {
      if (ev.type === 'token' && ++seen === 1) {
        const before = await placement();
        a = (async () => {
          let tokens: number[] = [];
          let k = 0;
          for await (const e of submit('room-a', FOUNDATION, promptA, 30)) {
            if (e.type === 'token' && ++k === 2) {
              const now = await placement();
              const used = routedSince(before, now);
              const attn = now.instances.find((i) => i.label.startsWith('attn') && used.get(i.instance)! > 0);
              expect(attn, JSON.stringify(now.instances)).toBeDefined();
              const r = await fetch(`${url}/v1/placement/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'evict', block: attn!.instance }) });
              refusal = { status: r.status, message: ((await r.json()) as { error: { message: string } }).error?.message ?? '' };
              expect((await placement()).instances.some((i) => i.instance === attn!.instance)).toBe(true);
            } else if (e.type === 'finish') tokens = e.result.tokens;
            else if (e.type === 'error') throw e.error;
          }
          return tokens;
        })();
      } else if (ev.type === 'finish') tokensB = ev.result.tokens;
      else if (ev.type === 'error') throw ev.error;
    }
    expect(await a!).toEqual(aloneA);
    expect(tokensB).toEqual(aloneB);
    expect(refusal, JSON.stringify(refusal)).not.toBeNull();
    expect(refusal!.status).toBe(409);
    expect(refusal!.message).toMatch(/hold 4 KV page\(s\) there, more than any other instance of its block has free \(.*: [0-3]\)/);
  });

  it('moves the running sequences to a replica with their KV: long requests keep their tokens, the job counts them', async () => {
    await replicateFoundation();
    const M = 40; // 8 + 40 tokens: 3 pages each, so both fit one instance's 8 pages after a move
    const prompts = [promptOf(8, 3), promptOf(8, 4)];
    const alone = await Promise.all(prompts.map((prompt) => app.engine.call('alone', { app: FOUNDATION, prompt, maxTokens: M })));
    const before = await placement();
    const chain = before.chains.find((c) => c.app === FOUNDATION)!.instances.map((k) => before.instances.find((i) => i.instance === k)!.block);
    const jobs: Promise<{ id: string }>[] = [];
    const evicted: { instance: string; block: string }[] = [];
    let second: Promise<number[]> | null = null;
    let first: number[] = [];
    let seen = 0;
    for await (const ev of submit('move-0', FOUNDATION, prompts[0]!, M)) {
      if (ev.type === 'token' && ++seen === 1) second = submit('move-1', FOUNDATION, prompts[1]!, M).result().then((r) => r.tokens);
      else if (ev.type === 'token' && seen === 3) {
        // Both are routed now: for each block of the chain, one instance that a running sequence uses is evicted
        // (straight to the engine, so the jobs run between the next steps).
        const now = await placement();
        const used = routedSince(before, now);
        for (const block of chain) {
          const inUse = now.instances.find((i) => i.block === block && used.get(i.instance)! > 0)!;
          evicted.push({ instance: inUse.instance, block });
          jobs.push(app.engine.call('placementSubmit', { kind: 'evict', block: inUse.instance }));
        }
      } else if (ev.type === 'finish') first = ev.result.tokens;
      else if (ev.type === 'error') throw ev.error;
    }
    expect([first, await second!]).toEqual(alone);
    const results = await Promise.all(jobs.map(async (j) => settled((await j).id)));
    let pages = 0;
    const after = await placement();
    results.forEach((s, k) => {
      expect(s.state, JSON.stringify(s)).toBe('completed');
      const r = s.result as { evicted: string[]; movedTo: string; movedSequences: number; kvPages: number };
      const { instance, block } = evicted[k]!;
      expect(r.evicted).toEqual([instance]);
      // The sequences went to the block's other instance, which stays; the evicted one is gone.
      expect(r.movedSequences, JSON.stringify(r)).toBeGreaterThan(0);
      expect(r.movedTo).not.toBe(instance);
      expect(after.instances.find((i) => i.instance === r.movedTo)?.block).toBe(block);
      expect(after.instances.some((i) => i.instance === instance)).toBe(false);
      pages += r.kvPages;
    });
    // The attention blocks' instances held the sequences' KV, and its pages moved.
    expect(pages).toBeGreaterThan(0);
    expect((await submit('after-move', FOUNDATION, prompts[0]!, M).result()).tokens).toEqual(alone[0]);
  });

  it('refuses with a 409 to evict the only instance a running sequence uses, and the request keeps its tokens', async () => {
    const M = 40;
    const prompt = promptOf(8, 5);
    const alone = await app.engine.call('alone', { app: 'persona', prompt, maxTokens: M });
    // persona's prefix attention block serves persona alone: one instance.
    const p = await placement();
    const only = p.chains.find((c) => c.app === 'persona')!.instances.map((k) => p.instances.find((i) => i.instance === k)!).find((i) => i.label.endsWith('+prefix'))!;
    expect(p.instances.filter((i) => i.block === only.block)).toHaveLength(1);
    let refusal: { status: number; message: string } | null = null;
    let tokens: number[] = [];
    let seen = 0;
    for await (const ev of submit('only', 'persona', prompt, M)) {
      if (ev.type === 'token' && ++seen === 2) {
        const r = await fetch(`${url}/v1/placement/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'evict', block: only.instance }) });
        refusal = { status: r.status, message: ((await r.json()) as { error: { message: string } }).error?.message ?? '' };
      } else if (ev.type === 'finish') tokens = ev.result.tokens;
      else if (ev.type === 'error') throw ev.error;
    }
    expect(tokens).toEqual(alone);
    expect(refusal!.status, refusal!.message).toBe(409);
    expect(refusal!.message).toMatch(/holds the KV of 1 running sequence\(s\) and is the only instance of block/);
    expect(refusal!.message).toMatch(/migrate job moves the instance/);
    expect((await placement()).instances.some((i) => i.instance === only.instance)).toBe(true);
    // Idle again, it evicts (nothing to move).
    const done = await placementJob(url, { kind: 'evict', block: only.instance });
    expect(done.state).toBe('completed');
    expect(done.result).toMatchObject({ evicted: [only.instance], movedTo: null, movedSequences: 0, kvPages: 0 });
  });

  it('re-places with running sequences: those on a removed replica move to the kept instance; a removed only instance is a 409', async () => {
    // Idle, the placement leaves one instance per block, keyed by the block, where the policy puts it; then the
    // foundation's chain gets replicas on the other device again, which a re-placement removes.
    expect((await placementJob(url, { kind: 'place' })).state).toBe('completed');
    await replicateFoundation();
    const M = 40;
    const prompts = [promptOf(8, 6), promptOf(8, 7)];
    const alone = await Promise.all(prompts.map((prompt) => app.engine.call('alone', { app: FOUNDATION, prompt, maxTokens: M })));
    const before = await placement();
    let job: Promise<{ id: string }> | null = null;
    let second: Promise<number[]> | null = null;
    let first: number[] = [];
    let seen = 0;
    // The re-placement is submitted once the second sequence has its first token: it is routed by then (the events
    // reach the test late under load, so a count of the first sequence's tokens does not tell).
    const secondRun = async (): Promise<number[]> => {
      let tokens: number[] = [];
      for await (const ev of submit('place-1', FOUNDATION, prompts[1]!, M)) {
        if (ev.type === 'token' && job === null) job = app.engine.call('placementSubmit', { kind: 'place' });
        else if (ev.type === 'finish') tokens = ev.result.tokens;
        else if (ev.type === 'error') throw ev.error;
      }
      return tokens;
    };
    for await (const ev of submit('place-0', FOUNDATION, prompts[0]!, M)) {
      // The second sequence routes to the replicas (the first one's instances are taken: maxQueueLen 1).
      if (ev.type === 'token' && ++seen === 1) second = secondRun();
      else if (ev.type === 'finish') first = ev.result.tokens;
      else if (ev.type === 'error') throw ev.error;
    }
    expect([first, await second!]).toEqual(alone);
    const s = await settled((await job!).id);
    expect(s.state, JSON.stringify(s)).toBe('completed');
    const r = s.result as { evicted: string[]; movedSequences: number; kvPages: number };
    const replicas = before.instances.filter((i) => i.instance.includes('@')).map((i) => i.instance);
    expect(replicas.length).toBeGreaterThan(0);
    expect([...r.evicted].sort()).toEqual([...replicas].sort());
    expect(r.movedSequences).toBeGreaterThan(0);
    expect(r.kvPages).toBeGreaterThan(0);
    expect((await placement()).instances.some((i) => i.instance.includes('@'))).toBe(false);

    // An instance moved off its planned device (idle: a migration) and used by a running sequence: the re-placement
    // would remove the block's only instance, so it is refused with a 409 and nothing changes.
    const p = await placement();
    const key = p.chains.find((c) => c.app === FOUNDATION)!.instances.map((k) => p.instances.find((i) => i.instance === k)!).find((i) => i.label.startsWith('attn'))!;
    expect((await placementJob(url, { kind: 'migrate', block: key.instance, device: other(key.device) })).state).toBe('completed');
    let refusal: { status: number; message: string } | null = null;
    let tokens: number[] = [];
    seen = 0;
    for await (const ev of submit('place-only', FOUNDATION, prompts[0]!, M)) {
      if (ev.type === 'token' && ++seen === 2) {
        const res = await fetch(`${url}/v1/placement/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'place' }) });
        refusal = { status: res.status, message: ((await res.json()) as { error: { message: string } }).error?.message ?? '' };
      } else if (ev.type === 'finish') tokens = ev.result.tokens;
      else if (ev.type === 'error') throw ev.error;
    }
    expect(tokens).toEqual(alone[0]);
    expect(refusal!.status, refusal!.message).toBe(409);
    expect(refusal!.message).toMatch(new RegExp(`instance ${key.instance} holds the KV of 1 running sequence\\(s\\) and is the only instance of block`));
    expect((await placement()).instances.find((i) => i.instance === key.instance)!.device).toBe(other(key.device));
    // Idle, the re-placement puts it back.
    expect((await placementJob(url, { kind: 'place' })).state).toBe('completed');
    expect((await placement()).instances.find((i) => i.instance === key.instance)!.device).toBe(key.device);
  });
});

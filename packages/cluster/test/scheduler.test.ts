/**
 * PunicaScheduler under a virtual clock with scripted hosts (T19–T23): every decision is checked against the
 * rules of punica.md §7 / §9.7, with no engine, no Redis and no wall clock.
 */
import { describe, expect, it } from 'vitest';
import { type EngineHost, type GenerateRequest, type HostEvent, type HostLoad, type Placement, PunicaScheduler } from '../src/index.js';

class VirtualClock {
  t = 0;
  now(): number {
    return this.t;
  }
}

/** A host whose load is whatever the test says; it records the scheduler's calls. */
class ScriptedHost implements EngineHost {
  readonly adds: Placement[] = [];
  readonly cancels: { id: string; attempt: number }[] = [];
  reported: Omit<HostLoad, 'hostId' | 'requests'> & { requests: { id: string; attempt: number }[] };
  constructor(
    readonly id: string,
    kvPages: number,
    maxBatch = 32,
  ) {
    this.reported = { maxBatch, kvPages, pageTokens: 16, freeKvPages: kvPages, requests: [], adapters: [], residentAdapters: [], steps: 0, tokens: 0, at: 0 };
  }
  add(p: Placement): void {
    this.adds.push(p);
  }
  cancel(id: string, attempt: number): void {
    this.cancels.push({ id, attempt });
  }
  load(): HostLoad {
    return { hostId: this.id, ...this.reported };
  }
  /** The host admitted everything it was given: its report now includes them and their pages. */
  admitAll(pagesEach: number): void {
    const live = this.adds.filter((p) => !this.cancels.some((c) => c.id === p.request.id));
    this.reported.requests = live.map((p) => ({ id: p.request.id, attempt: p.attempt }));
    this.reported.freeKvPages = this.reported.kvPages - pagesEach * live.length;
  }
}

const req = (id: string, promptLength = 10): GenerateRequest => ({
  id,
  adapter: null,
  prompt: Array.from({ length: promptLength }, (_, i) => i + 1),
  maxTokens: 8,
  sampling: {},
  stop: [],
  ignoreEos: true,
});

const finish = (id: string, attempt = 0): HostEvent => ({
  kind: 'finish',
  id,
  attempt,
  result: { id, tokens: [], text: '', finishReason: 'length', promptTokens: 10, completionTokens: 0 },
});

function setup(hosts: [string, number, number?][], options: { maxBatch?: number; idleReleaseMs?: number; lightlyLoadedFraction?: number } = {}) {
  const clock = new VirtualClock();
  const scheduler = new PunicaScheduler({ clock, ...options });
  const placed: { id: string; hostId: string; attempt: number; migrated: boolean }[] = [];
  scheduler.on('placed', (e) => placed.push(e));
  const byId = new Map<string, ScriptedHost>();
  for (const [id, kv, cap] of hosts) {
    const h = new ScriptedHost(id, kv, cap);
    byId.set(id, h);
    scheduler.addHost(h);
  }
  return { clock, scheduler, placed, host: (id: string) => byId.get(id)! };
}

describe('PunicaScheduler: placement (T19)', () => {
  it('fills the highest id first, then stacks on the largest batch below the cap, then the next host', () => {
    const { scheduler, placed } = setup([['gpu-1', 100, 2], ['gpu-3', 100, 2], ['gpu-2', 100, 2]]);
    for (let i = 0; i < 6; i++) scheduler.submit(req(`r${i}`));
    expect(placed.map((p) => p.hostId)).toEqual(['gpu-3', 'gpu-3', 'gpu-2', 'gpu-2', 'gpu-1', 'gpu-1']);
    expect(scheduler.queued).toBe(0);
  });

  it('a busier host wins over a higher id; a host at the cap or without KV room is skipped', () => {
    const { scheduler, placed, host } = setup([['a', 100], ['b', 100], ['c', 2]]);
    host('c').reported.freeKvPages = 1;
    scheduler.submit(req('x0'));
    // 'c' (highest id) has one free page: a 10-token prompt needs pages(10 + 1) = 1 → it fits once.
    expect(placed[0]!.hostId).toBe('c');
    host('c').admitAll(1);
    host('c').reported.freeKvPages = 0;
    scheduler.submit(req('x1'));
    // 'c' has no page left → skipped; tie between a and b (batch 0) → b.
    expect(placed[1]!.hostId).toBe('b');
    scheduler.submit(req('x2'));
    // b now has the largest batch among hosts with room.
    expect(placed[2]!.hostId).toBe('b');
    // A 40-token prompt needs 3 pages: unplaced KV of this scheduler is subtracted from b's reported free pages.
    host('a').reported.freeKvPages = 2;
    host('b').reported.freeKvPages = 4; // minus x1 and x2 (1 page each, not reported yet) = 2 < 3
    scheduler.submit(req('big', 40));
    expect(placed.at(-1)!.id).toBe('x2');
    expect(scheduler.queued).toBe(1);
  });

  it('queues when nothing fits and dequeues strictly FCFS as capacity frees; a newcomer never overtakes', () => {
    const { scheduler, placed } = setup([['h', 100, 2]]);
    for (const id of ['a', 'b', 'c', 'd', 'e']) scheduler.submit(req(id));
    expect(placed.map((p) => p.id)).toEqual(['a', 'b']);
    expect(scheduler.snapshot().queue).toEqual(['c', 'd', 'e']);
    scheduler.onHostEvent('h', finish('b'));
    expect(placed.map((p) => p.id)).toEqual(['a', 'b', 'c']);
    scheduler.onHostEvent('h', finish('a'));
    scheduler.onHostEvent('h', finish('c'));
    expect(placed.map((p) => p.id)).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  it('a head that does not fit blocks the queue (strict FCFS), even if a later request would fit', () => {
    const { scheduler, placed, host } = setup([['h', 4, 8]]);
    scheduler.submit(req('small0'));
    host('h').admitAll(1);
    host('h').reported.freeKvPages = 1;
    scheduler.submit(req('big', 40)); // needs 3 pages: queued
    scheduler.submit(req('small1')); // would fit 1 page, but waits behind 'big'
    expect(placed.map((p) => p.id)).toEqual(['small0']);
    expect(scheduler.snapshot().queue).toEqual(['big', 'small1']);
    host('h').reported.freeKvPages = 3;
    scheduler.capacityChanged();
    // 'big' takes the 3 pages; 'small1' would need one more than is left once big's are counted.
    expect(placed.map((p) => p.id)).toEqual(['small0', 'big']);
    host('h').reported.freeKvPages = 4;
    scheduler.capacityChanged();
    expect(placed.map((p) => p.id)).toEqual(['small0', 'big', 'small1']);
  });

  it('a host whose whole cache could never hold the request is not a candidate (hosts with different budgets)', () => {
    const { scheduler, placed } = setup([['small', 4], ['big', 64]]);
    // 10 prompt + 100 tokens need pages(109) = 7 pages at the end: more than 'small' has in all, though 'small'
    // (the lower id) would otherwise lose only the tie; here the request must go to 'big' whatever the ids.
    scheduler.submit({ ...req('long'), maxTokens: 100 });
    expect(placed.map((p) => p.hostId)).toEqual(['big']);
    scheduler.submit(req('short'));
    expect(placed.at(-1)!.hostId).toBe('big');
  });

  it('submit is idempotent by request id; events of unknown requests, other hosts and old attempts are ignored', () => {
    const { scheduler, placed, host } = setup([['h1', 100], ['h2', 100]]);
    expect(scheduler.submit(req('r'))).toBe(true);
    expect(scheduler.submit(req('r'))).toBe(false);
    expect(placed).toHaveLength(1);
    scheduler.onHostEvent('h1', finish('r')); // wrong host
    scheduler.onHostEvent('h2', finish('r', 3)); // wrong attempt
    scheduler.onHostEvent('h2', finish('nobody'));
    expect(scheduler.locate('r')).toEqual({ hostId: 'h2', attempt: 0, generated: 0 });
    expect(host('h2').adds).toHaveLength(1);
  });

  it('a host without a load yet takes nothing; adding a host drains the queue', () => {
    const clock = new VirtualClock();
    const scheduler = new PunicaScheduler({ clock });
    scheduler.submit(req('early'));
    expect(scheduler.queued).toBe(1);
    const silent: EngineHost = { id: 'z', add: () => {}, cancel: () => {}, load: () => null };
    scheduler.addHost(silent);
    expect(scheduler.queued).toBe(1);
    const h = new ScriptedHost('a', 10);
    scheduler.addHost(h);
    expect(scheduler.queued).toBe(0);
    expect(h.adds.map((p) => p.request.id)).toEqual(['early']);
  });
});

describe('PunicaScheduler: migration and host loss (T21)', () => {
  it('an evicted request is placed again like a new one on another host, continuing after its generated tokens', () => {
    const { scheduler, placed, host } = setup([['h1', 100], ['h2', 100]]);
    scheduler.submit(req('old'));
    scheduler.submit(req('new'));
    expect(placed.map((p) => p.hostId)).toEqual(['h2', 'h2']);
    const evictions: unknown[] = [];
    scheduler.on('evicted', (e) => evictions.push(e));
    scheduler.onHostEvent('h2', { kind: 'evicted', id: 'new', attempt: 0, generated: [7, 8, 9] });
    expect(evictions).toEqual([{ id: 'new', hostId: 'h2', attempt: 0, generated: 3, at: 0 }]);
    const again = host('h1').adds.at(-1)!;
    expect(again).toEqual({ request: req('new'), generated: [7, 8, 9], attempt: 1 });
    expect(placed.at(-1)).toMatchObject({ id: 'new', hostId: 'h1', attempt: 1, migrated: true });
    // Late events of attempt 0 on h2 are ignored; attempt 1 on h1 finishes it.
    scheduler.onHostEvent('h2', finish('new', 0));
    expect(scheduler.locate('new')).toEqual({ hostId: 'h1', attempt: 1, generated: 3 });
    scheduler.onHostEvent('h1', finish('new', 1));
    expect(scheduler.locate('new')).toBeNull();
  });

  it('with a single host the evicted request may go back to it; with no room it queues and keeps its tokens', () => {
    const { scheduler, host } = setup([['only', 2, 4]]);
    scheduler.submit(req('a'));
    host('only').admitAll(1);
    host('only').reported.freeKvPages = 0;
    scheduler.onHostEvent('only', { kind: 'evicted', id: 'a', attempt: 0, generated: [5] });
    expect(scheduler.snapshot().queue).toEqual(['a']);
    host('only').reported.requests = [];
    host('only').reported.freeKvPages = 2;
    scheduler.capacityChanged();
    expect(host('only').adds.at(-1)).toEqual({ request: req('a'), generated: [5], attempt: 1 });
  });

  it('a lost host: its requests are placed again from the tokens their clients have, in arrival order', () => {
    const { scheduler, host } = setup([['h1', 100], ['h2', 100]]);
    for (const id of ['a', 'b', 'c']) scheduler.submit(req(id));
    const lost: unknown[] = [];
    scheduler.on('host-lost', (e) => lost.push(e));
    const have: Record<string, number[]> = { a: [1], b: [], c: [4, 5] };
    expect(scheduler.removeHost('h2', (id) => have[id]!)).toEqual(['a', 'b', 'c']);
    expect(lost).toEqual([{ hostId: 'h2', requests: ['a', 'b', 'c'], at: 0 }]);
    expect(host('h1').adds.map((p) => [p.request.id, p.generated, p.attempt])).toEqual([
      ['a', [1], 1],
      ['b', [], 1],
      ['c', [4, 5], 1],
    ]);
    expect(scheduler.hostIds()).toEqual(['h1']);
  });
});

describe('PunicaScheduler: cancellation (T22) and elasticity (T20, T23)', () => {
  it('cancelling a placed request tells its host and frees its slot; cancelling a queued one removes it', () => {
    const { scheduler, placed, host } = setup([['h', 100, 1]]);
    scheduler.submit(req('a'));
    scheduler.submit(req('b'));
    scheduler.submit(req('c'));
    expect(scheduler.cancel('b')).toBe(true);
    expect(scheduler.snapshot().queue).toEqual(['c']);
    expect(scheduler.cancel('a')).toBe(true);
    expect(host('h').cancels).toEqual([{ id: 'a', attempt: 0 }]);
    expect(placed.map((p) => p.id)).toEqual(['a', 'c']);
    expect(scheduler.cancel('a')).toBe(false);
    expect(scheduler.snapshot().requests).toBe(1);
  });

  it('consolidates: under a ramp-down lightly loaded hosts drain to zero and stay idle; arrivals go to busy hosts', () => {
    const { scheduler, placed } = setup([['g1', 1000, 4], ['g2', 1000, 4], ['g3', 1000, 4]]);
    for (let i = 0; i < 12; i++) scheduler.submit(req(`r${i}`));
    expect(scheduler.snapshot().hosts.map((h) => h.batch)).toEqual([4, 4, 4]);
    // Ramp-down: g1's requests finish one by one, and so does one request elsewhere.
    for (const p of placed.filter((x) => x.hostId === 'g1')) scheduler.onHostEvent('g1', finish(p.id));
    scheduler.onHostEvent('g3', finish(placed.find((p) => p.hostId === 'g3')!.id));
    // A trickle of new arrivals: each goes to a busy host (g2 at 4 is full → g3 at 3), never to the idle g1.
    scheduler.submit(req('late0'));
    expect(placed.at(-1)!.hostId).toBe('g3');
    scheduler.onHostEvent('g2', finish(placed.find((p) => p.hostId === 'g2')!.id));
    scheduler.submit(req('late1'));
    expect(placed.at(-1)!.hostId).toBe('g2');
    expect(scheduler.snapshot().hosts.map((h) => [h.id, h.batch])).toEqual([['g1', 0], ['g2', 4], ['g3', 4]]);
  });

  it('autoscale: needHost when no host is lightly loaded or requests queue; releasable after the idle delay', () => {
    const { clock, scheduler, placed } = setup([['g1', 1000, 4], ['g2', 1000, 4]], { idleReleaseMs: 1000, lightlyLoadedFraction: 0.5 });
    expect(scheduler.autoscale()).toEqual({ needHost: false, releasable: [], lightlyLoaded: ['g1', 'g2'] });
    for (let i = 0; i < 6; i++) scheduler.submit(req(`r${i}`));
    // g2 at 4 (full), g1 at 2 (not < 0.5 × 4): nobody is lightly loaded → ask for a host.
    expect(scheduler.autoscale()).toMatchObject({ needHost: true, lightlyLoaded: [] });
    for (const p of placed.filter((x) => x.hostId === 'g1')) scheduler.onHostEvent('g1', finish(p.id));
    clock.t = 999;
    expect(scheduler.autoscale()).toEqual({ needHost: false, releasable: [], lightlyLoaded: ['g1'] });
    clock.t = 1000;
    expect(scheduler.autoscale().releasable).toEqual(['g1']);
    scheduler.submit(req('more'));
    expect(placed.at(-1)!.hostId).toBe('g1'); // g2 is full: g1 takes it and is no longer releasable
    expect(scheduler.autoscale().releasable).toEqual([]);
  });

  it('rejects bad options with a typed error', () => {
    expect(() => new PunicaScheduler({ maxBatch: 0 })).toThrow(expect.objectContaining({ code: 'TESSERA_CLUSTER_INVALID_ARGUMENT' }));
    expect(() => new PunicaScheduler({ lightlyLoadedFraction: 0 })).toThrow(/lightlyLoadedFraction/);
    const s = new PunicaScheduler();
    s.addHost(new ScriptedHost('x', 1));
    expect(() => s.addHost(new ScriptedHost('x', 1))).toThrow(/already added/);
  });
});

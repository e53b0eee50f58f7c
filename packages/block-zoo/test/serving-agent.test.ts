import { type Clock, mulberry32, type Random } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import {
  type AgentArrival,
  type AgentBatchPlan,
  BlockAgent,
  type BlockBytes,
  type ComputeProfile,
  computeMs,
  packRows,
  type QueuedRow,
  ServingCapacityError,
  ServingInvalidError,
  ServingStateError,
} from '../src/planner/index.js';

class ManualClock implements Clock {
  t = 0;
  now(): number {
    return this.t;
  }
}

const block = (id: string, kv = 8, act = 4): BlockBytes => ({ blockId: id, paramBytes: 1000, kvBytesPerToken: kv, activationBytesPerToken: act });
const arrival = (requestId: string, tokens = 1, contextTokens = 0, iteration = 0, position = 0): AgentArrival => ({ requestId, tokens, contextTokens, iteration, position });

describe('BlockAgent: loose per-block batching (design note §4.2, 5.6)', () => {
  it('with maxBatch 8 and 5 + 4 queued runs 8, then 1 (behaviour 13)', () => {
    const clock = new ManualClock();
    const agent = new BlockAgent({ instance: 'i0', block: block('b'), clock, maxBatch: 8, memoryBytes: 1e9 });
    agent.arrive([1, 2, 3, 4, 5].map((i) => arrival(`a${i}`)));
    agent.arrive([1, 2, 3, 4].map((i) => arrival(`b${i}`)));
    const first = agent.plan()!;
    expect(first.rows.map((r) => r.requestId)).toEqual(['a1', 'a2', 'a3', 'a4', 'a5', 'b1', 'b2', 'b3']);
    expect(agent.plan()).toBeNull(); // the engine is busy
    agent.complete(first.planId);
    const second = agent.plan()!;
    expect(second.rows.map((r) => r.requestId)).toEqual(['b4']);
    agent.complete(second.planId);
    expect(agent.plan()).toBeNull();
  });

  it('runs an arriving batch at once on an empty, free instance; different blocks keep different limits', () => {
    const clock = new ManualClock();
    const small = new BlockAgent({ instance: 's', block: block('x'), clock, maxBatch: 2, memoryBytes: 1e9 });
    const large = new BlockAgent({ instance: 'l', block: block('y'), clock, maxBatch: 16, memoryBytes: 1e9 });
    const rows = [1, 2, 3].map((i) => arrival(`r${i}`));
    small.arrive(rows);
    large.arrive(rows);
    expect(small.plan()!.rows).toHaveLength(2);
    expect(large.plan()!.rows).toHaveLength(3);
  });

  it('serves RETURNING before NEW, FIFO within each class (behaviour 14)', () => {
    const clock = new ManualClock();
    const agent = new BlockAgent({ instance: 'i', block: block('b'), clock, maxBatch: 3, memoryBytes: 1e9 });
    agent.arrive([arrival('old1', 4), arrival('old2', 4)]);
    const p = agent.plan()!;
    agent.complete(p.planId, [{ requestId: 'old1', finished: false, returnInMs: 5 }, { requestId: 'old2', finished: false, returnInMs: 5 }]);
    clock.t = 1;
    agent.arrive([arrival('new1', 2), arrival('new2', 2)]);
    clock.t = 2;
    agent.arrive([arrival('old2', 1, 4, 1), arrival('old1', 1, 4, 1)]);
    expect(agent.queue().map((r) => [r.requestId, r.cls])).toEqual([['old2', 'returning'], ['old1', 'returning'], ['new1', 'new'], ['new2', 'new']]);
    expect(agent.plan()!.rows.map((r) => r.requestId)).toEqual(['old2', 'old1', 'new1']);
  });

  it('bounds a batch by memory: skips a row that does not fit (default) or stops there (strict)', () => {
    const clock = new ManualClock();
    // 12 bytes per token (4 activation + 8 KV); memory 120 → 10 tokens per batch.
    for (const packing of ['skip', 'stop'] as const) {
      const agent = new BlockAgent({ instance: 'i', block: block('b'), clock, maxBatch: 8, memoryBytes: 120, packing });
      agent.arrive([arrival('a', 6), arrival('big', 5), arrival('c', 3), arrival('d', 2)]);
      const p = agent.plan()!;
      expect(p.bytes).toBeLessThanOrEqual(120);
      expect(p.rows.map((r) => r.requestId)).toEqual(packing === 'skip' ? ['a', 'c'] : ['a']);
    }
  });

  it('charges a row that lacks its KV here the whole context (it must be migrated or recomputed first)', () => {
    const clock = new ManualClock();
    const agent = new BlockAgent({ instance: 'i', block: block('b', 8, 4), clock, maxBatch: 4, memoryBytes: 1e6 });
    const [row] = agent.arrive([arrival('r', 1, 40, 3)]);
    expect(row!.needsKv).toBe(true);
    expect(row!.cls).toBe('new');
    expect(row!.bytes).toBe(1 * 12 + 40 * 8);
    const noKv = new BlockAgent({ instance: 'f', block: block('ffn', 0, 4), clock, maxBatch: 4, memoryBytes: 1e6 });
    expect(noKv.arrive([arrival('r', 1, 40, 3)])[0]!.needsKv).toBe(false);
  });

  it('keeps a countdown per away request: retained until it expires, overdue after, cleared on return', () => {
    const clock = new ManualClock();
    const agent = new BlockAgent({ instance: 'i', block: block('b'), clock, maxBatch: 4, memoryBytes: 1e6 });
    agent.arrive([arrival('r', 3), arrival('s', 2)]);
    const p = agent.plan()!;
    clock.t = 10;
    agent.complete(p.planId, [{ requestId: 'r', finished: false, returnInMs: 7 }, { requestId: 's', finished: true }]);
    expect(agent.countdown('r')).toBe(17);
    expect(agent.residentTokens('r')).toBe(3);
    expect(agent.residentTokens('s')).toBeNull();
    expect(agent.retained('r')).toBe(true);
    expect(agent.overdue()).toEqual([]);
    clock.t = 17;
    expect(agent.retained('r')).toBe(false);
    expect(agent.overdue()).toEqual([{ requestId: 'r', dueAt: 17 }]);
    agent.arrive([arrival('r', 1, 3, 1)]);
    expect(agent.countdown('r')).toBeNull();
    expect(agent.queue()[0]!.cls).toBe('returning');
  });

  it('refuses what cannot work, naming it', () => {
    const clock = new ManualClock();
    expect(() => new BlockAgent({ instance: 'i', block: block('b'), clock, maxBatch: 0, memoryBytes: 1 })).toThrow(ServingInvalidError);
    const agent = new BlockAgent({ instance: 'i', block: block('b'), clock, maxBatch: 4, memoryBytes: 100 });
    expect(() => agent.arrive([arrival('huge', 50)])).toThrow(ServingCapacityError);
    agent.arrive([arrival('r')]);
    expect(() => agent.arrive([arrival('r')])).toThrow(ServingStateError);
    expect(() => agent.arrive([arrival('z', 0)])).toThrow(/tokens of z/);
    const p = agent.plan()!;
    expect(() => agent.complete(p.planId + 1)).toThrow(ServingStateError);
    expect(() => agent.complete(p.planId, [{ requestId: 'nobody', finished: true }])).toThrow(/nobody/);
  });

  it('reports the queue as batches and its drain time for T_queue and the speculation ranking', () => {
    const clock = new ManualClock();
    const agent = new BlockAgent({ instance: 'i', block: block('b'), clock, maxBatch: 2, memoryBytes: 1e6 });
    agent.arrive([arrival('a', 3), arrival('b', 1), arrival('c', 5)]);
    expect(agent.queuedBatches()).toEqual([{ rows: 2, tokens: 4 }, { rows: 1, tokens: 5 }]);
    const profile: ComputeProfile = { fixedMs: 1, perRowMs: 0.5, perTokenMs: 0.1 };
    expect(agent.drainMs(profile)).toBeCloseTo(1 + 1 + 0.4 + 1 + 0.5 + 0.5, 12);
  });
});

// ─── A random cluster of agents: conservation, the packing rules against a plain reference, determinism ────────

interface SimRequest {
  id: string;
  app: number;
  prompt: number;
  maxTokens: number;
  arrival: number;
}

interface TraceEntry {
  t: number;
  request: string;
  iteration: number;
  position: number;
  block: string;
}

const CHAINS = [
  ['emb', 'att0', 'ffn0', 'att1', 'head'],
  ['emb', 'att0+lora', 'ffn0', 'att1+lora', 'head'],
  ['emb', 'ff-l0', 'att1', 'head'],
  ['emb', 'att0', 'ffn0+lora', 'att1', 'head'],
];
const BLOCKS = [...new Set(CHAINS.flat())];

/** Plain reference of the packing rule: returning (resident here) first, then new, each by arrival order; greedy up to the cap and the memory. */
function referencePack(rows: { requestId: string; returning: boolean; seq: number; bytes: number }[], maxBatch: number, memory: number): string[] {
  const ordered = [...rows].sort((a, b) => Number(b.returning) - Number(a.returning) || a.seq - b.seq);
  const out: string[] = [];
  let bytes = 0;
  for (const r of ordered) {
    if (out.length < maxBatch && bytes + r.bytes <= memory) {
      out.push(r.requestId);
      bytes += r.bytes;
    }
  }
  return out;
}

function simulate(seed: number): { trace: TraceEntry[]; requests: SimRequest[]; plans: number; boundByMemory: number; returningRows: number } {
  const rand: Random = mulberry32(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const clock = new ManualClock();
  const bytesOf = new Map(BLOCKS.map((b) => [b, block(b, b.startsWith('att') || b.startsWith('ff-') ? 8 : 0, 4)]));
  const profiles = new Map<string, ComputeProfile>(BLOCKS.map((b) => [b, { fixedMs: 0.5 + rand(), perRowMs: 0.1 * rand(), perTokenMs: 0.05 * rand() }]));
  const agents = new Map(BLOCKS.map((b) => [b, new BlockAgent({ instance: `${b}@d0`, block: bytesOf.get(b)!, clock, maxBatch: int(1, 6), memoryBytes: int(300, 900), packing: 'skip' })]));
  const requests: SimRequest[] = [];
  let t = 0;
  for (let i = 0; i < 40; i++) {
    t += -Math.log(1 - rand()) * 3;
    requests.push({ id: `q${i}`, app: int(0, CHAINS.length - 1), prompt: int(1, 20), maxTokens: int(1, 5), arrival: t });
  }
  type EventBody = { t: number; kind: 'arrive'; request: SimRequest } | { t: number; kind: 'done'; block: string; planId: number };
  type Event = EventBody & { seq: number };
  const events: Event[] = [];
  let seq = 0;
  const push = (e: EventBody) => events.push({ ...e, seq: seq++ });
  for (const r of requests) push({ t: r.arrival, kind: 'arrive', request: r });
  const trace: TraceEntry[] = [];
  const where = new Map<string, { iteration: number; position: number }>();
  const byId = new Map(requests.map((r) => [r.id, r]));
  // The test's own view of each queue, for the reference packing.
  const mirror = new Map<string, { requestId: string; returning: boolean; seq: number; bytes: number }[]>(BLOCKS.map((b) => [b, []]));
  const servedAt = new Map<string, Set<string>>(BLOCKS.map((b) => [b, new Set()]));
  let arrivals = 0;
  const send = (r: SimRequest, iteration: number, position: number) => {
    const b = CHAINS[r.app]![position]!;
    const tokens = iteration === 0 ? r.prompt : 1;
    const contextTokens = iteration === 0 ? 0 : r.prompt + iteration - 1;
    agents.get(b)!.arrive([{ requestId: r.id, iteration, position, tokens, contextTokens }]);
    const bb = bytesOf.get(b)!;
    mirror.get(b)!.push({ requestId: r.id, returning: servedAt.get(b)!.has(r.id), seq: arrivals++, bytes: tokens * (bb.activationBytesPerToken + bb.kvBytesPerToken) });
    where.set(r.id, { iteration, position });
  };
  let plans = 0;
  let boundByMemory = 0;
  let returningRows = 0;
  const running = new Map<string, AgentBatchPlan>();
  while (events.length > 0) {
    events.sort((a, b) => a.t - b.t || a.seq - b.seq);
    const e = events.shift()!;
    clock.t = e.t;
    if (e.kind === 'arrive') send(e.request, 0, 0);
    else {
      const agent = agents.get(e.block)!;
      const finishedRows: string[] = [];
      const plan = running.get(e.block)!;
      running.delete(e.block);
      const outcomes = plan.rows.map((row) => {
        const r = byId.get(row.requestId)!;
        const last = row.position === CHAINS[r.app]!.length - 1;
        const finished = last && row.iteration + 1 === r.maxTokens;
        if (finished) finishedRows.push(r.id);
        trace.push({ t: e.t, request: r.id, iteration: row.iteration, position: row.position, block: e.block });
        return { requestId: r.id, finished, returnInMs: 5 };
      });
      agent.complete(e.planId, outcomes);
      for (const row of plan.rows) {
        const r = byId.get(row.requestId)!;
        if (finishedRows.includes(r.id)) {
          for (const b of CHAINS[r.app]!) {
            agents.get(b)!.evict(r.id);
            servedAt.get(b)!.delete(r.id);
          }
          continue;
        }
        servedAt.get(e.block)!.add(r.id);
        const last = row.position === CHAINS[r.app]!.length - 1;
        send(r, last ? row.iteration + 1 : row.iteration, last ? 0 : row.position + 1);
      }
    }
    for (const b of BLOCKS) {
      const agent = agents.get(b)!;
      if (agent.busy) continue;
      const expected = referencePack(mirror.get(b)!, agent.maxBatch, agent.memoryBytes);
      if (expected.length < Math.min(agent.maxBatch, mirror.get(b)!.length)) boundByMemory++;
      const plan = agent.plan();
      expect(plan?.rows.map((r) => r.requestId) ?? []).toEqual(expected);
      if (!plan) continue;
      plans++;
      returningRows += plan.rows.filter((r) => r.cls === 'returning').length;
      expect(plan.rows.length).toBeLessThanOrEqual(agent.maxBatch);
      expect(plan.bytes).toBeLessThanOrEqual(agent.memoryBytes);
      const cls = plan.rows.map((r) => r.cls);
      expect(cls).toEqual([...cls].sort((x, y) => (x === y ? 0 : x === 'returning' ? -1 : 1)));
      mirror.set(b, mirror.get(b)!.filter((m) => !expected.includes(m.requestId)));
      running.set(b, plan);
      push({ t: clock.t + computeMs(profiles.get(b)!, { rows: plan.rows.length, tokens: plan.tokens }), kind: 'done', block: b, planId: plan.planId });
    }
  }
  for (const a of agents.values()) expect(a.queueLength).toBe(0);
  return { trace, requests, plans, boundByMemory, returningRows };
}

describe('BlockAgent under random arrivals (seeded)', () => {
  it('every request\'s every block step happens exactly once, in chain order, and every batch follows the rules', () => {
    let bound = 0;
    let returning = 0;
    for (const seed of [1, 2, 3, 4, 5]) {
      const { trace, requests, boundByMemory, returningRows } = simulate(seed);
      bound += boundByMemory;
      returning += returningRows;
      for (const r of requests) {
        const mine = trace.filter((e) => e.request === r.id);
        const chain = CHAINS[r.app]!;
        const expected: [number, number, string][] = [];
        for (let it = 0; it < r.maxTokens; it++) chain.forEach((b, p) => expected.push([it, p, b]));
        expect(mine.map((e) => [e.iteration, e.position, e.block])).toEqual(expected);
        for (let i = 1; i < mine.length; i++) expect(mine[i]!.t).toBeGreaterThanOrEqual(mine[i - 1]!.t);
      }
    }
    // The runs exercised both limits and both classes.
    expect(bound).toBeGreaterThan(0);
    expect(returning).toBeGreaterThan(0);
  });

  it('mixes applications in a shared block\'s batch', () => {
    const { trace } = simulate(7);
    const batches = new Map<string, Set<string>>();
    for (const e of trace.filter((x) => x.block === 'emb')) batches.set(`${e.t}`, (batches.get(`${e.t}`) ?? new Set()).add(e.request));
    expect([...batches.values()].some((s) => s.size > 1)).toBe(true);
  });

  it('is deterministic per seed', () => {
    expect(simulate(11)).toEqual(simulate(11));
    expect(simulate(11).trace).not.toEqual(simulate(12).trace);
  });
});

describe('packRows', () => {
  it('matches the plain reference on random, ragged and empty queues', () => {
    const rand = mulberry32(99);
    for (let trial = 0; trial < 200; trial++) {
      const n = Math.floor(rand() * 12);
      const rows: QueuedRow[] = Array.from({ length: n }, (_, i) => ({ requestId: `r${i}`, iteration: 0, position: 0, tokens: 1, contextTokens: 0, cls: rand() < 0.5 ? 'returning' : 'new', enqueuedAt: i, bytes: Math.floor(rand() * 50), needsKv: false }));
      const ordered = [...rows.filter((r) => r.cls === 'returning'), ...rows.filter((r) => r.cls === 'new')];
      const cap = 1 + Math.floor(rand() * 5);
      const mem = Math.floor(rand() * 120);
      const ref = referencePack(ordered.map((r, i) => ({ requestId: r.requestId, returning: true, seq: i, bytes: r.bytes })), cap, mem);
      expect(packRows(ordered, cap, mem, 'skip').map((r) => r.requestId)).toEqual(ref);
    }
  });
});

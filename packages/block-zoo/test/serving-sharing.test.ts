/**
 * The serving core's options for block instances that share a GPU and batch across applications: the agent's
 * countdown-aware hold (§4.2: an instance prioritises the return of its in-flight requests), the latency estimate's
 * multiplexing slowdown, running batch and packed marginal cost (§4.3, design note 5.5 and 5.10), and the placement's
 * per-device cap (an initial placement that reaches every GPU).
 */
import type { Clock } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import {
  BlockAgent,
  type BlockBytes,
  estimateLatency,
  type LatencyInput,
  pickDevice,
  placeChains,
  ServingInvalidError,
  type Topology,
  TrafficCounter,
} from '../src/planner/index.js';

class ManualClock implements Clock {
  t = 0;
  now(): number {
    return this.t;
  }
}

const bytes: BlockBytes = { blockId: 'b', paramBytes: 1000, kvBytesPerToken: 8, activationBytesPerToken: 4 };
const decode = (requestId: string, contextTokens = 4) => ({ requestId, iteration: 1, position: 0, tokens: 1, contextTokens });

/** An agent where r1 and r2 ran once; r1 is due back at t = 6, r2 at t = 30. */
function agentWithTwoAway(holdForReturningMs: number) {
  const clock = new ManualClock();
  const agent = new BlockAgent({ instance: 'i', block: bytes, clock, maxBatch: 4, memoryBytes: 1e9, holdForReturningMs });
  agent.arrive([{ ...decode('r1', 0), iteration: 0, tokens: 4 }, { ...decode('r2', 0), iteration: 0, tokens: 4 }]);
  const p = agent.plan()!;
  agent.complete(p.planId, [
    { requestId: 'r1', finished: false, returnInMs: 6 },
    { requestId: 'r2', finished: false, returnInMs: 30 },
  ]);
  return { clock, agent };
}

describe('BlockAgent: countdown-aware hold', () => {
  it('waits for a returning request due within the hold, then batches it with the queued row', () => {
    const { clock, agent } = agentWithTwoAway(10);
    clock.t = 1;
    agent.arrive([{ ...decode('n1', 0), iteration: 0, tokens: 3 }]);
    expect(agent.plan()).toBeNull();
    expect(agent.holdUntil).toBe(6); // r1's countdown; r2's (30) is past the bound 1 + 10
    clock.t = 5;
    agent.arrive([decode('r1')]);
    // r1 is back: nothing else is due before 1 + 10, so the batch runs with both rows, RETURNING first.
    const plan = agent.plan()!;
    expect(plan.rows.map((r) => r.requestId)).toEqual(['r1', 'n1']);
    expect(agent.holdUntil).toBeNull();
  });

  it('never waits for an overdue countdown, nor past the hold bound of the oldest queued row', () => {
    const { clock, agent } = agentWithTwoAway(10);
    clock.t = 7; // r1 is overdue, r2 is due at 30 > 7 + 10
    agent.arrive([{ ...decode('n1', 0), iteration: 0, tokens: 3 }]);
    expect(agent.plan()!.rows.map((r) => r.requestId)).toEqual(['n1']);
  });

  it('runs at once without a hold (the default), and a per-call hold overrides the instance default', () => {
    const { clock, agent } = agentWithTwoAway(0);
    clock.t = 1;
    agent.arrive([{ ...decode('n1', 0), iteration: 0, tokens: 3 }]);
    expect(agent.plan({ holdForReturningMs: 40 })).toBeNull();
    expect(agent.holdUntil).toBe(6);
    const plan = agent.plan()!;
    expect(plan.rows.map((r) => r.requestId)).toEqual(['n1']);
    expect(agent.runningRows().map((r) => r.requestId)).toEqual(['n1']);
    agent.complete(plan.planId);
    expect(agent.runningRows()).toEqual([]);
    expect(() => agent.plan({ holdForReturningMs: -1 })).toThrow();
  });

  it('does not hold a full batch', () => {
    const clock = new ManualClock();
    const agent = new BlockAgent({ instance: 'i', block: bytes, clock, maxBatch: 1, memoryBytes: 1e9, holdForReturningMs: 100 });
    agent.arrive([{ ...decode('a', 0), iteration: 0 }]);
    const p = agent.plan()!;
    agent.complete(p.planId, [{ requestId: 'a', finished: false, returnInMs: 5 }]);
    agent.arrive([{ ...decode('b', 0), iteration: 0 }]);
    expect(agent.plan()!.rows.map((r) => r.requestId)).toEqual(['b']);
  });
});

const topology: Topology = {
  devices: [
    { id: 'g0', server: 's0', memoryBytes: 80e9, memBandwidth: 2e9, loadBandwidth: 25e6 },
    { id: 'g1', server: 's0', memoryBytes: 80e9, memBandwidth: 2e9, loadBandwidth: 25e6 },
    { id: 'g2', server: 's1', memoryBytes: 80e9, memBandwidth: 2e9, loadBandwidth: 25e6 },
  ],
  intraServer: { bandwidth: 250e6, latencyMs: 0.01 },
  interServer: { bandwidth: 12.5e6, latencyMs: 0.03 },
  schedulerServer: 's0',
};

const base: LatencyInput = {
  dispatcher: 'agent',
  profile: { fixedMs: 2, perRowMs: 0.5, perTokenMs: 0.01 },
  queued: [{ rows: 4, tokens: 4 }],
  request: { rows: 1, tokens: 1 },
  transferBytes: 0,
  from: 'g0',
  to: 'g0',
  kvMigrationMs: 0,
  resident: true,
  deviceIdle: false,
  victimBytes: 0,
  blockBytes: 0,
};

describe('estimateLatency on a shared GPU', () => {
  it('stretches T_queue and T_compute by the multiplexing slowdown, adds the running batch, and charges a packed row its marginal cost', () => {
    const plain = estimateLatency(topology, base);
    expect(plain.queueMs).toBeCloseTo(2 + 4 * 0.5 + 4 * 0.01, 12);
    expect(plain.computeMs).toBeCloseTo(2 + 0.5 + 0.01, 12);
    const slow = estimateLatency(topology, { ...base, slowdown: 3 });
    expect(slow.queueMs).toBeCloseTo(3 * plain.queueMs, 12);
    expect(slow.computeMs).toBeCloseTo(3 * plain.computeMs, 12);
    const running = estimateLatency(topology, { ...base, runningMs: 7 });
    expect(running.queueMs).toBeCloseTo(plain.queueMs + 7, 12);
    const packed = estimateLatency(topology, { ...base, packed: true, slowdown: 2 });
    expect(packed.computeMs).toBeCloseTo(2 * (0.5 + 0.01), 12);
    expect(packed.totalMs).toBeLessThan(estimateLatency(topology, { ...base, slowdown: 2 }).totalMs);
    expect(estimateLatency(topology, { ...base, slowdown: 1, runningMs: 0, packed: false })).toEqual(plain);
  });

  it('refuses a slowdown below 1 and a negative running time', () => {
    expect(() => estimateLatency(topology, { ...base, slowdown: 0.5 })).toThrow(ServingInvalidError);
    expect(() => estimateLatency(topology, { ...base, slowdown: 0 })).toThrow(ServingInvalidError);
    expect(() => estimateLatency(topology, { ...base, runningMs: -1 })).toThrow(ServingInvalidError);
  });
});

describe('placement with a per-device cap', () => {
  const GB = 1e9;
  const four: Topology = { ...topology, devices: [0, 1, 2, 3].map((i) => ({ id: `g${i}`, server: i < 2 ? 's0' : 's1', memoryBytes: 80 * GB, memBandwidth: 2e9, loadBandwidth: 25e6 })) };

  it('spreads a chain over the devices: a device holding blocks takes more only within the cap; an empty one takes any block', () => {
    const chain = ['a', 'b', 'c', 'd', 'e'];
    const sizes = new Map([['a', 30 * GB], ['b', 10 * GB], ['c', 10 * GB], ['d', 10 * GB], ['e', 10 * GB]]);
    const traffic = TrafficCounter.fromChains([{ blocks: chain }]);
    const packed = placeChains(four, [chain], sizes, traffic, {});
    expect(new Set(packed.map((p) => p.device)).size).toBe(1); // locality alone fills the first device
    const spread = placeChains(four, [chain], sizes, traffic, { maxBytesPerDevice: 20 * GB });
    const held = new Map<string, number>();
    for (const p of spread) held.set(p.device, (held.get(p.device) ?? 0) + p.bytes);
    expect(held.size).toBeGreaterThanOrEqual(3);
    for (const [d, n] of held) if (spread.filter((p) => p.device === d).length > 1) expect(n).toBeLessThanOrEqual(20 * GB);
    // 30 GB exceeds the cap but goes alone on an empty device.
    expect(spread.filter((p) => p.device === spread.find((q) => q.block === 'a')!.device)).toHaveLength(1);
  });

  it('pickDevice with a tiny cap offers only empty devices; placeChains falls back past the cap when nothing fits under it', () => {
    const traffic = new TrafficCounter();
    const placed = [0, 1, 2].map((i) => ({ instance: `x@g${i}`, block: `x${i}`, device: `g${i}`, bytes: GB }));
    expect(pickDevice(four, placed, 'y', GB, traffic, { maxBytesPerDevice: 1 })!.id).toBe('g3');
    expect(pickDevice(four, [...placed, { instance: 'z@g3', block: 'z', device: 'g3', bytes: GB }], 'y', GB, traffic, { maxBytesPerDevice: 1 })).toBeNull();
    const chain = ['a', 'b', 'c', 'd', 'e', 'f'];
    const sizes = new Map(chain.map((b) => [b, 10 * GB]));
    const all = placeChains(four, [chain], sizes, TrafficCounter.fromChains([{ blocks: chain }]), { maxBytesPerDevice: 5 * GB });
    expect(all).toHaveLength(6); // four go alone, the last two past the cap
  });

  it('balances expected load as well as bytes: small busy blocks spread instead of piling onto one device', () => {
    // One big shared block, then six small blocks that each carry a third of a device's time: bytes alone pack the
    // six with the big one (they fit under the byte cap); the load cap spreads them.
    const chain = ['big', 't0', 't1', 't2', 't3', 't4', 't5'];
    const sizes = new Map<string, number>([['big', 20 * GB], ...chain.slice(1).map((b) => [b, 0.3 * GB] as [string, number])]);
    const load = new Map<string, number>([['big', 0.9], ...chain.slice(1).map((b) => [b, 0.35] as [string, number])]);
    const traffic = TrafficCounter.fromChains([{ blocks: chain }]);
    const bytesOnly = placeChains(four, [chain], sizes, traffic, { maxBytesPerDevice: 30 * GB });
    expect(new Set(bytesOnly.map((p) => p.device)).size).toBe(1);
    const balanced = placeChains(four, [chain], sizes, traffic, { maxBytesPerDevice: 30 * GB, blockLoad: load, maxLoadPerDevice: 1 });
    const held = new Map<string, number>();
    for (const p of balanced) held.set(p.device, (held.get(p.device) ?? 0) + p.load!);
    expect(balanced.find((p) => p.block === 't0')!.load).toBe(0.35);
    for (const [d, n] of held) if (balanced.filter((p) => p.device === d).length > 1) expect(n).toBeLessThanOrEqual(1 + 1e-12);
    expect(held.size).toBe(4);
    // Locality still groups the chain by server: it spans both servers (four devices are needed), and at most two
    // of its six links cross (without locality, any of them may).
    const serverOf = (b: string) => four.devices.find((d) => d.id === balanced.find((p) => p.block === b)!.device)!.server;
    expect(chain.slice(1).filter((b, i) => serverOf(b) !== serverOf(chain[i]!)).length).toBeLessThanOrEqual(2);
  });

  it('refuses a negative or non-finite block load', () => {
    const traffic = new TrafficCounter();
    expect(() => pickDevice(four, [], 'y', GB, traffic, { blockLoad: new Map([['y', -1]]) })).toThrow(ServingInvalidError);
    expect(() => pickDevice(four, [], 'y', GB, traffic, { blockLoad: new Map([['y', Number.NaN]]) })).toThrow(ServingInvalidError);
  });

  it('passes over saturated devices when one with spare capacity has room, and uses them when none has', () => {
    const traffic = TrafficCounter.fromChains([{ blocks: ['n', 'y'], weight: 5 }]);
    const placed = [{ instance: 'n@g0', block: 'n', device: 'g0', bytes: GB }];
    // Locality prefers the neighbour's server (g0, the fuller of the two); both its GPUs are saturated, so the
    // replica goes to a GPU with capacity.
    expect(pickDevice(four, placed, 'y', GB, traffic)!.id).toBe('g0');
    const load = new Map([['g0', 0.95], ['g1', 0.97], ['g2', 0.2], ['g3', 0.5]]);
    expect(['g2', 'g3']).toContain(pickDevice(four, placed, 'y', GB, traffic, { deviceLoad: load })!.id);
    expect(pickDevice(four, placed, 'y', GB, traffic, { deviceLoad: new Map([['g0', 1], ['g1', 1], ['g2', 1], ['g3', 1]]) })!.id).toBe('g0');
    expect(pickDevice(four, placed, 'y', GB, traffic, { deviceLoad: load, saturatedLoad: 0.99 })!.id).toBe('g0');
  });
});

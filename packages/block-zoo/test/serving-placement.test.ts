import { mulberry32, type Random } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import {
  crossServerTraffic,
  freeBytes,
  type PlacedInstance,
  placeChains,
  planRebalance,
  planScaleOut,
  ServingCapacityError,
  type Topology,
  TrafficCounter,
} from '../src/planner/index.js';

const GB = 1e9;

function topologyOf(servers: number[], memory: (i: number) => number): Topology {
  const devices = servers.flatMap((n, s) => Array.from({ length: n }, (_, k) => ({ id: `s${s}g${k}`, server: `s${s}`, memoryBytes: memory(s * 10 + k), memBandwidth: 2e9, loadBandwidth: 25e6 })));
  return { devices, intraServer: { bandwidth: 250e6, latencyMs: 0.01 }, interServer: { bandwidth: 12.5e6, latencyMs: 0.03 }, schedulerServer: 's0' };
}

function randomInstance(rand: Random) {
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const servers = Array.from({ length: int(1, 4) }, () => int(1, 4));
  const topology = topologyOf(servers, () => int(8, 20) * GB);
  const blocks = Array.from({ length: int(2, 14) }, (_, i) => `b${i}`);
  const chains = Array.from({ length: int(1, 6) }, () => {
    const c = [blocks[int(0, blocks.length - 1)]!];
    for (let i = int(1, 5); i > 0; i--) {
      const b = blocks[int(0, blocks.length - 1)]!;
      if (b !== c.at(-1)) c.push(b);
    }
    return c;
  });
  const sizes = new Map(blocks.map((b) => [b, int(1, 9) * GB]));
  const traffic = TrafficCounter.fromChains(chains.map((c) => ({ blocks: c, weight: int(1, 10) })));
  return { topology, chains, sizes, traffic };
}

describe('TrafficCounter', () => {
  it('counts unordered pairs, ignores self-hops, seeds from chains by weight', () => {
    const t = TrafficCounter.fromChains([{ blocks: ['a', 'b', 'c'], weight: 2 }, { blocks: ['c', 'b'] }]);
    t.record('a', 'a', 5);
    expect(t.count('b', 'c')).toBe(3);
    expect(t.count('c', 'b')).toBe(3);
    expect(t.count('a', 'b')).toBe(2);
    expect(t.total('b')).toBe(5);
    expect(t.pairs()).toEqual([{ a: 'b', b: 'c', weight: 3 }, { a: 'a', b: 'b', weight: 2 }]);
  });
});

describe('placeChains: invariants on random instances (seeded)', () => {
  it('respects capacity, places every block a chain needs, one instance per device per block, each at the best local score', () => {
    const rand = mulberry32(17);
    let placedRuns = 0;
    for (let trial = 0; trial < 300; trial++) {
      const { topology, chains, sizes, traffic } = randomInstance(rand);
      const headroom = Math.floor(rand() * 3) * GB;
      for (const policy of ['locality', 'frag-min'] as const) {
        let placed: PlacedInstance[];
        try {
          placed = placeChains(topology, chains, sizes, traffic, { policy, headroomBytes: headroom });
        } catch (err) {
          // Only ever because some block fits nowhere at that point.
          expect(err).toBeInstanceOf(ServingCapacityError);
          const e = err as ServingCapacityError;
          expect(e.needBytes).toBeGreaterThan(e.limitBytes);
          continue;
        }
        placedRuns++;
        for (const [, free] of freeBytes(topology, placed, headroom)) expect(free).toBeGreaterThanOrEqual(0);
        for (const chain of chains) for (const b of chain) expect(placed.some((p) => p.block === b)).toBe(true);
        const pairs = placed.map((p) => `${p.block}@${p.device}`);
        expect(new Set(pairs).size).toBe(pairs.length);
        // Each choice, replayed against a plain reference of the rule, was a best one when it was made.
        for (let i = 0; i < placed.length; i++) {
          const before = placed.slice(0, i);
          const p = placed[i]!;
          const free = freeBytes(topology, before, headroom);
          const serverOf = (d: string) => topology.devices.find((x) => x.id === d)!.server;
          const score = (d: string) => {
            const leftover = (free.get(d)! - p.bytes) / topology.devices.find((x) => x.id === d)!.memoryBytes;
            if (policy === 'frag-min') return -leftover;
            return before.filter((q) => serverOf(q.device) === serverOf(d)).reduce((t, q) => t + traffic.count(p.block, q.block), 0) - 1e-3 * leftover;
          };
          const feasible = topology.devices.filter((d) => free.get(d.id)! >= p.bytes).map((d) => score(d.id));
          expect(score(p.device)).toBeGreaterThanOrEqual(Math.max(...feasible) - 1e-12);
        }
      }
    }
    expect(placedRuns).toBeGreaterThan(300);
  });

  it('locality crosses servers less than frag-min over the same random instances', () => {
    const rand = mulberry32(23);
    let locality = 0;
    let fragMin = 0;
    for (let trial = 0; trial < 200; trial++) {
      const { topology, chains, sizes, traffic } = randomInstance(rand);
      try {
        locality += crossServerTraffic(topology, placeChains(topology, chains, sizes, traffic, { policy: 'locality' }), traffic);
        fragMin += crossServerTraffic(topology, placeChains(topology, chains, sizes, traffic, { policy: 'frag-min' }), traffic);
      } catch (err) {
        expect(err).toBeInstanceOf(ServingCapacityError);
      }
    }
    expect(locality).toBeLessThan(fragMin);
  });

  it('puts each application\'s chain on one server when each fits there (the frag-min baseline does not)', () => {
    const topology = topologyOf([2, 2], () => 10 * GB);
    const chains = [['a1', 'a2', 'a3', 'a4'], ['b1', 'b2', 'b3', 'b4']];
    const sizes = new Map(chains.flatMap((c) => c.map((b, i) => [b, (i < 2 ? 5 : 3) * GB] as const)));
    const traffic = TrafficCounter.fromChains(chains.map((c) => ({ blocks: c })));
    const placed = placeChains(topology, chains, sizes, traffic);
    expect(crossServerTraffic(topology, placed, traffic)).toBe(0);
    expect(crossServerTraffic(topology, placeChains(topology, chains, sizes, traffic, { policy: 'frag-min' }), traffic)).toBeGreaterThan(0);
    expect(() => placeChains(topology, [['huge']], new Map([['huge', 11 * GB]]), traffic)).toThrow(ServingCapacityError);
  });
});

describe('scale-out and rebalancing (algorithm 5.9)', () => {
  const topology = topologyOf([2, 2], () => 10 * GB);
  const placed: PlacedInstance[] = [
    { instance: 'a@s0g0', block: 'a', device: 's0g0', bytes: 4 * GB },
    { instance: 'b@s1g0', block: 'b', device: 's1g0', bytes: 4 * GB },
  ];
  it('charges a block the bytes it adds where it goes (bytesOn): blocks sharing a tensor fit together where their sum would not', () => {
    // One device of 10 GB: a (6 GB) and b (6 GB) share 4 GB of tensors, so together they hold 8 GB.
    const topology = topologyOf([1], () => 10 * GB);
    const sizes = new Map([['a', 6 * GB], ['b', 6 * GB]]);
    const traffic = TrafficCounter.fromChains([{ blocks: ['a', 'b'] }]);
    expect(() => placeChains(topology, [['a', 'b']], sizes, traffic)).toThrow(ServingCapacityError);
    const bytesOn = (block: string, dev: string, placed: readonly PlacedInstance[]) => (placed.some((p) => p.device === dev && p.block !== block) ? 2 * GB : 6 * GB);
    const placed = placeChains(topology, [['a', 'b']], sizes, traffic, { bytesOn });
    expect(placed.map((p) => [p.block, p.bytes])).toEqual([['a', 6 * GB], ['b', 2 * GB]]);
    expect(freeBytes(topology, placed).get('s0g0')).toBe(2 * GB);
  });

  it('scales an instance past t × maxQueueLen onto a device near its neighbours, moving the later half of its queue', () => {
    const traffic = TrafficCounter.fromChains([{ blocks: ['a', 'b'] }]);
    const queue = Array.from({ length: 9 }, (_, i) => `q${i}`);
    const plan = planScaleOut(topology, placed, [{ instance: 'a@s0g0', block: 'a', device: 's0g0', bytes: 4 * GB, queue, maxQueueLen: 10 }], traffic);
    expect(plan).toEqual([{ from: 'a@s0g0', block: 'a', device: 's1g0', instance: 'a@s1g0', move: ['q5', 'q6', 'q7', 'q8'] }]);
    expect(planScaleOut(topology, placed, [{ instance: 'a@s0g0', block: 'a', device: 's0g0', bytes: 4 * GB, queue: queue.slice(0, 8), maxQueueLen: 10 }], traffic)).toEqual([]);
  });

  it('moves an instance next to its high-traffic partner only when the saving beats the move cost', () => {
    const traffic = new TrafficCounter();
    traffic.record('a', 'b', 100);
    const moves = planRebalance(topology, placed, traffic, { valuePerUnit: 1, moveCost: () => 50 });
    expect(moves).toEqual([{ instance: 'a@s0g0', block: 'a', from: 's0g0', to: 's1g0', gain: 100 }]);
    expect(planRebalance(topology, placed, traffic, { valuePerUnit: 1, moveCost: () => 500 })).toEqual([]);
  });
});

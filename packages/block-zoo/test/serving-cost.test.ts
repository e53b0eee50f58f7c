import { describe, expect, it } from 'vitest';

import {
  activationBytes,
  chooseInstance,
  estimateLatency,
  type HopCandidate,
  type HopRequest,
  kvBytes,
  kvMigrationMs,
  type LatencyInput,
  migrationRates,
  ServingInvalidError,
  ServingNotFoundError,
  type Topology,
  transferMs,
} from '../src/planner/index.js';

// Bandwidths in bytes per ms: 1 GB/s = 1e6.
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
  queued: [{ rows: 4, tokens: 4 }, { rows: 2, tokens: 100 }],
  request: { rows: 1, tokens: 1 },
  transferBytes: 1e6,
  from: 'g0',
  to: 'g2',
  kvMigrationMs: 3,
  resident: true,
  deviceIdle: true,
  victimBytes: 0,
  blockBytes: 500e6,
};

describe('the byte cost model (design note §4.8)', () => {
  it('computes the activation hand-off, KV in whole pages, and link times by hand', () => {
    const b = { blockId: 'b', paramBytes: 0, kvBytesPerToken: 16384, activationBytesPerToken: 8192 };
    expect(activationBytes(b, 512 * 32)).toBe(512 * 32 * 8192);
    expect(kvBytes(b, 17)).toBe(32 * 16384);
    expect(kvBytes(b, 0)).toBe(0);
    // 134 MB over 12.5 GB/s ≈ 10.7 ms (the note's example), plus α.
    expect(transferMs(topology, 'g0', 'g2', 134e6)).toBeCloseTo(0.03 + 134e6 / 12.5e6, 12);
    expect(transferMs(topology, 'g0', 'g1', 250e6)).toBeCloseTo(0.01 + 1, 12);
    expect(transferMs(topology, 'g0', 'g0', 1e9)).toBe(0);
    expect(transferMs(topology, null, 'g2', 12.5e6)).toBeCloseTo(1.03, 12);
    expect(() => transferMs(topology, 'g0', 'nope', 1)).toThrow(ServingNotFoundError);
  });

  it('T_mig = P / (r_c + r_r) plus a launch overhead per recompute chunk', () => {
    const rates = { copyPagesPerMs: 3, recomputePagesPerMs: 1, chunkOverheadMs: 0.5, chunkPages: 2 };
    // 40 pages: 10 ms, 10 recomputed pages in 5 chunks.
    expect(kvMigrationMs(40, rates)).toBeCloseTo(10 + 5 * 0.5, 12);
    expect(kvMigrationMs(0, rates)).toBe(0);
    const derived = migrationRates(topology, 'g0', 'g2', { blockId: 'b', paramBytes: 0, kvBytesPerToken: 1000, activationBytesPerToken: 0 }, { fixedMs: 1, perRowMs: 0, perTokenMs: 0.01 });
    expect(derived.copyPagesPerMs).toBeCloseTo(12.5e6 / 16000, 9);
    expect(derived.recomputePagesPerMs).toBeCloseTo(1 / 0.16, 9);
  });
});

describe('estimateLatency: T_queue + T_compute + T_transfer + T_load (behaviour 15)', () => {
  it('agent dispatch, resident block', () => {
    const e = estimateLatency(topology, base);
    const queue = 2 + 0.5 * 4 + 0.04 + (2 + 0.5 * 2 + 1);
    const compute = 2 + 0.5 + 0.01;
    const transfer = 0.03 + 1e6 / 12.5e6 + 3;
    expect(e.queueMs).toBeCloseTo(queue, 12);
    expect(e.computeMs).toBeCloseTo(compute, 12);
    expect(e.transferMs).toBeCloseTo(transfer, 12);
    expect(e.loadMs).toBe(0);
    expect(e.totalMs).toBeCloseTo(queue + compute + transfer, 12);
  });

  it('scheduler dispatch carries only D_req and no KV', () => {
    const e = estimateLatency(topology, { ...base, dispatcher: 'scheduler', from: null, kvMigrationMs: 0, transferBytes: 4096 });
    expect(e.transferMs).toBeCloseTo(0.03 + 4096 / 12.5e6, 12);
    expect(() => estimateLatency(topology, { ...base, dispatcher: 'scheduler', from: null })).toThrow(ServingInvalidError);
  });

  it('idle device: max(T_swap − T_transfer, 0); busy device: T_swap', () => {
    const swap = 2e9 / 2e9 + 500e6 / 25e6; // evict 2 GB at HBM speed + load 500 MB
    const idle = estimateLatency(topology, { ...base, resident: false, victimBytes: 2e9 });
    const transfer = 0.03 + 1e6 / 12.5e6 + 3;
    expect(idle.loadMs).toBeCloseTo(swap - transfer, 9);
    const busy = estimateLatency(topology, { ...base, resident: false, victimBytes: 2e9, deviceIdle: false });
    expect(busy.loadMs).toBeCloseTo(swap, 9);
    const hidden = estimateLatency(topology, { ...base, resident: false, victimBytes: 0, blockBytes: 1, kvMigrationMs: 100 });
    expect(hidden.loadMs).toBe(0);
  });
});

function candidate(instance: string, deviceId: string, overrides: Partial<HopCandidate> = {}, latency: Partial<LatencyInput> = {}): HopCandidate {
  return { instance, block: 'b', device: deviceId, family: 'llama', designated: true, available: true, latency: { ...base, to: deviceId, kvMigrationMs: 0, ...latency }, ...overrides };
}
const hop = (overrides: Partial<HopRequest> = {}): HopRequest => ({ requestId: 'r', space: 'llama', kvOwner: null, ownerHasRoom: true, allowAdaptive: true, fromDevice: 'g0', ...overrides });

describe('chooseInstance: best-effort KV owner, adaptive serving (behaviours 16, 21)', () => {
  it('takes the KV owner when it has room, even when another candidate is faster', () => {
    const owner = candidate('own', 'g2', {}, { queued: [{ rows: 8, tokens: 8 }] });
    const fast = candidate('fast', 'g1', {}, { queued: [] });
    const c = chooseInstance(topology, hop({ kvOwner: 'own' }), [fast, owner]);
    expect([c.instance, c.reason, c.estimate]).toEqual(['own', 'kv-owner', null]);
  });

  it('takes the minimum estimate when the owner lacks memory (its KV then costs a migration elsewhere)', () => {
    const owner = candidate('own', 'g2', {}, { queued: [{ rows: 8, tokens: 8 }] });
    const fast = candidate('fast', 'g1', {}, { queued: [], kvMigrationMs: 1 });
    const c = chooseInstance(topology, hop({ kvOwner: 'own', ownerHasRoom: false }), [owner, fast]);
    expect([c.instance, c.reason]).toEqual(['fast', 'min-latency']);
    expect(c.estimate!.totalMs).toBeCloseTo(estimateLatency(topology, fast.latency).totalMs, 12);
  });

  it('breaks ties: the owner, then the designated block, then the sender\'s server, then the id', () => {
    const same = { queued: [], from: 'g0', transferBytes: 0 };
    const a = candidate('a', 'g1', {}, same);
    const b = candidate('b', 'g2', {}, same);
    expect(chooseInstance(topology, hop({ kvOwner: 'b', ownerHasRoom: false }), [a, b]).instance).toBe('b');
    const eq = candidate('eq', 'g1', { designated: false, family: 'llama' }, same);
    expect(chooseInstance(topology, hop(), [eq, b]).instance).toBe('b');
    expect(chooseInstance(topology, hop(), [b, candidate('z', 'g1', {}, same)]).instance).toBe('z');
    expect(chooseInstance(topology, hop(), [candidate('y', 'g1', {}, same), candidate('x', 'g1', {}, same)]).instance).toBe('x');
  });

  it('serves an equivalent when the designated instances are saturated, with a stitch across widths; honours the opt-out', () => {
    const slow = candidate('designated', 'g1', {}, { queued: Array.from({ length: 20 }, () => ({ rows: 8, tokens: 8 })) });
    const equivalent = candidate('sibling', 'g1', { designated: false, family: 'llama13', block: 'b13' }, { queued: [] });
    const c = chooseInstance(topology, hop(), [slow, equivalent]);
    expect(c).toMatchObject({ instance: 'sibling', adaptive: true, stitch: { fromFamily: 'llama', toFamily: 'llama13' } });
    expect(chooseInstance(topology, hop({ allowAdaptive: false }), [slow, equivalent]).instance).toBe('designated');
    expect(() => chooseInstance(topology, hop({ allowAdaptive: false }), [equivalent])).toThrow(/adaptive serving is off/);
  });

  it('scheduler dispatch follows the paper\'s order: designated, then equivalent, then a new instance', () => {
    const entry = hop({ fromDevice: null });
    const designated = candidate('d', 'g2', {}, { dispatcher: 'scheduler', from: null, queued: Array.from({ length: 9 }, () => ({ rows: 8, tokens: 8 })) });
    const equivalent = candidate('e', 'g1', { designated: false }, { dispatcher: 'scheduler', from: null, queued: [] });
    const fresh = candidate('v', 'g0', { virtual: true }, { dispatcher: 'scheduler', from: null, queued: [], resident: false, victimBytes: 0, blockBytes: 1 });
    expect(chooseInstance(topology, entry, [designated, equivalent, fresh]).instance).toBe('d');
    expect(chooseInstance(topology, entry, [{ ...designated, available: false }, equivalent, fresh]).instance).toBe('e');
    const deploy = chooseInstance(topology, entry, [{ ...designated, available: false }, { ...equivalent, available: false }, fresh]);
    expect([deploy.instance, deploy.deploy]).toEqual(['v', true]);
    // One argmin over all three sets instead (the [I] variant).
    expect(chooseInstance(topology, entry, [designated, equivalent, fresh], { entry: 'argmin' }).instance).toBe('v');
  });
});

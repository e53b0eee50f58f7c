/**
 * The route chooser on hand-made snapshots (no devices, no addon): a new sequence's hops by the §4.3 cost model
 * (block-zoo's chooseInstance) — a loaded replica loses to an idle one, a slower one to a faster one; a hop to
 * another device costs its activation transfer, so at equal load the instance on the previous hop's device wins,
 * and a long enough queue there makes the hop cross; ties go to the instance id whatever the snapshot's order; the
 * KV owner keeps a live sequence (rule 1); a block without an instance is the typed 404. Adaptive serving: an
 * equivalent segment's instance stands in for a loaded designated one (mid-chain by its estimate, at the chain start
 * only when the designated instances are at maxQueueLen), never with adaptive serving off, and the route rejoins the
 * chain after the blocks the segment replaces. And the inputs the device set feeds it: the per-instance profile (measured, a sibling's, the prior) and the worker link (measured, the prior).
 */
import { type BlockBytes, transferMs } from '@tessera/block-zoo';
import { describe, expect, it } from 'vitest';

import { BlockllmPlacementNotFoundError } from '../src/errors.js';
import {
  InstanceProfiler,
  localTopology,
  PRIOR_PARAM_BYTES_PER_MS,
  type RouteInstance,
  type RouteSnapshot,
  routeByCostModel,
  TOKEN_BYTES,
  WORKER_LINK_PRIOR,
  workerTransportLink,
} from '../src/devices/routing.js';

const DEVICES = ['device-0', 'device-1'];
const topology = localTopology(DEVICES, 1_000_000, WORKER_LINK_PRIOR);
const bytes = (blockId: string): BlockBytes => ({ blockId, paramBytes: 50_000, kvBytesPerToken: 512, activationBytesPerToken: 256 });
const block = (id: string) => ({ blockId: id, label: `block ${id}`, bytes: bytes(id) });
const inst = (instance: string, device: string, sequences: number, perTokenMs = 0.01): RouteInstance => ({ instance, block: instance.split('@')[0]!, device, sequences, perTokenMs });

function snapshot(chain: string[], instances: RouteInstance[], extra: Partial<RouteSnapshot> = {}): RouteSnapshot {
  return { requestId: 'seq-1', app: 'app', tokens: 7, chain: chain.map(block), instances, topology, ...extra };
}

describe('routeByCostModel', () => {
  it('sends a new sequence to the idle replica, not the loaded one (either way round)', () => {
    const a = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 5), inst('a@device-1', 'device-1', 0)]));
    expect(a).toEqual([{ instance: 'a@device-1', device: 'device-1', block: 'a', adaptive: false, reason: 'min-latency', crossDevice: false, estimateMs: expect.any(Number) }]);
    const b = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 0), inst('a@device-1', 'device-1', 5)]));
    expect(b.map((h) => h.instance)).toEqual(['a']);
    // The queue is the routed sequences × the instance's time per token: 5 × 0.01 ms more for the loaded one.
    const idle = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 0)]))[0]!.estimateMs!;
    const loaded = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 5)]))[0]!.estimateMs!;
    expect(loaded - idle).toBeCloseTo(5 * 0.01, 9);
  });

  it('at equal load prefers the instance whose profile is faster', () => {
    const r = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 2, 0.02), inst('a@device-1', 'device-1', 2, 0.01)]));
    expect(r[0]!.instance).toBe('a@device-1');
  });

  it('charges a cross-device hop its activation transfer: at equal load the same-device instance wins', () => {
    // Hop 0 can only go to device-1 (a's one instance); b has an instance on each device, equally loaded. By id, b
    // (device-0) would win a tie; the transfer makes b@device-1 cheaper.
    const r = routeByCostModel(snapshot(['a', 'b'], [inst('a@device-1', 'device-1', 0), inst('b', 'device-0', 3), inst('b@device-1', 'device-1', 3)]));
    expect(r.map((h) => [h.instance, h.crossDevice])).toEqual([
      ['a@device-1', false],
      ['b@device-1', false],
    ]);
    // Alone on device-0, b's estimate is the same plus the transfer of a's activations for the 7 prompt tokens.
    const crossing = routeByCostModel(snapshot(['a', 'b'], [inst('a@device-1', 'device-1', 0), inst('b', 'device-0', 3)]));
    expect(crossing[1]!.crossDevice).toBe(true);
    const transfer = transferMs(topology, 'device-1', 'device-0', 7 * 256);
    expect(transfer).toBeGreaterThan(WORKER_LINK_PRIOR.latencyMs);
    expect(crossing[1]!.estimateMs! - r[1]!.estimateMs!).toBeCloseTo(transfer, 9);
  });

  it('crosses devices when the queue on the same device costs more than the transfer', () => {
    // 7 × 256 bytes over the prior link ≈ 0.05 + 0.0009 ms; 20 more sequences at 0.01 ms a token cost 0.2 ms.
    const r = routeByCostModel(snapshot(['a', 'b'], [inst('a@device-1', 'device-1', 0), inst('b', 'device-0', 3), inst('b@device-1', 'device-1', 23)]));
    expect(r[1]).toMatchObject({ instance: 'b', device: 'device-0', crossDevice: true, reason: 'min-latency' });
  });

  it('breaks ties by instance id, whatever the order of the snapshot', () => {
    const instances = [inst('a', 'device-0', 1), inst('a@device-1', 'device-1', 1), inst('b', 'device-0', 0), inst('b@device-1', 'device-1', 0)];
    const first = routeByCostModel(snapshot(['a', 'b'], instances));
    expect(first.map((h) => h.instance)).toEqual(['a', 'b']);
    for (const order of [[...instances].reverse(), [instances[3]!, instances[0]!, instances[2]!, instances[1]!]]) {
      expect(routeByCostModel(snapshot(['a', 'b'], order))).toEqual(first);
    }
    // Replicas named the other way round: the lower id still wins the tie.
    const swapped = routeByCostModel(snapshot(['a'], [inst('a@device-1', 'device-1', 0), inst('a@device-0', 'device-0', 0)]));
    expect(swapped[0]!.instance).toBe('a@device-0');
  });

  it('keeps the KV owner of a live sequence (rule 1), even when it is the loaded one', () => {
    const instances = [inst('a', 'device-0', 9), inst('a@device-1', 'device-1', 0), inst('b', 'device-0', 0), inst('b@device-1', 'device-1', 0)];
    const r = routeByCostModel(snapshot(['a', 'b'], instances, { owners: ['a', null] }));
    expect(r[0]).toMatchObject({ instance: 'a', reason: 'kv-owner', estimateMs: null });
    // b has no owner: the cost model, from the owner's device.
    expect(r[1]).toMatchObject({ instance: 'b', reason: 'min-latency', crossDevice: false });
  });

  it("keeps a cohort's sequence on its home device where the designated block is there, else lets the cost model choose", () => {
    // device-0 is loaded and device-1 idle: without a home the route goes to device-1; home device-0 keeps it there.
    const instances = [inst('a', 'device-0', 9), inst('a@device-1', 'device-1', 0), inst('b', 'device-0', 9), inst('b@device-1', 'device-1', 0)];
    expect(routeByCostModel(snapshot(['a', 'b'], instances)).map((h) => h.instance)).toEqual(['a@device-1', 'b@device-1']);
    expect(routeByCostModel(snapshot(['a', 'b'], instances, { home: 'device-0' })).map((h) => [h.instance, h.crossDevice])).toEqual([
      ['a', false],
      ['b', false],
    ]);
    // c has no instance on the home device: the hop goes where c is, and d comes back home (it is there).
    const away = [inst('a', 'device-0', 0), inst('c@device-1', 'device-1', 0), inst('d', 'device-0', 5), inst('d@device-1', 'device-1', 0)];
    expect(routeByCostModel(snapshot(['a', 'c', 'd'], away, { home: 'device-0' })).map((h) => [h.instance, h.crossDevice])).toEqual([
      ['a', false],
      ['c@device-1', true],
      ['d', true],
    ]);
    // The KV owner still wins over the home (rule 1); b, owned nowhere, goes home.
    expect(routeByCostModel(snapshot(['a', 'b'], instances, { home: 'device-0', owners: ['a@device-1', null] })).map((h) => h.instance)).toEqual(['a@device-1', 'b']);
  });

  it('with a home, still weighs an equivalent segment there against the designated block there (adaptive serving)', () => {
    const seg = { position: 0, blocks: [block('x')], rejoin: 1, score: 0.99 };
    // The designated a is on both devices: the home filter keeps device-1's a and x; idle, the designated wins.
    const r = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 0), inst('a@device-1', 'device-1', 0), inst('x@device-1', 'device-1', 0)], { home: 'device-1', equivalents: [seg] }));
    expect(r.map((h) => [h.instance, h.adaptive])).toEqual([['a@device-1', false]]);
    // The designated block is not on the home device: nothing is filtered (an equivalent there is no reason to leave the chain's own block).
    const away = routeByCostModel(snapshot(['a'], [inst('a', 'device-0', 0), inst('x@device-1', 'device-1', 0)], { home: 'device-1', equivalents: [seg] }));
    expect(away.map((h) => [h.instance, h.adaptive])).toEqual([['a', false]]);
  });

  it('refuses a chain block with no instance with the typed not-found error', () => {
    const snap = snapshot(['a', 'missing'], [inst('a', 'device-0', 0)]);
    expect(() => routeByCostModel(snap)).toThrow(BlockllmPlacementNotFoundError);
    expect(() => routeByCostModel(snap)).toThrow(/block missing of app has no instance on any device/);
  });

  it('scheduler dispatch at hop 0 carries the token ids from the scheduler, never a crossing', () => {
    const [hop] = routeByCostModel(snapshot(['a'], [inst('a@device-1', 'device-1', 0)], { tokens: 100 }));
    expect(hop!.crossDevice).toBe(false);
    // Compute 100 tokens × 0.01 ms plus the ids over the link.
    expect(hop!.estimateMs!).toBeCloseTo(100 * 0.01 + transferMs(topology, null, 'device-1', 100 * TOKEN_BYTES), 9);
  });
});

describe('routeByCostModel with equivalent segments (adaptive serving)', () => {
  const on = (ids: string[], device = 'device-0') => ids.map((id) => inst(id, device, 0));
  const segment = (position: number, blocks: string[], rejoin: number, score = 0.99) => ({ position, blocks: blocks.map(block), rejoin, score });

  it('mid-chain: takes the equivalent instance when the designated one is loaded, not when it is idle', () => {
    const equivalents = [segment(1, ['x'], 2)];
    const loaded = routeByCostModel(snapshot(['a', 'b', 'c'], [...on(['a', 'c', 'x']), inst('b', 'device-0', 10)], { equivalents }));
    expect(loaded.map((h) => [h.instance, h.block, h.adaptive])).toEqual([
      ['a', 'a', false],
      ['x', 'x', true],
      ['c', 'c', false],
    ]);
    expect(loaded[1]!.reason).toBe('min-latency');
    // Idle, both cost the same: the tie goes to the designated block.
    const idle = routeByCostModel(snapshot(['a', 'b', 'c'], on(['a', 'b', 'c', 'x']), { equivalents }));
    expect(idle.map((h) => [h.instance, h.adaptive])).toEqual([
      ['a', false],
      ['b', false],
      ['c', false],
    ]);
    // Less loaded than the equivalent: still the designated one.
    const lighter = routeByCostModel(snapshot(['a', 'b', 'c'], [...on(['a', 'c']), inst('b', 'device-0', 2), inst('x', 'device-0', 3)], { equivalents }));
    expect(lighter.map((h) => h.instance)).toEqual(['a', 'b', 'c']);
  });

  it('never takes an equivalent with adaptive serving off', () => {
    const snap = snapshot(['a', 'b', 'c'], [...on(['a', 'c', 'x']), inst('b', 'device-0', 50)], { equivalents: [segment(1, ['x'], 2)], allowAdaptive: false });
    expect(routeByCostModel(snap).map((h) => [h.instance, h.adaptive])).toEqual([
      ['a', false],
      ['b', false],
      ['c', false],
    ]);
    // At the chain start too, with every designated instance at maxQueueLen.
    const start = snapshot(['a', 'b'], [inst('a', 'device-0', 4), ...on(['b', 'x'])], { equivalents: [segment(0, ['x'], 1)], allowAdaptive: false, maxQueueLen: 4 });
    expect(routeByCostModel(start).map((h) => h.instance)).toEqual(['a', 'b']);
  });

  it('runs a segment in place of the chain blocks it replaces and rejoins after them', () => {
    // [x, y] ≡ [a, b, c]: the route is x, y, then the chain again at d.
    const equivalents = [segment(0, ['x', 'y'], 3)];
    const instances = [inst('a', 'device-0', 4), ...on(['b', 'c', 'd', 'x']), inst('y', 'device-1', 0)];
    const r = routeByCostModel(snapshot(['a', 'b', 'c', 'd'], instances, { equivalents, maxQueueLen: 4 }));
    expect(r.map((h) => [h.instance, h.adaptive, h.crossDevice])).toEqual([
      ['x', true, false],
      ['y', true, true],
      ['d', false, true],
    ]);
  });

  it('at the chain start keeps the designated block while an instance of it is below maxQueueLen (algorithm 5.4)', () => {
    const equivalents = [segment(0, ['x'], 1)];
    // Loaded but available: the scheduler takes the designated block whatever the estimates.
    const below = routeByCostModel(snapshot(['a', 'b'], [inst('a', 'device-0', 3), ...on(['b', 'x'])], { equivalents, maxQueueLen: 4 }));
    expect(below.map((h) => h.instance)).toEqual(['a', 'b']);
    const unbounded = routeByCostModel(snapshot(['a', 'b'], [inst('a', 'device-0', 30), ...on(['b', 'x'])], { equivalents }));
    expect(unbounded.map((h) => h.instance)).toEqual(['a', 'b']);
    // Every designated instance at maxQueueLen: the available equivalent.
    const full = routeByCostModel(snapshot(['a', 'b'], [inst('a', 'device-0', 4), ...on(['b', 'x'])], { equivalents, maxQueueLen: 4 }));
    expect(full.map((h) => [h.instance, h.adaptive])).toEqual([
      ['x', true],
      ['b', false],
    ]);
  });

  it('offers no segment a block of which has no instance', () => {
    const r = routeByCostModel(snapshot(['a', 'b', 'c'], [...on(['a', 'c', 'x']), inst('b', 'device-0', 50)], { equivalents: [segment(1, ['x', 'missing'], 3)] }));
    expect(r.map((h) => h.instance)).toEqual(['a', 'b', 'c']);
  });
});

describe('the cost model inputs', () => {
  it('profiles an instance from its runs, a fresh replica from its block’s other instances, else from its bytes', () => {
    const p = new InstanceProfiler(0.5);
    expect(p.perTokenMs('a', [], 200_000)).toBe(200_000 / PRIOR_PARAM_BYTES_PER_MS);
    p.record('a', 10, 1); // 0.1 ms per token
    expect(p.measured('a')).toBeCloseTo(0.1, 12);
    p.record('a', 10, 3); // 0.3: the mean moves halfway
    expect(p.perTokenMs('a', [], 200_000)).toBeCloseTo(0.2, 12);
    p.record('a', 0, 5); // no rows: ignored
    expect(p.measured('a')).toBeCloseTo(0.2, 12);
    p.record('b', 4, 0.2);
    expect(p.perTokenMs('a@device-1', ['a', 'b'], 200_000)).toBeCloseTo((0.2 + 0.05) / 2, 12);
    p.forget('a');
    expect(p.measured('a')).toBeUndefined();
    expect(p.perTokenMs('a', ['nothing'], 200_000)).toBe(200_000 / PRIOR_PARAM_BYTES_PER_MS);
  });

  it('takes the worker link as measured once programs ran, the documented prior before', () => {
    expect(workerTransportLink({ programs: 0, overheadMs: 0 })).toEqual(WORKER_LINK_PRIOR);
    expect(workerTransportLink({ programs: 40, overheadMs: 10 })).toEqual({ bandwidth: WORKER_LINK_PRIOR.bandwidth, latencyMs: 0.25 });
    const t = localTopology(DEVICES, 5, { bandwidth: 3, latencyMs: 0.5 });
    expect(t.devices.map((d) => [d.id, d.server])).toEqual([
      ['device-0', 'local'],
      ['device-1', 'local'],
    ]);
    expect(t.intraServer).toEqual({ bandwidth: 3, latencyMs: 0.5 });
  });
});

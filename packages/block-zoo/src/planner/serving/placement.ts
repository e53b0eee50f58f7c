/**
 * Allocation, scale-out and locality-aware placement (design note §4.6–4.7, algorithm 5.9). The traffic counter
 * records how often one block's output went straight to another; placement puts each block on a device with room,
 * preferring the server of its high-traffic neighbours (or, as the frag-min baseline, the tightest fit). Scale-out
 * and rebalancing return plans; the control plane carries them out.
 */
import type { BlockId } from '../ids.js';
import { device, type DeviceSpec, type Topology } from './cost-model.js';
import { checkNonNegative, ServingCapacityError, ServingInvalidError } from './errors.js';

/** Per block pair, how often (or how many bytes) one's output went straight to the other. Unordered pairs. */
export class TrafficCounter {
  private readonly counts = new Map<string, { a: BlockId; b: BlockId; weight: number }>();

  private static key(a: BlockId, b: BlockId): [string, BlockId, BlockId] {
    return a < b ? [`${a}|${b}`, a, b] : [`${b}|${a}`, b, a];
  }

  /** One hop a → b (weight 1 per request-iteration, or its bytes). Self-hops are not traffic. */
  record(a: BlockId, b: BlockId, weight = 1): void {
    checkNonNegative(weight, 'traffic weight');
    if (a === b) return;
    const [k, x, y] = TrafficCounter.key(a, b);
    const e = this.counts.get(k);
    if (e) e.weight += weight;
    else this.counts.set(k, { a: x, b: y, weight });
  }

  count(a: BlockId, b: BlockId): number {
    return this.counts.get(TrafficCounter.key(a, b)[0])?.weight ?? 0;
  }

  /** Pairs by weight descending (ties by the pair's ids). */
  pairs(): { a: BlockId; b: BlockId; weight: number }[] {
    return [...this.counts.values()].map((e) => ({ ...e })).sort((p, q) => q.weight - p.weight || (p.a < q.a ? -1 : p.a > q.a ? 1 : p.b < q.b ? -1 : p.b > q.b ? 1 : 0));
  }

  /** Total traffic of a block with all others. */
  total(block: BlockId): number {
    let t = 0;
    for (const e of this.counts.values()) if (e.a === block || e.b === block) t += e.weight;
    return t;
  }

  /** Seeds the counter from chains: every adjacent pair of each chain, weighted by the application's rate. */
  static fromChains(chains: readonly { blocks: readonly BlockId[]; weight?: number }[]): TrafficCounter {
    const t = new TrafficCounter();
    for (const c of chains) for (let i = 0; i + 1 < c.blocks.length; i++) t.record(c.blocks[i]!, c.blocks[i + 1]!, c.weight ?? 1);
    return t;
  }
}

export interface PlacedInstance {
  instance: string;
  block: BlockId;
  device: string;
  bytes: number;
  /**
   * The share of its device's time the instance is expected to keep busy (0–1 per instance; see
   * {@link PlacementOptions.maxLoadPerDevice}). Absent: 0.
   */
  load?: number;
}

export interface PlacementOptions {
  /** 'locality' (BlockLLM) or 'frag-min' (best fit, the baseline). Default 'locality'. */
  policy?: 'locality' | 'frag-min';
  /** Bytes kept free on every device for request data. Default 0. */
  headroomBytes?: number;
  /** Weight of the fragmentation penalty (leftover fraction of the device) against locality. Default 1e-3. */
  lambda?: number;
  /**
   * A device already holding instances takes a new one only while its placed bytes stay within this (an empty
   * device takes any block that fits). Spreads an initial placement over the devices instead of filling the first
   * ones (the blocks' load goes where their bytes go). Default: no limit.
   */
  maxBytesPerDevice?: number;
  /**
   * Each block's expected load: the share of one device's time an instance of it keeps busy (its rows per ms × its
   * step cost). Placement balances time as well as bytes: a block is small in bytes yet busy when every token of an
   * application passes through it (a fine-tune's own half-layers), and packing many such blocks on one GPU makes it
   * the chain's bottleneck while other GPUs idle.
   */
  blockLoad?: ReadonlyMap<BlockId, number>;
  /**
   * A device already holding instances takes a new one only while the expected load of what it holds (each
   * instance's `load`) plus the new block's stays within this (an empty device takes any block). Soft in
   * placeChains, as `maxBytesPerDevice` is. Default: no limit.
   */
  maxLoadPerDevice?: number;
  /**
   * Recent busy fraction of each device (0–1). When given, devices at or above `saturatedLoad` are passed over while
   * any device below it has room: scaling out onto a saturated GPU adds no capacity (§4.6 scales "onto more devices").
   */
  deviceLoad?: ReadonlyMap<string, number>;
  /** Default 0.9. */
  saturatedLoad?: number;
  /**
   * The bytes `block` would add on `device` next to what is placed there (instances of one device share their
   * tensors, stored once: a fused fine-tune block next to its foundation block adds only its own tensors). Default:
   * the block's fixed size, wherever it goes.
   */
  bytesOn?: (block: BlockId, device: string, placed: readonly PlacedInstance[]) => number;
}

/** Free bytes per device after the placed instances (and the headroom). */
export function freeBytes(topology: Topology, placed: readonly PlacedInstance[], headroomBytes = 0): Map<string, number> {
  const free = new Map(topology.devices.map((d) => [d.id, d.memoryBytes - headroomBytes]));
  for (const p of placed) free.set(p.device, free.get(p.device)! - p.bytes);
  return free;
}

/**
 * The device for a new instance of `block` (pickDevice): among devices with room that do not hold the block yet,
 * the highest Σ traffic(block, n) over neighbours n on the device's server, minus λ × the leftover fraction; or for
 * frag-min, the smallest sufficient free memory. Ties by device order. Null when no device has room.
 */
export function pickDevice(topology: Topology, placed: readonly PlacedInstance[], block: BlockId, bytes: number, traffic: TrafficCounter, options: PlacementOptions = {}): DeviceSpec | null {
  const policy = options.policy ?? 'locality';
  const lambda = options.lambda ?? 1e-3;
  const free = freeBytes(topology, placed, options.headroomBytes ?? 0);
  const cap = options.maxBytesPerDevice ?? Number.POSITIVE_INFINITY;
  const held = (d: DeviceSpec) => placed.reduce((n, p) => (p.device === d.id ? n + p.bytes : n), 0);
  const loadCap = options.maxLoadPerDevice ?? Number.POSITIVE_INFINITY;
  const load = options.blockLoad?.get(block) ?? 0;
  if (!(load >= 0 && Number.isFinite(load))) throw new ServingInvalidError(`blockLoad of ${block} must be a finite number ≥ 0, got ${load}`);
  const heldLoad = (d: DeviceSpec) => placed.reduce((n, p) => (p.device === d.id ? n + (p.load ?? 0) : n), 0);
  const empty = (d: DeviceSpec) => !placed.some((p) => p.device === d.id);
  const need = new Map(topology.devices.map((d) => [d.id, options.bytesOn ? options.bytesOn(block, d.id, placed) : bytes]));
  let fits = topology.devices.filter((d) => {
    const n = need.get(d.id)!;
    return free.get(d.id)! >= n && !placed.some((p) => p.device === d.id && p.block === block) && (empty(d) || (held(d) + n <= cap && heldLoad(d) + load <= loadCap));
  });
  if (options.deviceLoad) {
    const busy = options.deviceLoad;
    const limit = options.saturatedLoad ?? 0.9;
    const spare = fits.filter((d) => (busy.get(d.id) ?? 0) < limit);
    if (spare.length > 0) fits = spare;
  }
  if (fits.length === 0) return null;
  const score = (d: DeviceSpec) => {
    const leftover = (free.get(d.id)! - need.get(d.id)!) / d.memoryBytes;
    if (policy === 'frag-min') return -leftover;
    let local = 0;
    for (const p of placed) if (p.block !== block && device(topology, p.device).server === d.server) local += traffic.count(block, p.block);
    return local - lambda * leftover;
  };
  let best = fits[0]!;
  let bestScore = score(best);
  for (const d of fits.slice(1)) {
    const s = score(d);
    if (s > bestScore) (best = d), (bestScore = s);
  }
  return best;
}

/**
 * Places one instance of every block the chains need (an initial placement), each on pickDevice's choice. For
 * 'locality' blocks are taken so that a chain's blocks come one after another: next is the unplaced block with the
 * most traffic to blocks already placed (ties: the most traffic overall, then first appearance in the chains). The
 * `maxBytesPerDevice` and `maxLoadPerDevice` caps are soft: a block that fits under them nowhere goes wherever it
 * fits. Each placed instance carries its block's `blockLoad`. The
 * 'frag-min' baseline is best-fit decreasing: largest block first (ties: first appearance). Throws when a block fits
 * on no device.
 */
export function placeChains(topology: Topology, chains: readonly (readonly BlockId[])[], blockBytes: ReadonlyMap<BlockId, number>, traffic: TrafficCounter, options: PlacementOptions = {}): PlacedInstance[] {
  const remaining: BlockId[] = [];
  for (const c of chains) for (const b of c) if (!remaining.includes(b)) remaining.push(b);
  const totals = new Map(remaining.map((b) => [b, traffic.total(b)]));
  const placed: PlacedInstance[] = [];
  const fragMin = (options.policy ?? 'locality') === 'frag-min';
  while (remaining.length > 0) {
    let pick = 0;
    let pickKey = [-1, -1];
    remaining.forEach((b, i) => {
      const toPlaced = placed.reduce((t, p) => t + traffic.count(b, p.block), 0);
      const key = fragMin ? [blockBytes.get(b) ?? 0, 0] : [toPlaced, totals.get(b)!];
      if (key[0]! > pickKey[0]! || (key[0] === pickKey[0] && key[1]! > pickKey[1]!)) (pick = i), (pickKey = key);
    });
    const block = remaining.splice(pick, 1)[0]!;
    const bytes = blockBytes.get(block);
    if (bytes === undefined) throw new ServingInvalidError(`no size given for block ${block}`);
    // The per-device caps are soft here: a block that fits nowhere under them goes where it fits at all.
    const { maxBytesPerDevice: _cap, maxLoadPerDevice: _loadCap, ...uncapped } = options;
    const d = pickDevice(topology, placed, block, bytes, traffic, options) ?? pickDevice(topology, placed, block, bytes, traffic, uncapped);
    if (!d) {
      const most = Math.max(...freeBytes(topology, placed, options.headroomBytes ?? 0).values());
      throw new ServingCapacityError(bytes, most, `block ${block} (${bytes} bytes) fits on no device: the most free memory left is ${most} bytes`);
    }
    const load = options.blockLoad?.get(block);
    const added = options.bytesOn ? options.bytesOn(block, d.id, placed) : bytes;
    placed.push({ instance: `${block}@${d.id}`, block, device: d.id, bytes: added, ...(load !== undefined ? { load } : {}) });
  }
  return placed;
}

/** Traffic between blocks whose (first) instances sit on different servers: the bytes that cross the slow links. */
export function crossServerTraffic(topology: Topology, placed: readonly PlacedInstance[], traffic: TrafficCounter): number {
  const server = new Map<BlockId, string>();
  for (const p of placed) if (!server.has(p.block)) server.set(p.block, device(topology, p.device).server);
  let t = 0;
  for (const e of traffic.pairs()) if (server.has(e.a) && server.has(e.b) && server.get(e.a) !== server.get(e.b)) t += e.weight;
  return t;
}

export interface ScaleCandidate {
  instance: string;
  block: BlockId;
  device: string;
  bytes: number;
  /** Queued request ids in queue order. */
  queue: readonly string[];
  /** Queue length that saturates the device's memory (design note 5.0). */
  maxQueueLen: number;
}

export interface ScaleOut {
  from: string;
  block: BlockId;
  device: string;
  instance: string;
  /** The queued requests to move to the new instance (the later half), with their KV. */
  move: readonly string[];
}

/**
 * Scale-out (autoscale): instances whose queue exceeds t × maxQueueLen, most loaded first, each get a new instance
 * on pickDevice's choice (locality with the block's traffic neighbours), and the later half of their queue moves
 * there. An instance for which no device has room is left as it is.
 */
export function planScaleOut(topology: Topology, placed: readonly PlacedInstance[], candidates: readonly ScaleCandidate[], traffic: TrafficCounter, options: PlacementOptions & { threshold?: number } = {}): ScaleOut[] {
  const t = options.threshold ?? 0.8;
  if (!(t > 0 && t <= 1)) throw new ServingInvalidError(`threshold must be in (0, 1], got ${t}`);
  const load = (c: ScaleCandidate) => c.queue.length / Math.max(1, c.maxQueueLen);
  const hot = candidates.filter((c) => c.queue.length > t * c.maxQueueLen).sort((a, b) => load(b) - load(a) || (a.instance < b.instance ? -1 : 1));
  const now = [...placed];
  const out: ScaleOut[] = [];
  for (const c of hot) {
    const d = pickDevice(topology, now, c.block, c.bytes, traffic, options);
    if (!d) continue;
    const instance = `${c.block}@${d.id}`;
    now.push({ instance, block: c.block, device: d.id, bytes: c.bytes });
    out.push({ from: c.instance, block: c.block, device: d.id, instance, move: c.queue.slice(Math.ceil(c.queue.length / 2)) });
  }
  return out;
}

export interface PlacementMove {
  instance: string;
  block: BlockId;
  from: string;
  to: string;
  /** Cross-server traffic removed by the move (per counted period). */
  gain: number;
}

/**
 * Re-placement on a changed traffic pattern (rebalancePlacement): for pairs by traffic, if the two sit on different
 * servers, move the smaller instance to a device with room on the other's server, when the traffic it stops
 * crossing × horizonCost exceeds moveCost(bytes). Moves are applied to the plan as it is built, so each is
 * checked against the placement the earlier ones leave.
 */
export function planRebalance(topology: Topology, placed: readonly PlacedInstance[], traffic: TrafficCounter, options: { headroomBytes?: number; valuePerUnit: number; moveCost: (bytes: number) => number }): PlacementMove[] {
  const now = placed.map((p) => ({ ...p }));
  const moves: PlacementMove[] = [];
  const serverOf = (d: string) => device(topology, d).server;
  const crossOf = (p: PlacedInstance, server: string) =>
    traffic.pairs().reduce((t, e) => {
      const other = e.a === p.block ? e.b : e.b === p.block ? e.a : null;
      if (other === null) return t;
      const o = now.find((x) => x.block === other);
      return o && serverOf(o.device) !== server ? t + e.weight : t;
    }, 0);
  for (const e of traffic.pairs()) {
    const a = now.find((p) => p.block === e.a);
    const b = now.find((p) => p.block === e.b);
    if (!a || !b || serverOf(a.device) === serverOf(b.device)) continue;
    const [mover, anchor] = a.bytes <= b.bytes ? [a, b] : [b, a];
    const free = freeBytes(topology, now, options.headroomBytes ?? 0);
    const target = topology.devices.find((d) => d.server === serverOf(anchor.device) && free.get(d.id)! >= mover.bytes && !now.some((p) => p.device === d.id && p.block === mover.block));
    if (!target) continue;
    const gain = crossOf(mover, serverOf(mover.device)) - crossOf(mover, target.server);
    if (gain * options.valuePerUnit <= options.moveCost(mover.bytes)) continue;
    moves.push({ instance: mover.instance, block: mover.block, from: mover.device, to: target.id, gain });
    mover.device = target.id;
  }
  return moves;
}

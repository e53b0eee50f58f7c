/**
 * Adaptive serving (design note §4.3, algorithms 5.4–5.5) and the byte cost model that makes it computable (§4.8).
 * Everything is plain data in and plain data out: the topology (devices, servers, link bandwidths), each block's
 * profiled compute time, and a snapshot of the candidate instances. Times are milliseconds, sizes bytes, bandwidths
 * bytes per millisecond (1 GB/s = 1e6 B/ms).
 */
import { KV_PAGE_SIZE } from '@tessera/core';

import type { BlockId } from '../ids.js';
import type { BlockManifest } from '../manifest.js';
import { checkNonNegative, checkPositive, ServingInvalidError, ServingNotFoundError } from './errors.js';

/** One accelerator. */
export interface DeviceSpec {
  id: string;
  /** The server it sits in: devices of one server talk over the intra-server link (NVLink / PCIe). */
  server: string;
  /** Memory for blocks and request data. */
  memoryBytes: number;
  /** Device memory bandwidth (evicting a block costs its bytes over this). */
  memBandwidth: number;
  /** Storage/host → device bandwidth (loading a block costs its bytes over this, design note A11). */
  loadBandwidth: number;
}

/** A link: α + bytes / β. */
export interface LinkSpec {
  bandwidth: number;
  latencyMs: number;
}

export interface Topology {
  devices: readonly DeviceSpec[];
  intraServer: LinkSpec;
  interServer: LinkSpec;
  /** The server the scheduler runs on (its dispatches carry token data from there). */
  schedulerServer: string;
}

/** A block's profiled compute time: fixed + perRow × rows + perToken × tokens (prefill tokens, or 1 per decode row). */
export interface ComputeProfile {
  fixedMs: number;
  perRowMs: number;
  perTokenMs: number;
}

/** The shape of one batch (or one request's share of one): rows and the new tokens they carry. */
export interface BatchShape {
  rows: number;
  tokens: number;
}

export function computeMs(profile: ComputeProfile, shape: BatchShape): number {
  if (shape.rows === 0) return 0;
  return profile.fixedMs + profile.perRowMs * shape.rows + profile.perTokenMs * shape.tokens;
}

/** The bytes a block hands on and keeps per token (§4.8), from its manifest. */
export interface BlockBytes {
  blockId: BlockId;
  paramBytes: number;
  kvBytesPerToken: number;
  activationBytesPerToken: number;
}

export function blockBytesOf(m: BlockManifest): BlockBytes {
  return { blockId: m.blockId, paramBytes: m.paramBytes, kvBytesPerToken: m.kvBytesPerToken, activationBytesPerToken: m.activationBytesPerToken };
}

/** Activation hand-off of a hop: B × L × d × bytes (§4.8), i.e. tokens × the block's activation bytes per token. */
export function activationBytes(block: BlockBytes, tokens: number): number {
  return tokens * block.activationBytesPerToken;
}

/** A request's KV in one block for `contextTokens` tokens, rounded up to whole pages (the unit that moves). */
export function kvBytes(block: BlockBytes, contextTokens: number, pageSize = KV_PAGE_SIZE): number {
  return Math.ceil(contextTokens / pageSize) * pageSize * block.kvBytesPerToken;
}

export function device(topology: Topology, id: string): DeviceSpec {
  const d = topology.devices.find((x) => x.id === id);
  if (!d) throw new ServingNotFoundError('device', id);
  return d;
}

/** The link between two devices (or from the scheduler when `from` is null); null on the same device. */
export function linkBetween(topology: Topology, from: string | null, to: string): LinkSpec | null {
  const dst = device(topology, to);
  if (from === null) return dst.server === topology.schedulerServer ? topology.intraServer : topology.interServer;
  if (from === to) return null;
  return device(topology, from).server === dst.server ? topology.intraServer : topology.interServer;
}

/** α + bytes / β over the link between the two (0 on one device). */
export function transferMs(topology: Topology, from: string | null, to: string, bytes: number): number {
  checkNonNegative(bytes, 'transfer bytes');
  const link = linkBetween(topology, from, to);
  if (link === null || bytes === 0) return 0;
  return link.latencyMs + bytes / link.bandwidth;
}

/** Rates of the two halves of a KV migration (§4.4): copy and chunked-prefill recompute, in pages per ms. */
export interface MigrationRates {
  copyPagesPerMs: number;
  recomputePagesPerMs: number;
  /** Launch overhead of each chunked-prefill chunk. */
  chunkOverheadMs: number;
  /** Pages per recompute chunk. */
  chunkPages: number;
}

/** Derives the copy rate from the link and the recompute rate from the block's profile (one page = 16 tokens). */
export function migrationRates(topology: Topology, from: string, to: string, block: BlockBytes, profile: ComputeProfile, chunkPages = 4): MigrationRates {
  const link = linkBetween(topology, from, to);
  const pageBytes = KV_PAGE_SIZE * block.kvBytesPerToken;
  const copy = link === null || pageBytes === 0 ? Number.POSITIVE_INFINITY : link.bandwidth / pageBytes;
  const perPageMs = profile.perTokenMs * KV_PAGE_SIZE;
  return {
    copyPagesPerMs: copy,
    recomputePagesPerMs: perPageMs > 0 ? 1 / perPageMs : Number.POSITIVE_INFINITY,
    chunkOverheadMs: profile.fixedMs + profile.perRowMs,
    chunkPages,
  };
}

/** T_mig ≈ P / (r_c + r_r) plus a launch overhead per recompute chunk (§4.8). 0 pages cost 0. */
export function kvMigrationMs(pages: number, rates: MigrationRates): number {
  checkNonNegative(pages, 'pages');
  if (pages === 0) return 0;
  const rate = rates.copyPagesPerMs + rates.recomputePagesPerMs;
  if (!Number.isFinite(rate)) return 0;
  const recomputed = Number.isFinite(rates.recomputePagesPerMs) ? (pages * rates.recomputePagesPerMs) / rate : pages;
  return pages / rate + Math.ceil(recomputed / Math.max(1, rates.chunkPages)) * rates.chunkOverheadMs;
}

/** Everything one latency estimate needs about one candidate (design note §4.3, algorithm 5.5). */
export interface LatencyInput {
  dispatcher: 'scheduler' | 'agent';
  /** Profile of the candidate's block. */
  profile: ComputeProfile;
  /** The batches already queued at the candidate. */
  queued: readonly BatchShape[];
  /** This request's (or packed batch's) share. */
  request: BatchShape;
  /** D_req for the scheduler (token data), the activation bytes for an agent. */
  transferBytes: number;
  /** The sending device (null: the scheduler). */
  from: string | null;
  to: string;
  /** KV migration time to bring the request's KV to the candidate (0 when it owns it, or at the chain start). */
  kvMigrationMs: number;
  /** Whether the candidate's block is resident on its device (T_load = 0). */
  resident: boolean;
  /** Whether the device is idle (loading overlaps the transfer) or busy (loading is exposed). */
  deviceIdle: boolean;
  /** Bytes of the block evicted to make room (b'); 0 when there is room. */
  victimBytes: number;
  /** Bytes of the candidate's block (b), loaded when not resident. */
  blockBytes: number;
  /**
   * Multiplexing slowdown on the candidate's device (§6: the profiler measures block instances co-running on one
   * GPU): the profiled compute times of T_queue and T_compute are stretched by it. Default 1 (the device to itself).
   */
  slowdown?: number;
  /**
   * Remaining compute of the batch running at the candidate now (part of T_queue: the request waits for it).
   * Default 0.
   */
  runningMs?: number;
  /**
   * The request will be packed into a batch the candidate runs anyway (it has a batch running or queued): T_compute
   * is then its marginal cost, rows and tokens without the block's fixed step cost (design note 5.5 [I]). Default
   * false: the request's own batch, fixed cost included.
   */
  packed?: boolean;
}

export interface LatencyEstimate {
  queueMs: number;
  computeMs: number;
  transferMs: number;
  loadMs: number;
  totalMs: number;
}

/** Latency(d_c) = T_queue + T_compute + T_transfer + T_load (§4.3, A11, A12). */
export function estimateLatency(topology: Topology, input: LatencyInput): LatencyEstimate {
  const slow = input.slowdown === undefined ? 1 : checkPositive(input.slowdown, 'slowdown');
  if (slow < 1) throw new ServingInvalidError(`slowdown must be ≥ 1 (co-running instances only slow a block down), got ${slow}`);
  const queueMs = slow * input.queued.reduce((t, b) => t + computeMs(input.profile, b), 0) + checkNonNegative(input.runningMs ?? 0, 'runningMs');
  const own = computeMs(input.profile, input.request);
  const compute = slow * (input.packed === true && input.request.rows > 0 ? own - input.profile.fixedMs : own);
  if (input.dispatcher === 'scheduler' && input.kvMigrationMs !== 0) throw new ServingInvalidError(`a scheduler dispatch carries no KV, got kvMigrationMs ${input.kvMigrationMs}`);
  const transfer = transferMs(topology, input.from, input.to, input.transferBytes) + checkNonNegative(input.kvMigrationMs, 'kvMigrationMs');
  let loadMs = 0;
  if (!input.resident) {
    const d = device(topology, input.to);
    const swap = input.victimBytes / d.memBandwidth + input.blockBytes / d.loadBandwidth;
    loadMs = input.deviceIdle ? Math.max(swap - transfer, 0) : swap;
  }
  return { queueMs, computeMs: compute, transferMs: transfer, loadMs, totalMs: queueMs + compute + transfer + loadMs };
}

/** A candidate instance for a hop, as the caller's snapshot sees it. */
export interface HopCandidate {
  instance: string;
  block: BlockId;
  device: string;
  family: string;
  /** The chain's own block (true) or an equivalent (adaptive serving). */
  designated: boolean;
  /** A virtual candidate: the block deployed there on choice (scheduler dispatch, step 3). */
  virtual?: boolean;
  /** Draining instances are never the KV owner of choice. */
  draining?: boolean;
  /** Whether it is available: exists and its queue is below the maximum (design note 5.4 [I]). */
  available: boolean;
  latency: LatencyInput;
}

export interface HopRequest {
  requestId: string;
  /** The family the request's hidden state is in now. */
  space: string;
  /** The instance holding the request's KV for this hop's position, if any. */
  kvOwner: string | null;
  /** Whether the owner's device has room for the request's data (rule 1's memory condition). */
  ownerHasRoom: boolean;
  allowAdaptive: boolean;
  /** The sending instance's device (null: the scheduler). */
  fromDevice: string | null;
}

export interface HopChoice {
  instance: string;
  device: string;
  block: BlockId;
  family: string;
  reason: 'kv-owner' | 'min-latency';
  /** Whether an equivalent block serves the hop (counted as adaptively served). */
  adaptive: boolean;
  /** Whether the chosen instance must be deployed first. */
  deploy: boolean;
  /** Stitches to insert before sending: from the request's space into the chosen family (empty when equal). */
  stitch: { fromFamily: string; toFamily: string } | null;
  estimate: LatencyEstimate | null;
}

export interface SelectorOptions {
  /** Estimates closer than this tie (ms); default 1e-6. */
  tieMs?: number;
  /**
   * Scheduler dispatch: 'paper' tries designated, then equivalent, then virtual instances in order; 'argmin' takes
   * one argmin over all three sets (design note 5.4 [I] variant). Default 'paper'.
   */
  entry?: 'paper' | 'argmin';
}

/**
 * Chooses the instance for a hop (algorithm 5.5; at the chain start, algorithm 5.4). Rule 1: the KV owner when its
 * device has room. Otherwise the minimum latency estimate; ties prefer the owner, then the designated block, then
 * the sender's server, then the instance id (so the same snapshot always gives the same answer).
 */
export function chooseInstance(topology: Topology, request: HopRequest, candidates: readonly HopCandidate[], options: SelectorOptions = {}): HopChoice {
  const tie = options.tieMs ?? 1e-6;
  let pool = candidates.filter((c) => c.designated || request.allowAdaptive);
  if (pool.length === 0) throw new ServingNotFoundError('instance', request.requestId, `no candidate instance for request ${request.requestId}${request.allowAdaptive ? '' : ' (adaptive serving is off for it)'}`);
  const owner = request.kvOwner === null ? undefined : pool.find((c) => c.instance === request.kvOwner && !c.draining && !c.virtual);
  if (owner && request.ownerHasRoom) return choice(owner, request, 'kv-owner', null);
  if (request.fromDevice === null && (options.entry ?? 'paper') === 'paper') {
    // Scheduler dispatch in the paper's order: an available designated instance, an available equivalent, a new one.
    const tiers = [pool.filter((c) => !c.virtual && c.available && c.designated), pool.filter((c) => !c.virtual && c.available), pool.filter((c) => c.virtual)];
    pool = tiers.find((t) => t.length > 0) ?? pool;
  }
  const fromServer = request.fromDevice === null ? topology.schedulerServer : device(topology, request.fromDevice).server;
  const scored = pool.map((c) => ({ c, e: estimateLatency(topology, c.latency) }));
  scored.sort((a, b) => {
    if (Math.abs(a.e.totalMs - b.e.totalMs) >= tie) return a.e.totalMs - b.e.totalMs;
    const rank = (x: HopCandidate) => [x.instance === request.kvOwner ? 0 : 1, x.designated ? 0 : 1, device(topology, x.device).server === fromServer ? 0 : 1];
    const ra = rank(a.c);
    const rb = rank(b.c);
    for (let i = 0; i < ra.length; i++) if (ra[i] !== rb[i]) return ra[i]! - rb[i]!;
    return a.c.instance < b.c.instance ? -1 : a.c.instance > b.c.instance ? 1 : 0;
  });
  const best = scored[0]!;
  return choice(best.c, request, 'min-latency', best.e);
}

function choice(c: HopCandidate, request: HopRequest, reason: HopChoice['reason'], estimate: LatencyEstimate | null): HopChoice {
  return {
    instance: c.instance,
    device: c.device,
    block: c.block,
    family: c.family,
    reason,
    adaptive: !c.designated,
    deploy: c.virtual === true,
    stitch: c.family === request.space ? null : { fromFamily: request.space, toFamily: c.family },
    estimate,
  };
}

/** Checks a topology: unique device ids, positive bandwidths, non-negative latencies. */
export function checkTopology(topology: Topology): Topology {
  const ids = new Set<string>();
  for (const d of topology.devices) {
    if (ids.has(d.id)) throw new ServingInvalidError(`device ${JSON.stringify(d.id)} appears twice in the topology`);
    ids.add(d.id);
    checkPositive(d.memoryBytes, `device ${d.id} memoryBytes`);
    checkPositive(d.memBandwidth, `device ${d.id} memBandwidth`);
    checkPositive(d.loadBandwidth, `device ${d.id} loadBandwidth`);
  }
  for (const [name, l] of [['intraServer', topology.intraServer], ['interServer', topology.interServer]] as const) {
    checkPositive(l.bandwidth, `${name}.bandwidth`);
    checkNonNegative(l.latencyMs, `${name}.latencyMs`);
  }
  return topology;
}

/**
 * A new sequence's route by the instance-selection cost model (design note §4.3, algorithms 5.4–5.5): each hop of
 * its chain goes to the instance that @tessera/block-zoo's `chooseInstance` picks among the instances of the hop's
 * block and, with adaptive serving, of the equivalent segments the zoo records there (`hopRoutes`: a chosen segment
 * runs instead of the chain blocks it replaces, and the route rejoins the chain after them) — hop 0 as a
 * scheduler dispatch, every later hop as an agent dispatch from the previous hop's device — over a snapshot of
 * what the device set knows: where each instance lives, how many live sequences are routed through it (its queue:
 * each decodes one token per step there), its profiled time per token, and the link between devices (the worker
 * transport). Routes stay sticky once chosen (the KV lives there), so a snapshot is taken only for a sequence
 * without one. Everything here is a pure function of the snapshot, or a small accumulator of measurements.
 */
import { activationBytes, type BlockBytes, chooseInstance, type HopCandidate, type HopChoice, type LinkSpec, type Topology } from '@tessera/block-zoo';

import { BlockllmPlacementNotFoundError } from '../errors.js';

/**
 * The worker transport between two device threads before anything was measured: a postMessage round trip between
 * worker threads is tens of µs (α = 0.05 ms), and the hidden rows are copied out of the device's tensor into a
 * transferred buffer and back in, a host memcpy or two (β = 2 GB/s = 2e6 B/ms, a conservative figure for one core).
 */
export const WORKER_LINK_PRIOR: LinkSpec = { bandwidth: 2e6, latencyMs: 0.05 };

/** Bytes per token id the scheduler hands to a chain's first block (D_req of §4.3: int32 ids). */
export const TOKEN_BYTES = 4;

/**
 * The per-token time of an instance no step has timed yet, when no other instance of its block has been timed
 * either: a decode token reads every parameter of the block once; 1e6 B/ms (1 GB/s) is a single CPU core's
 * f32 GEMV rate to within a small factor. Only its ratio to the link's cost matters before the first steps.
 */
export const PRIOR_PARAM_BYTES_PER_MS = 1e6;

/** The link between the device threads: the measured overhead per device program once steps ran, else the prior. */
export function workerTransportLink(measured: { programs: number; overheadMs: number }): LinkSpec {
  if (measured.programs <= 0 || !Number.isFinite(measured.overheadMs)) return { ...WORKER_LINK_PRIOR };
  return { bandwidth: WORKER_LINK_PRIOR.bandwidth, latencyMs: Math.max(0, measured.overheadMs) / measured.programs };
}

/**
 * One machine: every device on one server, the intra-server link being the worker transport (§4.8's table, here).
 * The memory and load bandwidths only enter T_load, which is 0 for a deployed instance.
 */
export function localTopology(devices: readonly string[], memoryBytes: number, link: LinkSpec): Topology {
  return {
    devices: devices.map((id) => ({ id, server: 'local', memoryBytes, memBandwidth: 1e6, loadBandwidth: 1e6 })),
    intraServer: { ...link },
    interServer: { ...link },
    schedulerServer: 'local',
  };
}

/**
 * Per-instance step timings, as the devices report them (each block run's rows and wall time): an exponentially
 * weighted mean of ms per row (a row is a token: a prompt token of a prefill or the one token of a decode).
 */
export class InstanceProfiler {
  private readonly perRow = new Map<string, number>();

  constructor(private readonly weight = 0.25) {}

  record(instance: string, rows: number, ms: number): void {
    if (!(rows > 0) || !Number.isFinite(ms) || ms < 0) return;
    const sample = ms / rows;
    const last = this.perRow.get(instance);
    this.perRow.set(instance, last === undefined ? sample : last + this.weight * (sample - last));
  }

  /** The measured ms per token of an instance, or undefined before its first timed run. */
  measured(instance: string): number | undefined {
    return this.perRow.get(instance);
  }

  /**
   * The per-token time the cost model uses: the instance's own, else the mean of the other instances of its block
   * (a fresh replica runs the same block), else the prior from the block's parameter bytes.
   */
  perTokenMs(instance: string, siblings: readonly string[], paramBytes: number): number {
    const own = this.perRow.get(instance);
    if (own !== undefined) return own;
    const known = siblings.map((s) => this.perRow.get(s)).filter((x): x is number => x !== undefined);
    if (known.length > 0) return known.reduce((a, b) => a + b, 0) / known.length;
    return Math.max(0, paramBytes) / PRIOR_PARAM_BYTES_PER_MS;
  }

  /** Forgets an instance (evicted; a migrated instance's key runs elsewhere and is profiled anew). */
  forget(instance: string): void {
    this.perRow.delete(instance);
  }
}

/** A block of the sequence's chain (or of an equivalent segment), in order. */
export interface RouteBlock {
  blockId: string;
  /** For error messages (formatBlock). */
  label: string;
  /** Its bytes (blockBytesOf): the activation hand-off of the hop after it, and its parameters for the prior. */
  bytes: BlockBytes;
}

/**
 * An equivalent segment (adaptive serving, §3.3 / §4.3): from chain position `position`, `blocks` (another weight
 * set's, of the same family: no stitch) may run instead of the chain's blocks up to `rejoin` (exclusive), where the
 * route continues on the chain. From block-zoo's `hopRoutes` (its non-designated routes).
 */
export interface RouteEquivalent {
  position: number;
  blocks: readonly RouteBlock[];
  rejoin: number;
  /** The equivalence score of the zoo's edge. */
  score: number;
}

/** A deployed instance as the set sees it now. */
export interface RouteInstance {
  instance: string;
  block: string;
  device: string;
  /** Live sequences routed through it (each decodes one token per step there: its queue). */
  sequences: number;
  /** Profiled time per token on its device (InstanceProfiler.perTokenMs). */
  perTokenMs: number;
}

export interface RouteSnapshot {
  requestId: string;
  app: string;
  /** New tokens of the sequence's first step (its prompt): the request's share of each hop and what it hands on. */
  tokens: number;
  chain: readonly RouteBlock[];
  instances: readonly RouteInstance[];
  topology: Topology;
  /**
   * The instances that hold the sequence's KV (a live sequence whose route lost an instance keeps the rest: rule 1);
   * nulls are ignored. Absent: a new sequence, no KV anywhere.
   */
  owners?: readonly (string | null)[];
  /** The equivalent segments of the chain (any order). Absent: none. */
  equivalents?: readonly RouteEquivalent[];
  /** Adaptive serving (chooseInstance's allowAdaptive): false keeps every hop on the chain's own blocks. Default true. */
  allowAdaptive?: boolean;
  /**
   * maxQueueLen of algorithm 5.4: an instance routed this many sequences is not "available" to a scheduler dispatch
   * (hop 0), which takes an available instance of the designated block first, then an available equivalent, and
   * only then any instance by its estimate. Default: no bound (every instance is available).
   */
  maxQueueLen?: number;
  /**
   * The device the sequence's cohort steps on (cohort homes). At a hop whose designated block has an instance
   * there, the candidates are that device's: a cohort whose sequences all run on one device steps as one program
   * there, while a cohort spread over two devices ends its step with the slower of two programs and holds both
   * devices' turns. A hop whose designated block is not there chooses among every device (and a KV owner, rule 1,
   * keeps the hop wherever it is). Absent: every device.
   */
  home?: string;
}

export interface RouteHop {
  instance: string;
  device: string;
  /** The block the hop runs (the chain's own, or one of an equivalent segment's). */
  block: string;
  /** The hop runs a block of an equivalent segment instead of the chain's own (adaptively served). */
  adaptive: boolean;
  reason: HopChoice['reason'];
  /** The hop's rows come from another device (hop 0 comes from the scheduler: never a crossing). */
  crossDevice: boolean;
  /** The chosen candidate's estimate (null when rule 1 chose the KV owner without estimating). */
  estimateMs: number | null;
}

/** One way to serve the chain from a position: the chain's own block, or an equivalent segment. */
interface Option {
  blocks: readonly RouteBlock[];
  rejoin: number;
  designated: boolean;
}

/**
 * The route of one sequence, hop by hop. At chain position p the options are the chain's own block (rejoining at
 * p + 1) and, with adaptive serving, the equivalent segments starting at p; the candidates are the deployed
 * instances of each option's first block (an instance offered by two segments counts once, for the better-scored
 * one). A chosen segment's later blocks are hops among their own instances; after its last block the route rejoins
 * the chain. Each candidate gets T_queue = its routed sequences × its per-token time, T_compute = the prompt's tokens
 * × the same, T_transfer = the token ids from the scheduler (hop 0) or the previous block's activations over the
 * worker link when the previous hop is on another device (0 on the same one), T_load = 0 (deployed instances are
 * resident). Ties go to the KV owner, then the designated block, then the instance id (chooseInstance's rules), so
 * one snapshot always gives one route. Throws BlockllmPlacementNotFoundError when a block to run has no instance.
 */
export function routeByCostModel(s: RouteSnapshot): RouteHop[] {
  const space = s.app;
  const allowAdaptive = s.allowAdaptive ?? true;
  const maxQueueLen = s.maxQueueLen ?? Number.POSITIVE_INFINITY;
  const owners = new Set((s.owners ?? []).filter((o): o is string => o !== null));
  const hops: RouteHop[] = [];
  let from: string | null = null;
  let previous: RouteBlock | null = null;

  // One hop over the deployed instances of the options' first blocks; returns the option chosen.
  const hop = (options: readonly Option[]): Option => {
    const candidates: (HopCandidate & { option: Option })[] = [];
    for (const option of options) {
      const block = option.blocks[0]!;
      const instances = s.instances.filter((x) => x.block === block.blockId && !candidates.some((c) => c.instance === x.instance));
      if (instances.length === 0 && option.designated) throw new BlockllmPlacementNotFoundError(`block ${block.label} of ${s.app} has no instance on any device`);
      const transferBytes = previous === null ? s.tokens * TOKEN_BYTES : activationBytes(previous.bytes, s.tokens);
      for (const x of instances) {
        candidates.push({
          option,
          instance: x.instance,
          block: block.blockId,
          device: x.device,
          // Same-family segments only (the executor runs no stitch): the hidden state stays in the app's space.
          family: space,
          designated: option.designated,
          // Admission bounds the running sequences (--max-batch) and a full KV cache rolls the step back: every
          // deployed instance can take the sequence; maxQueueLen only orders a scheduler dispatch's candidates.
          available: x.sequences < maxQueueLen,
          latency: {
            dispatcher: from === null ? 'scheduler' : 'agent',
            profile: { fixedMs: 0, perRowMs: 0, perTokenMs: x.perTokenMs },
            queued: x.sequences > 0 ? [{ rows: x.sequences, tokens: x.sequences }] : [],
            request: { rows: 1, tokens: s.tokens },
            transferBytes,
            from,
            to: x.device,
            kvMigrationMs: 0,
            resident: true,
            deviceIdle: x.sequences === 0,
            victimBytes: 0,
            blockBytes: block.bytes.paramBytes,
          },
        });
      }
    }
    if (candidates.length === 0) throw new BlockllmPlacementNotFoundError(`block ${options[0]!.blocks[0]!.label} of ${s.app} has no instance on any device`);
    const owner = candidates.find((c) => owners.has(c.instance))?.instance ?? null;
    // The cohort's home device, where it holds the designated block and no KV owner decides (RouteSnapshot.home).
    const homed = s.home !== undefined && owner === null && candidates.some((c) => c.designated && c.device === s.home);
    const offered = homed ? candidates.filter((c) => c.device === s.home) : candidates;
    const choice = chooseInstance(s.topology, { requestId: s.requestId, space, kvOwner: owner, ownerHasRoom: true, allowAdaptive, fromDevice: from }, offered);
    const picked = candidates.find((c) => c.instance === choice.instance)!;
    hops.push({
      instance: choice.instance,
      device: choice.device,
      block: choice.block,
      adaptive: choice.adaptive,
      reason: choice.reason,
      crossDevice: from !== null && from !== choice.device,
      estimateMs: choice.estimate?.totalMs ?? null,
    });
    from = choice.device;
    previous = picked.option.blocks[0]!;
    return picked.option;
  };

  // Segments of equal score in block order, so the snapshot's order never matters.
  const key = (e: RouteEquivalent) => e.blocks.map((b) => b.blockId).join();
  let position = 0;
  while (position < s.chain.length) {
    const own: Option = { blocks: [s.chain[position]!], rejoin: position + 1, designated: true };
    const equivalents = (s.equivalents ?? [])
      // A segment is a candidate only when every block of it has an instance (no deployment mid-route).
      .filter((e) => e.position === position && e.rejoin > position && e.rejoin <= s.chain.length && e.blocks.length > 0)
      .filter((e) => e.blocks.every((b) => s.instances.some((x) => x.block === b.blockId)))
      .sort((a, b) => b.score - a.score || (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
      .map((e): Option => ({ blocks: e.blocks, rejoin: e.rejoin, designated: false }));
    const chosen = hop([own, ...equivalents]);
    // The rest of a chosen segment: each block among its own instances (designated false: still adaptive).
    for (let i = 1; i < chosen.blocks.length; i++) hop([{ blocks: chosen.blocks.slice(i), rejoin: chosen.rejoin, designated: chosen.designated }]);
    position = chosen.rejoin;
  }
  return hops;
}

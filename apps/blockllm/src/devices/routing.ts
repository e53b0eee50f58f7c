/**
 * A new sequence's route by the instance-selection cost model (design note §4.3, algorithms 5.4–5.5): each hop of
 * its chain goes to the instance of the hop's block that @tessera/block-zoo's `chooseInstance` picks — hop 0 as a
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

/** A block of the sequence's chain, in chain order. */
export interface RouteBlock {
  blockId: string;
  /** For error messages (formatBlock). */
  label: string;
  /** Its bytes (blockBytesOf): the activation hand-off of the hop after it, and its parameters for the prior. */
  bytes: BlockBytes;
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
   * Per chain position, the instance holding the sequence's KV there (a live sequence whose route lost an instance
   * keeps the rest: rule 1), or null. Absent: a new sequence, no KV anywhere.
   */
  owners?: readonly (string | null)[];
}

export interface RouteHop {
  instance: string;
  device: string;
  reason: HopChoice['reason'];
  /** The hop's rows come from another device (hop 0 comes from the scheduler: never a crossing). */
  crossDevice: boolean;
  /** The chosen candidate's estimate (null when rule 1 chose the KV owner without estimating). */
  estimateMs: number | null;
}

/**
 * The route of one sequence, hop by hop: candidates are every deployed instance of the hop's block; each gets
 * T_queue = its routed sequences × its per-token time, T_compute = the prompt's tokens × the same, T_transfer =
 * the token ids from the scheduler (hop 0) or the previous block's activations over the worker link when the
 * previous hop is on another device (0 on the same one), T_load = 0 (deployed instances are resident). Ties go
 * to the instance id (chooseInstance's last rule), so one snapshot always gives one route.
 * Throws BlockllmPlacementNotFoundError when a block of the chain has no instance.
 */
export function routeByCostModel(s: RouteSnapshot): RouteHop[] {
  const space = s.app;
  let from: string | null = null;
  let previous: RouteBlock | null = null;
  return s.chain.map((block, i) => {
    const instances = s.instances.filter((x) => x.block === block.blockId);
    if (instances.length === 0) throw new BlockllmPlacementNotFoundError(`block ${block.label} of ${s.app} has no instance on any device`);
    const transferBytes = previous === null ? s.tokens * TOKEN_BYTES : activationBytes(previous.bytes, s.tokens);
    const candidates: HopCandidate[] = instances.map((x) => ({
      instance: x.instance,
      block: block.blockId,
      device: x.device,
      family: space,
      designated: true,
      // Admission bounds the running sequences (--max-batch) and a full KV cache rolls the step back: every deployed
      // instance can take the sequence.
      available: true,
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
    }));
    const owner = s.owners?.[i] ?? null;
    const choice = chooseInstance(s.topology, { requestId: s.requestId, space, kvOwner: owner, ownerHasRoom: true, allowAdaptive: false, fromDevice: from }, candidates);
    const hop: RouteHop = { instance: choice.instance, device: choice.device, reason: choice.reason, crossDevice: from !== null && from !== choice.device, estimateMs: choice.estimate?.totalMs ?? null };
    from = choice.device;
    previous = block;
    return hop;
  });
}

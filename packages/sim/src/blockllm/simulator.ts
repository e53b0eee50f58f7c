/**
 * BlockLLM's cluster simulation (design note §8.3): the §6.1 workload on the §8.3 topology under three policies.
 *
 *  - **PM** (per-model provisioning): one engine per application, at most one engine per GPU (vLLM reserves the
 *    GPU's memory), swapped in on demand at the full model's bytes, replicas for popular apps (§6.3).
 *  - **PS** (parameter sharing without block-level serving, §6.1): one engine per foundation holding all of its PE
 *    fine-tunes, whose per-step cost grows with the distinct applications in the batch (branching); full
 *    fine-tunes cannot be merged and run as in PM.
 *  - **BlockLLM**: every chain block is an instance driven by the serving core of @tessera/block-zoo — a
 *    {@link BlockAgent} per instance (RETURNING / NEW queues, loose batching, countdowns), {@link chooseInstance}
 *    over {@link hopRoutes} (adaptive serving with the byte cost model), the {@link KvCoordinator} (owner map,
 *    overlapped migration plans, the redundancy scan), the {@link SpeculationLedger} with
 *    {@link selectSpeculation}, and {@link placeChains} / {@link planScaleOut} with the {@link TrafficCounter}.
 *
 * Every engine step's duration comes from the roofline block cost model. Block instances on one GPU run as
 * separate engines sharing it (processor sharing; `gpuSharing: 'serial'` runs one batch at a time instead). The
 * run is a pure function of its options (the seed feeds the workload and the speculation outcomes).
 */
import {
  activationBytes,
  BlockAgent,
  type BlockBytes,
  blockBytesOf,
  type BlockId,
  type BlockManifest,
  chooseInstance,
  type ComputeProfile,
  computeMs,
  type HopCandidate,
  type HopRoute,
  KvCoordinator,
  kvMigrationMs,
  type LatencyInput,
  migrationRates,
  namedSize,
  type PlacedInstance,
  freeBytes,
  placeChains,
  planScaleOut,
  selectSpeculation,
  SpeculationLedger,
  type Topology,
  TrafficCounter,
  transferMs,
  uniqueSize,
} from '@tessera/block-zoo';
import { KV_PAGE_SIZE } from '@tessera/core';

import { EventQueue } from '../clock.js';
import { SimArgumentError } from '../errors.js';
import { substream } from '../random.js';
import { A100_80G, blockLaunchMs, blockLayers, blockllmTopology, blockProfile, type ClusterOptions, type GpuModel, sumBytes, sumProfiles } from './cluster.js';
import { type BlockllmRequest, DEFAULT_LENGTH_RANGE, syntheticWorkload } from './workload.js';
import { appMix, buildSimZoo, type SimApp, type SimZoo, type SimZooOptions } from './zoo-mix.js';

export type BlockllmPolicy = 'pm' | 'ps' | 'blockllm';

/** BlockLLM's switches; each ablation of §8.3 turns one. */
export interface BlockllmFeatures {
  adaptive: boolean;
  kv: 'best-effort' | 'recompute' | 'least-busy';
  speculation: 'on' | 'off' | 'perfect';
  placement: 'locality' | 'frag-min';
}

export const BLOCKLLM_FULL: BlockllmFeatures = { adaptive: true, kv: 'best-effort', speculation: 'on', placement: 'locality' };

/** The ablations of §8.3 (Figs. 24–26 and §7.3), each as the one feature it changes. */
export const BLOCKLLM_ABLATIONS: Readonly<Record<string, Partial<BlockllmFeatures>>> = {
  'no-adaptive': { adaptive: false },
  'kv-recompute': { kv: 'recompute' },
  'kv-least-busy': { kv: 'least-busy' },
  'no-speculation': { speculation: 'off' },
  'perfect-speculation': { speculation: 'perfect' },
  'frag-min': { placement: 'frag-min' },
};

export interface BlockllmSimOptions {
  policy: BlockllmPolicy;
  seed: number;
  features?: Partial<BlockllmFeatures>;
  /** Applications (default 20 from {@link appMix}); or the mix itself. */
  apps?: number | readonly SimApp[];
  zoo?: SimZooOptions;
  /** A zoo built beforehand for the same apps (saves rebuilding it per policy). */
  prebuilt?: SimZoo;
  cluster?: ClusterOptions;
  gpu?: GpuModel;
  requests?: number;
  durationMs?: number;
  prompt?: readonly [number, number];
  output?: readonly [number, number];
  /** Batch cap of an engine serving one application; a block shared by k apps gets base × min(k, sharedBatchCap). */
  baseMaxBatch?: number;
  sharedBatchCap?: number;
  /** PS: extra per-step cost per distinct application beyond the first in a batch (branching). Default 0.15. */
  branchCost?: number;
  /** PM/PS: an engine stops admitting once it has held its GPU this long while another app waits as long. */
  quantumMs?: number;
  /** BlockLLM: fraction of device memory kept free for request data when placing blocks. Default 0.3. */
  headroom?: number;
  /**
   * BlockLLM: at initial placement a device holding instances takes more only within this multiple of its even share
   * of the parameters (an empty device takes any block). Default 1.25.
   */
  placementSpread?: number;
  /**
   * BlockLLM: initial placement balances each device's expected load (from the workload's rates and the blocks'
   * step costs) within the same multiple of the even share, as well as its bytes. Default true; false places by
   * bytes alone (the earlier model, which packs many busy small blocks onto one GPU).
   */
  loadAwarePlacement?: boolean;
  /** BlockLLM periodic control (scale-out, speculation selection, redundancy scan). Default 1000 ms. */
  controlEveryMs?: number;
  scaleThreshold?: number;
  /**
   * Scale-out's maximum queue length is the batch cap over this [I] (the paper's "queue that saturates device
   * memory" is never reached while GPUs are shared by several block instances, so the trigger is tied to the batch).
   * Default 4.
   */
  scaleQueueDivisor?: number;
  /**
   * Speculation: acceptance probability (paper: 192 / 231); the surrogate speedup for every block (default: each
   * surrogate's own, from the zoo: Table 4 by block kind); the pseudo-surrogate's speedup (1/50 compute).
   */
  specAcceptance?: number;
  surrogateSpeedup?: number;
  perfectSpeedup?: number;
  /**
   * How block instances co-located on one GPU run: 'multiplex' (default: each instance is its own engine and
   * concurrent batches share the GPU's time equally; the paper profiles this multiplexing, §6) or 'serial' (one
   * batch at a time per GPU, the earlier model, kept to show what the sharing changes). PM and PS hold one engine
   * per GPU, so the two are the same for them.
   */
  gpuSharing?: 'multiplex' | 'serial';
  /**
   * BlockLLM: an instance holds its batch for a resident request whose countdown says it is back within the
   * block's fixed step cost (§4.2's countdown clocks and prioritised returns). Default true.
   */
  countdownHold?: boolean;
  /** BlockLLM: fill the GPUs the initial placement leaves empty with replicas of the most loaded blocks. Default true. */
  warmReplicas?: boolean;
  /** Utilisation and memory sampling window. Default 10 s. */
  sampleEveryMs?: number;
  /** Record every request's steps (for conservation checks). */
  traceSteps?: boolean;
}

export interface RequestRecord {
  id: string;
  app: string;
  arrivalMs: number;
  finishMs: number;
  latencyMs: number;
  promptTokens: number;
  outputTokens: number;
  /** Whether any hop of it was served by an equivalent block (adaptive serving). */
  adaptive: boolean;
}

/** One executed step: iteration, step index within it, the chain position its route started at, the route's block index, the block. */
export interface StepTrace {
  iteration: number;
  step: number;
  chainPos: number;
  rejoin: number;
  routeIndex: number;
  routeLength: number;
  block: string;
}

export interface BlockllmSimResult {
  policy: BlockllmPolicy;
  features: BlockllmFeatures | null;
  requests: RequestRecord[];
  p50Ms: number;
  p95Ms: number;
  meanMs: number;
  makespanMs: number;
  /** Generated tokens per second until the last request completes. */
  throughputTokS: number;
  /** Engine compute time, activation / KV transfer time, and model-load time (ms, summed over steps). */
  computeMs: number;
  /** The launch latency within computeMs (under 'multiplex' sharing it is not GPU busy time: blockLaunchMs). */
  launchMs: number;
  transferMs: number;
  loadMs: number;
  /** transfer / (compute + transfer). */
  communicationShare: number;
  interServerBytes: number;
  /** Mean busy fraction of the GPUs until the last completion, and per sample window. */
  utilisation: number;
  utilisationTimeline: { tMs: number; busy: number }[];
  /** Per GPU: busy fraction until the last completion, and the instances (engines) it holds at the end. */
  deviceUtilisation: { device: string; busy: number; instances: number }[];
  /**
   * Per instance at the end: its batches and rows (the agent's counters), its steps' standalone time (computeMs)
   * and the launch latency within it (launchMs: under 'multiplex' sharing not GPU busy time, see blockLaunchMs).
   */
  instanceStats: { instance: string; device: string; block: string; computeMs: number; launchMs: number; batches: number; rows: number; returningRows: number; newRows: number }[];
  /** Mean device bytes of parameters and of request data (KV), over the samples; and their peaks. */
  memory: { paramBytes: number; requestBytes: number; peakParamBytes: number; peakRequestBytes: number };
  speculation: { speculations: number; accepted: number; rolledBack: number };
  adaptiveRequests: number;
  kvMigrations: number;
  kvRecomputes: number;
  scaleOuts: number;
  swaps: number;
  instances: number;
  events: number;
  trace: Map<string, StepTrace[]> | null;
}

interface Device {
  id: string;
  server: string;
  busy: boolean;
  instances: Inst[];
  /** Multiplexed GPU: the jobs sharing it (remaining standalone ms), when they were last advanced, a stale-event guard. */
  jobs: { left: number; onDone: () => void }[];
  since: number;
  epoch: number;
}

interface Inst {
  id: string;
  device: Device;
  agent: BlockAgent;
  profile: ComputeProfile;
  bytes: BlockBytes;
  /** The unit (PM/PS) or block it runs. */
  unit: string;
  readyAt: number;
  speculating: boolean;
  /** PM/PS: admitting new requests, when loaded, rows in flight. */
  draining: boolean;
  loadedAt: number;
  inflight: number;
  lastUsed: number;
  /** The time a re-plan is scheduled for while the agent holds for a returning request. */
  holdAt: number | null;
  /** Standalone time of its batches (launch latency included), and the launch latency alone. */
  computeMs: number;
  launchTotalMs: number;
  /** Its running batch: the shared job (multiplex) or its end time (serial). */
  job: { left: number; onDone: () => void } | null;
  runEnd: number;
  /** Launch latency of a step (blockLaunchMs; summed over a unit's blocks), not shared under 'multiplex'. */
  launchMs: number;
  /** 'multiplex': when the running batch's launch latency ends and the shared work it then adds. */
  launchEnd: number;
  pendingWork: number;
}

interface Req {
  spec: BlockllmRequest;
  iteration: number;
  chainPos: number;
  route: HopRoute | null;
  routeIndex: number;
  step: number;
  epoch: number;
  adaptive: boolean;
  held: boolean;
  queuedAt: Inst | null;
  /**
   * Instances running a batch with a row of this request (more than one while a speculated row and its tentative
   * successors run, or a rolled-back row is still in a batch), and arrivals waiting for one of them to finish.
   */
  running: Set<Inst>;
  deferred: Map<Inst, () => void>;
  lastInst: Inst | null;
  lastBlock: BlockManifest | null;
  touched: Set<Inst>;
  /** Per instance: when the request last left it, and the round trip it took to come back (the countdown's estimate). */
  leftAt: Map<Inst, number>;
  roundTrip: Map<Inst, number>;
  done: boolean;
}

interface SpecSnapshot {
  tag: string;
  chainPos: number;
  route: HopRoute | null;
  routeIndex: number;
  step: number;
  inst: Inst;
  block: BlockManifest;
}

const percentile = (sorted: readonly number[], q: number): number => {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
};

/** Runs one policy over one workload. */
export function runBlockllmSimulation(options: BlockllmSimOptions): BlockllmSimResult {
  const policy = options.policy;
  if (policy !== 'pm' && policy !== 'ps' && policy !== 'blockllm') throw new SimArgumentError(`policy must be 'pm', 'ps' or 'blockllm', got ${JSON.stringify(policy)}`);
  if (!Number.isSafeInteger(options.seed)) throw new SimArgumentError(`seed must be an integer, got ${options.seed}`);
  const features: BlockllmFeatures = { ...BLOCKLLM_FULL, ...(options.features ?? {}) };
  const gpu = options.gpu ?? A100_80G;
  const apps = options.prebuilt?.apps ?? (typeof options.apps === 'object' ? [...options.apps] : appMix(options.apps ?? 20));
  const sim = options.prebuilt ?? buildSimZoo(apps, options.zoo);
  const zoo = sim.zoo;
  const topology: Topology = blockllmTopology({ gpu, ...(options.cluster ?? {}) });
  const baseBatch = options.baseMaxBatch ?? 32;
  const sharedCap = options.sharedBatchCap ?? 4;
  const branchCost = options.branchCost ?? 0.15;
  const quantum = options.quantumMs ?? 30_000;
  const sampleEvery = options.sampleEveryMs ?? 10_000;
  const controlEvery = options.controlEveryMs ?? 1000;
  const acceptance = options.specAcceptance ?? 192 / 231;
  const perfectSpeedup = options.perfectSpeedup ?? 50;
  const sharing = options.gpuSharing ?? 'multiplex';
  const warmReplicas = options.warmReplicas ?? true;
  const countdownHold = options.countdownHold ?? true;
  if (sharing !== 'multiplex' && sharing !== 'serial') throw new SimArgumentError(`gpuSharing must be 'multiplex' or 'serial', got ${JSON.stringify(sharing)}`);
  // A surrogate's speedup: the pseudo-surrogate's for perfect speculation, the option when given, else the zoo's link.
  const linkSpeedup = new Map<string, number>();
  const surrogateSpeedupOf = (inst: Inst) => {
    if (features.speculation === 'perfect') return perfectSpeedup;
    if (options.surrogateSpeedup !== undefined) return options.surrogateSpeedup;
    let v = linkSpeedup.get(inst.unit);
    if (v === undefined) linkSpeedup.set(inst.unit, (v = zoo.surrogatesOf(inst.unit)[0]?.speedup ?? 2));
    return v;
  };
  const headroom = options.headroom ?? 0.3;
  const spread = options.placementSpread ?? 1.25;
  const loadAware = options.loadAwarePlacement ?? true;
  const scaleDivisor = options.scaleQueueDivisor ?? 4;
  if (!(baseBatch >= 1) || !(sharedCap >= 1)) throw new SimArgumentError(`baseMaxBatch and sharedBatchCap must be ≥ 1, got ${baseBatch} and ${sharedCap}`);
  if (!(acceptance >= 0 && acceptance <= 1)) throw new SimArgumentError(`specAcceptance must be in [0, 1], got ${acceptance}`);

  const workload = syntheticWorkload({
    apps: apps.map((a) => a.id),
    seed: options.seed,
    ...(options.requests !== undefined ? { requests: options.requests } : {}),
    ...(options.durationMs !== undefined ? { durationMs: options.durationMs } : {}),
    ...(options.prompt ? { prompt: options.prompt } : {}),
    ...(options.output ? { output: options.output } : {}),
  });
  const specRng = substream(options.seed, 7);
  const events = new EventQueue();
  const clock = events.clock;
  const devices: Device[] = topology.devices.map((d) => ({ id: d.id, server: d.server, busy: false, instances: [], jobs: [], since: 0, epoch: 0 }));
  const deviceById = new Map(devices.map((d) => [d.id, d]));
  const reqs = new Map<string, Req>();
  const records: RequestRecord[] = [];
  const trace = options.traceSteps ? new Map<string, StepTrace[]>() : null;
  const chains = sim.chains;
  const users = new Map<BlockId, number>();
  for (const c of chains.values()) for (const b of new Set(c.blocks.map((x) => x.blockId))) users.set(b, (users.get(b) ?? 0) + 1);
  const batchCap = (k: number) => baseBatch * Math.min(Math.max(1, k), sharedCap);

  let computeTotal = 0;
  let launchTotal = 0;
  let transferTotal = 0;
  let loadTotal = 0;
  let interBytes = 0;
  let kvMigrations = 0;
  let kvRecomputes = 0;
  let scaleOuts = 0;
  let swaps = 0;
  const busyBins: number[] = [];
  const memSamples: { params: number; request: number }[] = [];
  const busyByDevice = new Map<string, number>();
  let busyDevice = '';
  const addBusy = (from: number, to: number) => {
    busyByDevice.set(busyDevice, (busyByDevice.get(busyDevice) ?? 0) + (to - from));
    let t = from;
    while (t < to) {
      const bin = Math.floor(t / sampleEvery);
      const end = Math.min(to, (bin + 1) * sampleEvery);
      busyBins[bin] = (busyBins[bin] ?? 0) + (end - t);
      t = end;
    }
  };

  // BlockLLM's instances hold a batch for a returning request due within one weight read of the block (its fixed
  // step cost): running without it would cost the GPU that read again, waiting costs the queued rows at most as much.
  const holdOf = (profile: ComputeProfile) => (policy === 'blockllm' && countdownHold ? profile.fixedMs : 0);
  const newAgent = (id: string, bytes: BlockBytes, maxBatch: number, memory: number, profile: ComputeProfile) => new BlockAgent({ instance: id, block: bytes, clock, maxBatch, memoryBytes: Math.max(1, memory), holdForReturningMs: holdOf(profile) });
  const instances = new Map<string, Inst>();
  const addInst = (dev: Device, unit: string, bytes: BlockBytes, profile: ComputeProfile, maxBatch: number, memory: number, readyAt: number, launchMs: number): Inst => {
    let id = `${unit.slice(0, 16)}@${dev.id}`;
    for (let k = 2; instances.has(id); k++) id = `${unit.slice(0, 16)}@${dev.id}#${k}`;
    const inst: Inst = { id, device: dev, agent: newAgent(id, bytes, maxBatch, memory, profile), profile, bytes, unit, readyAt, speculating: false, draining: false, loadedAt: readyAt, inflight: 0, lastUsed: readyAt, holdAt: null, computeMs: 0, launchTotalMs: 0, job: null, runEnd: 0, launchMs, launchEnd: 0, pendingWork: 0 };
    instances.set(id, inst);
    dev.instances.push(inst);
    return inst;
  };

  const record = (r: Req) => {
    r.done = true;
    const finish = clock.now();
    records.push({ id: r.spec.id, app: r.spec.app, arrivalMs: r.spec.arrivalMs, finishMs: finish, latencyMs: finish - r.spec.arrivalMs, promptTokens: r.spec.promptTokens, outputTokens: r.spec.outputTokens, adaptive: r.adaptive });
  };
  const rowShape = (r: Req) => ({ tokens: r.iteration === 0 ? r.spec.promptTokens : 1, context: r.iteration === 0 ? 0 : r.spec.promptTokens + r.iteration - 1 });
  const pushTrace = (r: Req, t: StepTrace) => {
    if (!trace) return;
    const list = trace.get(r.spec.id) ?? [];
    list.push(t);
    trace.set(r.spec.id, list);
  };

  // Device scheduling. 'serial': one batch at a time per GPU, the instance whose head row waited longest first.
  // 'multiplex': every resident instance is its own engine (paper §3: a block runs as its own engine; §6 profiles
  // their multiplexing), so each instance with queued rows starts its batch at once and the GPU's time is shared
  // equally among the batches (and surrogates) running on it: processor sharing, work-conserving — k concurrent
  // batches each progress at 1/k, so sharing moves no work and creates none, it only stops a one-layer block's
  // step from waiting behind a 28-layer block's whole step on the same GPU.
  let onBatchDone: (inst: Inst, plan: NonNullable<ReturnType<BlockAgent['plan']>>, started: number, epochs: Map<string, number>) => void = () => {};
  let durationOf: (inst: Inst, rows: number, tokens: number, appsInBatch: number) => number = () => 0;
  let onSurrogate: ((inst: Inst, plan: NonNullable<ReturnType<BlockAgent['plan']>>, epochs: Map<string, number>) => void) | null = null;
  /** Advances the device's shared jobs to now (and books its busy time). */
  const progress = (dev: Device) => {
    const now = clock.now();
    const k = dev.jobs.length;
    if (k > 0 && now > dev.since) {
      busyDevice = dev.id;
      addBusy(dev.since, now);
      const each = (now - dev.since) / k;
      for (const j of dev.jobs) j.left -= each;
    }
    dev.since = now;
  };
  const reschedule = (dev: Device) => {
    const epoch = ++dev.epoch;
    if (dev.jobs.length === 0) return;
    const first = Math.max(0, Math.min(...dev.jobs.map((j) => j.left)));
    events.schedule(clock.now() + first * dev.jobs.length, () => {
      if (dev.epoch !== epoch) return;
      progress(dev);
      const done = dev.jobs.filter((j) => j.left <= 1e-9);
      dev.jobs = dev.jobs.filter((j) => j.left > 1e-9);
      dev.busy = dev.jobs.length > 0;
      reschedule(dev);
      for (const j of done) j.onDone();
    });
  };
  /** Starts `work` ms of GPU time on the device (shared with whatever else runs there); `onDone` when it is through. */
  const startJob = (dev: Device, work: number, onDone: () => void) => {
    progress(dev);
    const job = { left: work, onDone };
    dev.jobs.push(job);
    dev.busy = true;
    reschedule(dev);
    return job;
  };
  /** Wall time until the instance's running batch ends at the device's current sharing (0 when idle). */
  const runningLeftMs = (inst: Inst) => {
    if (!inst.agent.busy) return 0;
    if (sharing === 'serial') return Math.max(0, inst.runEnd - clock.now());
    const dev = inst.device;
    const k = dev.jobs.length;
    if (!inst.job) return Math.max(0, inst.launchEnd - clock.now()) + inst.pendingWork * (k + 1);
    if (k === 0) return 0;
    return Math.max(0, inst.job.left * k - (clock.now() - dev.since));
  };
  const startBatch = (dev: Device, inst: Inst) => {
    const now = clock.now();
    // The hold bound in wall time: the block's weight read as long as it takes on this GPU now (shared with the
    // batches running there), i.e. what running without the returning request would cost in time.
    const hold = holdOf(inst.profile) * (sharing === 'multiplex' ? dev.jobs.length + 1 : 1);
    const plan = inst.agent.plan({ holdForReturningMs: hold });
    if (!plan) {
      const at = inst.agent.holdUntil;
      // Waiting for a returning request: look again when it is due (an arrival before then looks at once).
      if (at !== null && inst.holdAt !== at) {
        inst.holdAt = at;
        events.schedule(at, () => {
          if (inst.holdAt === at) inst.holdAt = null;
          tryRun(dev);
        });
      }
      return false;
    }
    const epochs = new Map<string, number>();
    const appsIn = new Set<string>();
    for (const row of plan.rows) {
      const r = reqs.get(row.requestId)!;
      epochs.set(row.requestId, r.epoch);
      appsIn.add(r.spec.app);
      if (r.queuedAt === inst) r.queuedAt = null;
      r.running.add(inst);
    }
    const dur = durationOf(inst, plan.rows.length, plan.tokens, appsIn.size);
    inst.lastUsed = now;
    inst.computeMs += dur;
    computeTotal += dur;
    if (onSurrogate && inst.speculating) {
      const speedup = surrogateSpeedupOf(inst);
      if (sharing === 'multiplex') {
        // The surrogate runs on its own stream on the same device (paper §5.3): its compute shares the GPU.
        computeTotal += dur / speedup;
        startJob(dev, dur / speedup, () => onSurrogate!(inst, plan, epochs));
      } else events.schedule(now + dur / speedup, () => onSurrogate!(inst, plan, epochs));
    }
    const finish = () => {
      const waiting: (() => void)[] = [];
      for (const row of plan.rows) {
        const r = reqs.get(row.requestId)!;
        r.running.delete(inst);
        const d = r.deferred.get(inst);
        if (d) waiting.push(d), r.deferred.delete(inst);
      }
      onBatchDone(inst, plan, now, epochs);
      for (const w of waiting) w();
      tryRun(dev);
    };
    if (sharing === 'multiplex') {
      // The launch latency first (it does not occupy the GPU: engines running at once overlap it), then the
      // step's work, shared with the batches running on the GPU.
      const latency = Math.min(inst.launchMs, dur);
      inst.launchTotalMs += latency;
      launchTotal += latency;
      inst.launchEnd = now + latency;
      inst.pendingWork = dur - latency;
      events.schedule(now + latency, () => {
        inst.pendingWork = 0;
        inst.job = startJob(dev, dur - latency, () => {
          inst.job = null;
          finish();
        });
      });
    } else {
      inst.runEnd = now + dur;
      dev.busy = true;
      busyDevice = dev.id;
      addBusy(now, now + dur);
      events.schedule(now + dur, () => {
        dev.busy = false;
        finish();
      });
    }
    return true;
  };
  const tryRun = (dev: Device) => {
    const now = clock.now();
    if (sharing === 'multiplex') {
      for (const inst of dev.instances) if (inst.readyAt <= now && !inst.agent.busy && inst.agent.queueLength > 0) startBatch(dev, inst);
      return;
    }
    if (dev.busy) return;
    // The instance whose head row waited longest first; one that holds for a returning request lets the next run.
    const ready = dev.instances.filter((i) => i.readyAt <= now && i.agent.queueLength > 0).map((i) => ({ i, head: i.agent.queue()[0]!.enqueuedAt }));
    ready.sort((a, b) => a.head - b.head);
    for (const { i } of ready) if (startBatch(dev, i)) return;
  };

  // ─── PM / PS: whole-model (or whole-family) engines, one per GPU, swapped on demand ─────────────────────────
  const runUnits = () => {
    interface Unit {
      key: string;
      apps: Set<string>;
      bytes: BlockBytes;
      profile: ComputeProfile;
      launchMs: number;
      maxBatch: number;
    }
    const units = new Map<string, Unit>();
    const unitOf = new Map<string, Unit>();
    const peByFamily = new Map<string, SimApp[]>();
    for (const a of apps) {
      if (policy === 'ps' && a.kind !== 'full') {
        const list = peByFamily.get(a.foundation) ?? [];
        list.push(a);
        peByFamily.set(a.foundation, list);
      } else {
        const c = chains.get(a.id)!;
        const bytes = namedSize(c.blocks.flatMap((b) => b.tensors)).bytes;
        const u: Unit = { key: a.id, apps: new Set([a.id]), bytes: sumBytes(a.id, c.blocks.map(blockBytesOf), bytes), profile: sumProfiles(c.blocks.map((b) => blockProfile(b, blockLayers(b), gpu))), launchMs: c.blocks.reduce((t, b) => t + blockLaunchMs(b, gpu), 0), maxBatch: baseBatch };
        units.set(u.key, u);
        unitOf.set(a.id, u);
      }
    }
    for (const [family, list] of peByFamily) {
      // One engine holding the foundation and every PE delta of the family (each tensor once).
      const blocks = list.flatMap((a) => chains.get(a.id)!.blocks);
      const bytes = uniqueSize(blocks.flatMap((b) => b.tensors)).bytes;
      const base = zoo.chain(family).blocks;
      const u: Unit = { key: `ps:${family}`, apps: new Set(list.map((a) => a.id)), bytes: sumBytes(`ps:${family}`, base.map(blockBytesOf), bytes), profile: sumProfiles(base.map((b) => blockProfile(b, blockLayers(b), gpu))), launchMs: base.reduce((t, b) => t + blockLaunchMs(b, gpu), 0), maxBatch: batchCap(list.length) };
      units.set(u.key, u);
      for (const a of list) unitOf.set(a.id, u);
    }
    const pending = new Map<string, Req[]>();
    const instOfUnit = (key: string) => devices.flatMap((d) => d.instances).filter((i) => i.unit === key);
    const memoryFor = (u: Unit) => gpu.memoryBytes - u.bytes.paramBytes;
    durationOf = (inst, rows, tokens, appsInBatch) => computeMs(inst.profile, { rows, tokens }) * (policy === 'ps' && inst.unit.startsWith('ps:') ? 1 + branchCost * (appsInBatch - 1) : 1);
    const deliver = (r: Req, inst: Inst) => {
      const { tokens, context } = rowShape(r);
      inst.agent.arrive([{ requestId: r.spec.id, iteration: r.iteration, position: 0, tokens, contextTokens: context }]);
      r.queuedAt = inst;
      tryRun(inst.device);
    };
    const admit = (r: Req): boolean => {
      const u = unitOf.get(r.spec.app)!;
      const open = instOfUnit(u.key).filter((i) => !i.draining && i.inflight < u.maxBatch);
      if (open.length === 0) return false;
      open.sort((a, b) => a.inflight - b.inflight || (a.id < b.id ? -1 : 1));
      const inst = open[0]!;
      inst.inflight++;
      r.lastInst = inst;
      r.touched.add(inst);
      deliver(r, inst);
      return true;
    };
    const oldestWait = (key: string) => pending.get(key)?.[0]?.spec.arrivalMs ?? Infinity;
    const provision = () => {
      const now = clock.now();
      // Engines that held their GPU past the quantum while another app waited as long stop admitting.
      const starving = [...pending.entries()].filter(([, l]) => l.length > 0 && now - l[0]!.spec.arrivalMs > quantum).length > 0;
      if (starving) for (const d of devices) for (const i of d.instances) if (!i.draining && now - i.loadedAt > quantum) i.draining = true;
      for (;;) {
        const waiting = [...pending.entries()].filter(([, l]) => l.length > 0).sort((a, b) => oldestWait(a[0]) - oldestWait(b[0]) || (a[0] < b[0] ? -1 : 1));
        if (waiting.length === 0) return;
        // A free GPU: empty, or an engine with nothing in flight (the least recently used).
        const free = devices
          .filter((d) => d.instances.length === 0 || (d.instances.every((i) => i.inflight === 0 && i.readyAt <= now) && !d.busy))
          .sort((a, b) => (a.instances[0]?.lastUsed ?? -Infinity) - (b.instances[0]?.lastUsed ?? -Infinity) || (a.id < b.id ? -1 : 1));
        if (free.length === 0) return;
        const [key, list] = waiting[0]!;
        const u = units.get(key)!;
        const dev = free[0]!;
        const victim = dev.instances[0];
        if (victim && victim.unit === key) {
          // Its own engine is idle there: keep it (a drained engine starts a new quantum) and admit into it.
          if (victim.draining) (victim.draining = false), (victim.loadedAt = now);
          for (const r of list.splice(0)) if (!admit(r)) list.push(r);
          if (list.length > 0) return;
          continue;
        }
        const victimBytes = victim?.bytes.paramBytes ?? 0;
        if (victim) {
          dev.instances.length = 0;
          instances.delete(victim.id);
        }
        const spec = topology.devices.find((d) => d.id === dev.id)!;
        const load = victimBytes / spec.memBandwidth + u.bytes.paramBytes / spec.loadBandwidth;
        loadTotal += load;
        swaps++;
        const inst = addInst(dev, u.key, u.bytes, u.profile, u.maxBatch, memoryFor(u), now + load, u.launchMs);
        const take = list.splice(0, u.maxBatch);
        for (const r of take) {
          inst.inflight++;
          r.lastInst = inst;
          r.touched.add(inst);
        }
        events.schedule(now + load, () => {
          for (const r of take) deliver(r, inst);
          provision();
        });
      }
    };
    onBatchDone = (inst, plan) => {
      const outcomes = plan.rows.map((row) => {
        const r = reqs.get(row.requestId)!;
        return { requestId: row.requestId, finished: r.iteration + 1 >= r.spec.outputTokens };
      });
      inst.agent.complete(plan.planId, outcomes);
      for (const row of plan.rows) {
        const r = reqs.get(row.requestId)!;
        pushTrace(r, { iteration: r.iteration, step: 0, chainPos: 0, rejoin: 1, routeIndex: 0, routeLength: 1, block: inst.unit });
        r.iteration++;
        if (r.iteration >= r.spec.outputTokens) {
          inst.inflight--;
          record(r);
        } else deliver(r, inst);
      }
      provision();
    };
    for (const r of workload.requests) {
      events.schedule(r.arrivalMs, () => {
        const q = newReq(r);
        if (!admit(q)) {
          const key = unitOf.get(r.app)!.key;
          const list = pending.get(key) ?? [];
          list.push(q);
          pending.set(key, list);
        }
        provision();
      });
    }
    // Warm start: the most popular units are resident at t = 0, one per GPU (as BlockLLM's initial placement is).
    const rate = new Map<string, number>();
    for (const a of apps) rate.set(unitOf.get(a.id)!.key, (rate.get(unitOf.get(a.id)!.key) ?? 0) + workload.weights.get(a.id)!);
    const hot = [...units.values()].sort((a, b) => rate.get(b.key)! - rate.get(a.key)! || (a.key < b.key ? -1 : 1));
    devices.forEach((d, i) => {
      const u = hot[i];
      if (u) addInst(d, u.key, u.bytes, u.profile, u.maxBatch, memoryFor(u), 0, u.launchMs);
    });
    // Fewer units than GPUs (PS's one engine per family, or few applications): the GPUs left empty take replicas of
    // the units with the most rate per engine, as a deployment scaled to its cluster would (BlockLLM's warm
    // replicas do the same with blocks).
    const count = (key: string) => devices.filter((d) => d.instances.some((i) => i.unit === key)).length;
    for (const d of devices) {
      if (d.instances.length > 0) continue;
      const u = [...units.values()].sort((a, b) => rate.get(b.key)! / (count(b.key) + 1) - rate.get(a.key)! / (count(a.key) + 1) || (a.key < b.key ? -1 : 1))[0];
      if (u) addInst(d, u.key, u.bytes, u.profile, u.maxBatch, memoryFor(u), 0, u.launchMs);
    }
    const memSample = () => {
      let params = 0;
      let request = 0;
      for (const d of devices) for (const i of d.instances) params += i.bytes.paramBytes;
      for (const r of reqs.values()) if (!r.done && r.lastInst) request += (r.spec.promptTokens + r.iteration) * r.lastInst.bytes.kvBytesPerToken;
      memSamples.push({ params, request });
    };
    return memSample;
  };

  const newReq = (spec: BlockllmRequest): Req => {
    const r: Req = { spec, iteration: 0, chainPos: 0, route: null, routeIndex: 0, step: 0, epoch: 0, adaptive: false, held: false, queuedAt: null, running: new Set(), deferred: new Map(), lastInst: null, lastBlock: null, touched: new Set(), leftAt: new Map(), roundTrip: new Map(), done: false };
    reqs.set(spec.id, r);
    return r;
  };

  // ─── BlockLLM: block instances under the serving core ──────────────────────────────────────────────────────
  const runBlocks = () => {
    const kv = new KvCoordinator({ clock, scanPeriodMs: 60_000 });
    const ledger = new SpeculationLedger();
    const traffic = TrafficCounter.fromChains(apps.map((a) => ({ blocks: chains.get(a.id)!.blocks.map((b) => b.blockId), weight: workload.weights.get(a.id)! })));
    const manifests = new Map<BlockId, BlockManifest>();
    for (const c of chains.values()) for (const b of c.blocks) manifests.set(b.blockId, b);
    const blockOf = (id: BlockId) => {
      let m = manifests.get(id);
      if (!m) manifests.set(id, (m = zoo.block(id)));
      return m;
    };
    const profiles = new Map<BlockId, ComputeProfile>();
    const profileOf = (b: BlockManifest) => {
      let p = profiles.get(b.blockId);
      if (!p) profiles.set(b.blockId, (p = blockProfile(b, blockLayers(b), gpu)));
      return p;
    };
    const restMemo = new Map<string, number>();
    const restOfChainMs = (app: string, block: BlockId) => {
      const k = `${app}#${block}`;
      let v = restMemo.get(k);
      if (v === undefined) restMemo.set(k, (v = chains.get(app)!.blocks.reduce((t, b) => (b.blockId === block ? t : t + computeMs(profileOf(b), { rows: 1, tokens: 1 })), 0)));
      return v;
    };
    const withSurrogate = new Set(zoo.blocks().filter((b) => zoo.surrogatesOf(b.blockId).length > 0).map((b) => b.blockId));
    const chainIds = [...chains.values()].map((c) => c.blocks.map((b) => b.blockId));
    const placementPolicy = features.placement;
    // Initial placement spreads the blocks: a device that holds instances takes more only up to its even share of
    // the parameters (× placementSpread), so the chains' blocks — and the load that goes with them — reach every
    // GPU instead of filling the first server's (locality still picks the server and the device among those with
    // room). A block larger than the share goes alone on a device.
    const sizes = new Map([...manifests].map(([id, m]) => [id, m.paramBytes] as [BlockId, number]));
    // The equivalent routes' blocks are placed too (adaptive serving can only pick what is deployed).
    const routeChains: BlockId[][] = [];
    if (features.adaptive) {
      for (const a of apps) {
        for (let pos = 0; pos < chains.get(a.id)!.blocks.length; pos++) {
          for (const route of sim.routes(a.id, pos)) {
            if (route.designated) continue;
            routeChains.push(route.blocks);
            for (const b of route.blocks) if (!sizes.has(b)) sizes.set(b, blockOf(b).paramBytes);
          }
        }
      }
    }
    const totalParams = [...sizes.values()].reduce((a, b) => a + b, 0);
    // Each block's expected load from the workload's rates: its rows arrive at Σ rate × mean output (decode) and its
    // tokens at Σ rate × (mean prompt + mean output); a step reads the weights once however many rows it holds, so the
    // weight term saturates at the whole device (back-to-back batches), the per-row and per-token terms do not.
    const mid = ([lo, hi]: readonly [number, number]) => (lo + hi) / 2;
    const reqPerMs = workload.requests.length / Math.max(1, workload.requests.at(-1)!.arrivalMs);
    const meanOut = mid(options.output ?? DEFAULT_LENGTH_RANGE);
    const meanTokens = mid(options.prompt ?? DEFAULT_LENGTH_RANGE) + meanOut;
    const appsThrough = new Map<BlockId, number>();
    for (const a of apps) for (const b of new Set(chains.get(a.id)!.blocks.map((x) => x.blockId))) appsThrough.set(b, (appsThrough.get(b) ?? 0) + workload.weights.get(a.id)!);
    const blockLoad = new Map<BlockId, number>();
    for (const id of sizes.keys()) {
      const share = appsThrough.get(id) ?? 0;
      const p = profileOf(blockOf(id));
      const rows = reqPerMs * share * meanOut;
      blockLoad.set(id, Math.min(1, rows * p.fixedMs) + rows * p.perRowMs + reqPerMs * share * meanTokens * p.perTokenMs);
    }
    const totalLoad = [...blockLoad.values()].reduce((a, b) => a + b, 0);
    const placed: PlacedInstance[] = placeChains(topology, [...chainIds, ...routeChains], sizes, traffic, {
      policy: placementPolicy,
      headroomBytes: headroom * gpu.memoryBytes,
      maxBytesPerDevice: (spread * totalParams) / devices.length,
      ...(loadAware ? { blockLoad, maxLoadPerDevice: (spread * totalLoad) / devices.length } : {}),
    });
    // Warm replicas: as PM's warm start fills every GPU with the most popular engines, BlockLLM starts with its
    // popular blocks scaled onto the GPUs that would sit idle (the paper's third reason for Table 2's gain); scale-out
    // adds more under load. A GPU is idle when empty or, with load-aware placement, when it expects under half the
    // mean load; each takes a replica of the block whose instances expect the most load (the block's load split over
    // its instances, the new one included) among those it has room for.
    if (warmReplicas) {
      const count = (b: BlockId) => placed.filter((p) => p.block === b).length;
      const instLoad = (b: BlockId) => (blockLoad.get(b) ?? 0) / Math.max(1, count(b));
      const deviceLoad = (d: string) => placed.reduce((n, p) => (p.device === d ? n + instLoad(p.block) : n), 0);
      const idleBelow = loadAware ? (0.5 * totalLoad) / devices.length : 0;
      for (let round = 0; round < 4 * devices.length; round++) {
        const idle = devices.filter((d) => !placed.some((p) => p.device === d.id) || (loadAware && deviceLoad(d.id) < idleBelow)).sort((x, y) => deviceLoad(x.id) - deviceLoad(y.id) || (x.id < y.id ? -1 : 1));
        const dev = idle[0];
        if (!dev) break;
        const room = freeBytes(topology, placed, headroom * gpu.memoryBytes).get(dev.id)!;
        const ranked = [...blockLoad.keys()].filter((b) => sizes.get(b)! <= room && !placed.some((p) => p.device === dev.id && p.block === b)).sort((x, y) => (blockLoad.get(y)! / (count(y) + 1)) - (blockLoad.get(x)! / (count(x) + 1)) || (x < y ? -1 : 1));
        const b = ranked[0];
        if (b === undefined || blockLoad.get(b)! / (count(b) + 1) <= 0) break;
        placed.push({ instance: `${b}@${dev.id}`, block: b, device: dev.id, bytes: sizes.get(b)! });
      }
    }
    const byBlock = new Map<BlockId, Inst[]>();
    const requestMemory = (dev: Device) => gpu.memoryBytes - placed.filter((p) => p.device === dev.id).reduce((n, p) => n + p.bytes, 0);
    const deploy = (block: BlockManifest, dev: Device, readyAt: number): Inst => {
      const inst = addInst(dev, block.blockId, blockBytesOf(block), profileOf(block), batchCap(users.get(block.blockId) ?? 1), requestMemory(dev), readyAt, blockLaunchMs(block, gpu));
      const list = byBlock.get(block.blockId) ?? [];
      list.push(inst);
      byBlock.set(block.blockId, list);
      // Rows may queue while it loads: the device looks again once it is resident.
      if (readyAt > clock.now()) events.schedule(readyAt, () => tryRun(dev));
      return inst;
    };
    for (const p of placed) deploy(blockOf(p.block), deviceById.get(p.device)!, 0);
    durationOf = (inst, rows, tokens) => computeMs(inst.profile, { rows, tokens });
    const routesOf = sim.routes;
    const available = (i: Inst) => i.agent.queueLength < 4 * i.agent.maxBatch;

    /** KV the request needs at `inst` for its next step: none, a migration from another instance of the block, or a recompute. */
    const kvNeed = (r: Req, inst: Inst, context: number): { kind: 'none' } | { kind: 'migrate'; from: string; ms: number } | { kind: 'recompute'; ms: number } => {
      if (context === 0 || inst.bytes.kvBytesPerToken === 0) return { kind: 'none' };
      if (kv.tokensAt(r.spec.id, inst.unit, inst.id) === context) return { kind: 'none' };
      const owner = kv.owner(r.spec.id, inst.unit);
      const recompute = { kind: 'recompute' as const, ms: computeMs(inst.profile, { rows: 1, tokens: context }) };
      if (owner === null || owner === inst.id || features.kv === 'recompute') return recompute;
      const src = instances.get(owner);
      if (!src) return recompute;
      const pages = Math.ceil(context / KV_PAGE_SIZE);
      if (features.kv === 'least-busy') {
        // Owner transfer without overlap: every page copied.
        return { kind: 'migrate', from: owner, ms: transferMs(topology, src.device.id, inst.device.id, pages * KV_PAGE_SIZE * inst.bytes.kvBytesPerToken) };
      }
      return { kind: 'migrate', from: owner, ms: kvMigrationMs(pages, migrationRates(topology, src.device.id, inst.device.id, inst.bytes, inst.profile)) };
    };

    const dispatch = (r: Req, from: Inst | null) => {
      const now = clock.now();
      const { tokens, context } = rowShape(r);
      let options: { block: BlockManifest; route: HopRoute; insts: Inst[] }[];
      if (r.route && r.routeIndex < r.route.blocks.length) {
        const b = blockOf(r.route.blocks[r.routeIndex]!);
        options = [{ block: b, route: r.route, insts: byBlock.get(b.blockId) ?? [] }];
      } else {
        const routes = routesOf(r.spec.app, r.chainPos).filter((x) => x.designated || features.adaptive);
        options = routes.map((route) => ({ block: blockOf(route.blocks[0]!), route, insts: byBlock.get(route.blocks[0]!) ?? [] }));
      }
      const fromDevice = from?.device.id ?? null;
      const sendBytes = from ? activationBytes(from.bytes, tokens) : tokens * 4;
      const cands: (HopCandidate & { inst: Inst; option: (typeof options)[number] })[] = [];
      let owner: string | null = null;
      for (const o of options) {
        const ow = kv.owner(r.spec.id, o.block.blockId);
        if (owner === null && ow !== null && o.insts.some((i) => i.id === ow)) owner = ow;
        for (const inst of o.insts) {
          const need = from ? kvNeed(r, inst, context) : { kind: 'none' as const };
          const latency: LatencyInput = {
            dispatcher: from ? 'agent' : 'scheduler',
            profile: inst.profile,
            queued: inst.agent.queuedBatches(),
            request: { rows: 1, tokens },
            transferBytes: sendBytes,
            from: fromDevice,
            to: inst.device.id,
            kvMigrationMs: from && need.kind !== 'none' ? need.ms : 0,
            resident: inst.readyAt <= now,
            deviceIdle: !inst.device.busy,
            victimBytes: 0,
            blockBytes: inst.readyAt <= now ? 0 : inst.bytes.paramBytes * (inst.readyAt - now) / Math.max(1e-9, inst.readyAt - inst.loadedAt + 1e-9),
            // Multiplexed GPU: the batch shares the device with what runs there (its own batch, if any, ends first).
            slowdown: sharing === 'multiplex' ? Math.max(1, inst.device.jobs.length + (inst.agent.busy ? 0 : 1)) : 1,
            // The row joins a batch the instance runs anyway (its marginal cost, design note 5.5), after the running one.
            runningMs: runningLeftMs(inst),
            packed: inst.agent.busy || inst.agent.queueLength > 0,
          };
          cands.push({ instance: inst.id, block: o.block.blockId, device: inst.device.id, family: o.route.family, designated: o.route.designated, available: available(inst), latency, inst, option: o });
        }
      }
      if (cands.length === 0) {
        // No instance of the designated block anywhere: deploy one (algorithm 5.4 step 3) where placement says.
        const o = options[0]!;
        const spot = planScaleOut(topology, [...instances.values()].map((i) => ({ instance: i.id, block: i.unit, device: i.device.id, bytes: i.bytes.paramBytes })), [{ instance: 'virtual', block: o.block.blockId, device: devices[0]!.id, bytes: o.block.paramBytes, queue: ['x'], maxQueueLen: 0 }], traffic, { policy: placementPolicy, threshold: 1 });
        const dev = deviceById.get(spot[0]?.device ?? devices[0]!.id)!;
        const spec = topology.devices.find((d) => d.id === dev.id)!;
        const load = o.block.paramBytes / spec.loadBandwidth;
        loadTotal += load;
        deploy(o.block, dev, now + load);
        return dispatch(r, from);
      }
      let pick: (typeof cands)[number];
      if (from && features.kv === 'least-busy') {
        const sorted = [...cands].sort((a, b) => a.inst.agent.drainMs(a.inst.profile) - b.inst.agent.drainMs(b.inst.profile) || (a.instance < b.instance ? -1 : 1));
        pick = sorted[0]!;
      } else {
        const ownerInst = owner ? instances.get(owner) : undefined;
        const ownerRoom = ownerInst ? ownerInst.agent.queue().reduce((n, q) => n + q.bytes, 0) + tokens * (ownerInst.bytes.activationBytesPerToken + ownerInst.bytes.kvBytesPerToken) <= ownerInst.agent.memoryBytes : false;
        const choice = chooseInstance(topology, { requestId: r.spec.id, space: r.route?.family ?? chains.get(r.spec.app)!.family, kvOwner: features.kv === 'recompute' ? null : owner, ownerHasRoom: ownerRoom, allowAdaptive: features.adaptive, fromDevice }, cands);
        pick = cands.find((c) => c.instance === choice.instance)!;
      }
      const inst = pick.inst;
      if (!(r.route && r.routeIndex < r.route.blocks.length)) {
        r.route = pick.option.route;
        r.routeIndex = 0;
        if (!pick.option.route.designated) r.adaptive = true;
      }
      // The hop: activations over the link, then the KV brought over (overlapped migration) or recomputed.
      let delay = 0;
      if (fromDevice !== null && fromDevice !== inst.device.id) {
        const t = transferMs(topology, fromDevice, inst.device.id, sendBytes);
        delay += t;
        transferTotal += t;
        if (from && from.device.server !== inst.device.server) interBytes += sendBytes;
      }
      if (from) traffic.record(from.unit, inst.unit);
      const need = from ? kvNeed(r, inst, context) : { kind: 'none' as const };
      if (need.kind === 'migrate') {
        const src = instances.get(need.from)!;
        const plan = kv.planMigration([{ request: r.spec.id, block: inst.unit }], need.from, inst.id, migrationRates(topology, src.device.id, inst.device.id, inst.bytes, inst.profile));
        const ms = features.kv === 'least-busy' ? need.ms : plan.estimatedMs;
        const copied = features.kv === 'least-busy' ? plan.totalPages : plan.totalPages - plan.split;
        const copyBytes = copied * KV_PAGE_SIZE * inst.bytes.kvBytesPerToken;
        const copyMs = transferMs(topology, src.device.id, inst.device.id, copyBytes);
        transferTotal += Math.min(ms, copyMs);
        computeTotal += Math.max(0, ms - Math.min(ms, copyMs));
        if (src.device.server !== inst.device.server) interBytes += copyBytes;
        delay += ms;
        kvMigrations++;
      } else if (need.kind === 'recompute') {
        delay += need.ms;
        computeTotal += need.ms;
        kvRecomputes++;
      }
      const epoch = r.epoch;
      const arrive = () => {
        if (r.epoch !== epoch || r.done) return;
        if (r.running.has(inst)) {
          // A stale row of this request (rolled back) still runs there: arrive once it is out.
          r.deferred.set(inst, arrive);
          return;
        }
        if (need.kind !== 'none' && kv.tokensAt(r.spec.id, inst.unit, inst.id) !== context) {
          if (need.kind === 'migrate') {
            const old = kv.owner(r.spec.id, inst.unit);
            kv.materialize(r.spec.id, inst.unit, inst.id, context);
            if (old && old !== inst.id && kv.tokensAt(r.spec.id, inst.unit, old) !== null) {
              kv.releaseCopy(r.spec.id, inst.unit, old);
              instances.get(old)?.agent.evict(r.spec.id);
            }
          } else kv.materialize(r.spec.id, inst.unit, inst.id, context);
          inst.agent.adopt(r.spec.id, context);
        }
        const left = r.leftAt.get(inst);
        if (left !== undefined) r.roundTrip.set(inst, clock.now() - left);
        inst.agent.arrive([{ requestId: r.spec.id, iteration: r.iteration, position: r.step, tokens, contextTokens: context }]);
        r.queuedAt = inst;
        r.touched.add(inst);
        tryRun(inst.device);
      };
      events.schedule(now + delay, arrive);
    };

    /** After a step at `inst`: move along the route and chain; at the chain's end the iteration's token is out. */
    const advance = (r: Req, inst: Inst) => {
      r.routeIndex++;
      if (r.route && r.routeIndex >= r.route.blocks.length) {
        r.chainPos = r.route.rejoin;
        r.route = null;
        r.routeIndex = 0;
      }
      r.lastInst = inst;
      if (r.chainPos >= chains.get(r.spec.app)!.blocks.length && !r.route) {
        if (features.speculation !== 'off' && !ledger.canRelease(r.spec.id, r.iteration)) {
          r.held = true;
          return;
        }
        endIteration(r, inst);
        return;
      }
      r.step++;
      dispatch(r, inst);
    };
    const endIteration = (r: Req, inst: Inst) => {
      r.held = false;
      if (features.speculation !== 'off') ledger.retire(r.spec.id, r.iteration);
      r.iteration++;
      r.chainPos = 0;
      r.step = 0;
      if (r.iteration >= r.spec.outputTokens) {
        kv.release(r.spec.id);
        for (const i of r.touched) i.agent.evict(r.spec.id);
        record(r);
        return;
      }
      dispatch(r, inst);
    };
    const endsChain = (r: Req) => {
      const routeLeft = r.route ? r.route.blocks.length - r.routeIndex - 1 : 0;
      return routeLeft === 0 && (r.route ? r.route.rejoin : r.chainPos + 1) >= chains.get(r.spec.app)!.blocks.length;
    };
    const snapshots = new Map<string, SpecSnapshot>();
    const planKey = (inst: Inst, planId: number) => `${inst.id}#${planId}`;
    const forwardedKey = new Map<string, Set<string>>();
    if (features.speculation !== 'off') {
      onSurrogate = (inst, plan, epochs) => {
        const set = new Set<string>();
        for (const row of plan.rows) {
          const r = reqs.get(row.requestId)!;
          if (r.epoch !== epochs.get(row.requestId) || r.done || endsChain(r)) continue;
          if (ledger.openTags(r.spec.id, r.iteration).length > 0) continue;
          const tag = ledger.open(r.spec.id, r.iteration, r.step, r.step + 2);
          snapshots.set(`${r.spec.id}#${r.iteration}#${r.step}`, { tag, chainPos: r.chainPos, route: r.route, routeIndex: r.routeIndex, step: r.step, inst, block: blockOf(inst.unit) });
          set.add(row.requestId);
          advance(r, inst);
        }
        forwardedKey.set(planKey(inst, plan.planId), set);
      };
    }
    onBatchDone = (inst, plan, _started, epochs) => {
      const block = blockOf(inst.unit);
      const stale = new Set(plan.rows.filter((row) => reqs.get(row.requestId)!.epoch !== epochs.get(row.requestId)).map((row) => row.requestId));
      const outcomes = plan.rows.map((row) => {
        const r = reqs.get(row.requestId)!;
        // The countdown: the round trip this request last took back to this instance (InferCept's T_INT, §4.4),
        // or before it has one, the profiled rest of its chain; none in its last iteration (it will not be back).
        r.leftAt.set(inst, clock.now());
        const back = r.iteration + 1 >= r.spec.outputTokens ? undefined : (r.roundTrip.get(inst) ?? restOfChainMs(r.spec.app, inst.unit));
        return { requestId: row.requestId, finished: !stale.has(row.requestId) && r.done, ...(back !== undefined ? { returnInMs: back } : {}) };
      });
      inst.agent.complete(plan.planId, outcomes);
      const spec = forwardedKey.get(planKey(inst, plan.planId)) ?? new Set<string>();
      forwardedKey.delete(planKey(inst, plan.planId));
      for (const row of plan.rows) {
        const r = reqs.get(row.requestId)!;
        if (stale.has(row.requestId) || r.done) {
          // Work on a rolled-back (or finished) path: its KV append never happened.
          const held = kv.tokensAt(r.spec.id, inst.unit, inst.id);
          if (held === null || r.done) inst.agent.evict(r.spec.id);
          else inst.agent.adopt(r.spec.id, held);
          continue;
        }
        if (block.kvBytesPerToken > 0) kv.append(r.spec.id, inst.unit, inst.id, row.tokens);
        const stepIndex = row.position;
        pushTrace(r, { iteration: row.iteration, step: stepIndex, chainPos: spec.has(row.requestId) ? snapshots.get(`${r.spec.id}#${row.iteration}#${stepIndex}`)!.chainPos : r.chainPos, rejoin: (spec.has(row.requestId) ? snapshots.get(`${r.spec.id}#${row.iteration}#${stepIndex}`)!.route : r.route)?.rejoin ?? -1, routeIndex: spec.has(row.requestId) ? snapshots.get(`${r.spec.id}#${row.iteration}#${stepIndex}`)!.routeIndex : r.routeIndex, routeLength: (spec.has(row.requestId) ? snapshots.get(`${r.spec.id}#${row.iteration}#${stepIndex}`)!.route : r.route)?.blocks.length ?? 1, block: inst.unit });
        if (features.speculation !== 'off') ledger.record({ request: r.spec.id, iteration: row.iteration, position: stepIndex, instance: inst.id, block: inst.unit, kvTokens: block.kvBytesPerToken > 0 ? row.tokens : 0 });
        if (!spec.has(row.requestId)) {
          advance(r, inst);
          continue;
        }
        // Verify the surrogate's prediction against the real output (design note A18).
        const key = `${r.spec.id}#${row.iteration}#${stepIndex}`;
        const snap = snapshots.get(key)!;
        snapshots.delete(key);
        const cosine = features.speculation === 'perfect' ? 1 : specRng() < acceptance ? 0.99 : 0.9;
        const v = ledger.verify(snap.tag, cosine);
        if (v.accepted) {
          if (r.held && ledger.canRelease(r.spec.id, r.iteration)) endIteration(r, r.lastInst ?? inst);
          continue;
        }
        // Roll back: drop the tentative KV, pull the request from wherever it is, re-run from X's successor.
        for (const t of v.truncate) {
          const have = kv.tokensAt(t.request, t.block, t.instance);
          if (have === null) continue;
          kv.truncate(t.request, t.block, t.instance, have - t.tokens);
          const left = kv.tokensAt(t.request, t.block, t.instance);
          const at = instances.get(t.instance);
          if (at) left === null ? at.agent.evict(t.request) : at.agent.adopt(t.request, left);
        }
        r.epoch++;
        if (r.queuedAt) {
          r.queuedAt.agent.withdraw(r.spec.id);
          r.queuedAt = null;
        }
        if (trace) trace.set(r.spec.id, (trace.get(r.spec.id) ?? []).filter((s) => s.iteration !== row.iteration || s.step < v.resumeAt));
        r.held = false;
        r.chainPos = snap.chainPos;
        r.route = snap.route;
        r.routeIndex = snap.routeIndex;
        r.step = snap.step;
        advance(r, inst);
      }
    };

    for (const spec of workload.requests) events.schedule(spec.arrivalMs, () => dispatch(newReq(spec), null));

    const lastBusy = new Map<string, number>();
    const control = () => {
      const list = [...instances.values()];
      if (features.speculation !== 'off') {
        const chosen = new Set(selectSpeculation(list.map((i) => ({ instance: i.id, block: i.unit, drainMs: i.agent.drainMs(i.profile) })), chainIds, withSurrogate).map((c) => c.instance));
        for (const i of list) i.speculating = chosen.has(i.id);
      }
      if (kv.scanDue()) for (const f of kv.redundancyScan()) instances.get(f.instance)?.agent.evict(f.request);
      const now = clock.now();
      // Each GPU's busy fraction over the last control period: scale-out goes to GPUs with capacity to spare.
      const deviceLoad = new Map<string, number>();
      for (const d of devices) {
        progress(d);
        const b = busyByDevice.get(d.id) ?? 0;
        deviceLoad.set(d.id, (b - (lastBusy.get(d.id) ?? 0)) / controlEvery);
        lastBusy.set(d.id, b);
      }
      const plans = planScaleOut(
        topology,
        list.map((i) => ({ instance: i.id, block: i.unit, device: i.device.id, bytes: i.bytes.paramBytes })),
        list.filter((i) => i.readyAt <= now).map((i) => ({ instance: i.id, block: i.unit, device: i.device.id, bytes: i.bytes.paramBytes, queue: [...i.agent.runningRows(), ...i.agent.queue()].map((q) => q.requestId), maxQueueLen: Math.ceil(i.agent.maxBatch / scaleDivisor) })),
        traffic,
        { policy: placementPolicy, headroomBytes: headroom * gpu.memoryBytes, threshold: options.scaleThreshold ?? 0.8, deviceLoad },
      );
      for (const p of plans) {
        const src = instances.get(p.from)!;
        const dev = deviceById.get(p.device)!;
        const spec = topology.devices.find((d) => d.id === dev.id)!;
        const load = src.bytes.paramBytes / spec.loadBandwidth;
        loadTotal += load;
        scaleOuts++;
        placed.push({ instance: `${p.block}@${p.device}`, block: p.block, device: p.device, bytes: src.bytes.paramBytes });
        deploy(blockOf(p.block), dev, now + load);
      }
    };
    const memSample = () => {
      let params = 0;
      let request = 0;
      for (const i of instances.values()) {
        params += i.bytes.paramBytes;
        request += kv.usedPages(i.id) * KV_PAGE_SIZE * i.bytes.kvBytesPerToken;
      }
      memSamples.push({ params, request });
    };
    return { memSample, control, specStats: () => ledger.stats() };
  };

  let memSample: () => void;
  let control: (() => void) | null = null;
  let specStats = () => ({ speculations: 0, accepted: 0, rolledBack: 0 });
  if (policy === 'blockllm') ({ memSample, control, specStats } = runBlocks());
  else memSample = runUnits();

  const total = workload.requests.length;
  // The periodic events stop once only they are left (a lost request then fails the check below instead of spinning).
  let periodic = 0;
  const every = (period: number, first: number, fn: () => void) => {
    const loop = () => {
      periodic--;
      fn();
      if (records.length < total && events.size - periodic > 0) {
        periodic++;
        events.schedule(clock.now() + period, loop);
      }
    };
    periodic++;
    events.schedule(first, loop);
  };
  every(sampleEvery, 0, memSample);
  if (control) every(controlEvery, controlEvery, control);
  events.run();
  if (records.length !== total) throw new SimArgumentError(`simulation ended with ${records.length} of ${total} requests complete (policy ${policy}): a request was lost`);

  const makespan = Math.max(...records.map((r) => r.finishMs));
  const lat = records.map((r) => r.latencyMs).sort((a, b) => a - b);
  const tokens = records.reduce((n, r) => n + r.outputTokens, 0);
  const bins = Math.ceil(makespan / sampleEvery);
  const timeline = Array.from({ length: bins }, (_, b) => ({ tMs: b * sampleEvery, busy: (busyBins[b] ?? 0) / (Math.min(sampleEvery, makespan - b * sampleEvery) * devices.length) }));
  const busyTotal = busyBins.reduce((a, b) => a + (b ?? 0), 0);
  const mean = (f: (s: { params: number; request: number }) => number) => (memSamples.length === 0 ? 0 : memSamples.reduce((a, s) => a + f(s), 0) / memSamples.length);
  records.sort((a, b) => a.arrivalMs - b.arrivalMs || (a.id < b.id ? -1 : 1));
  return {
    policy,
    features: policy === 'blockllm' ? features : null,
    requests: records,
    p50Ms: percentile(lat, 0.5),
    p95Ms: percentile(lat, 0.95),
    meanMs: lat.reduce((a, b) => a + b, 0) / lat.length,
    makespanMs: makespan,
    throughputTokS: tokens / (makespan / 1000),
    computeMs: computeTotal,
    launchMs: launchTotal,
    transferMs: transferTotal,
    loadMs: loadTotal,
    communicationShare: transferTotal / Math.max(1e-9, computeTotal + transferTotal),
    interServerBytes: interBytes,
    utilisation: busyTotal / (makespan * devices.length),
    utilisationTimeline: timeline,
    deviceUtilisation: devices.map((d) => ({ device: d.id, busy: (busyByDevice.get(d.id) ?? 0) / makespan, instances: d.instances.length })),
    instanceStats: [...instances.values()].map((i) => ({ instance: i.id, device: i.device.id, block: i.unit, computeMs: i.computeMs, launchMs: i.launchTotalMs, ...i.agent.stats() })),
    memory: { paramBytes: mean((s) => s.params), requestBytes: mean((s) => s.request), peakParamBytes: Math.max(0, ...memSamples.map((s) => s.params)), peakRequestBytes: Math.max(0, ...memSamples.map((s) => s.request)) },
    speculation: (({ speculations, accepted, rolledBack }) => ({ speculations, accepted, rolledBack }))(specStats()),
    adaptiveRequests: records.filter((r) => r.adaptive).length,
    kvMigrations,
    kvRecomputes,
    scaleOuts,
    swaps,
    instances: instances.size,
    events: events.eventsRun,
    trace,
  };
}

/**
 * Several devices under one coordinator (the engine worker): the device workers, the placement registry (which
 * block instance lives on which device) and the step across devices.
 *
 * Placement comes from the serving core's policy (@tessera/block-zoo's placeChains / pickDevice / planScaleOut,
 * locality-aware by default; used as they are): an initial placement of every served chain's blocks, one instance
 * each, on-demand deployment for a chain whose block has no instance (design note §4.1: "deploys a new instance on
 * an available device"), and scale-out replicas of instances routed too many sequences (§4.6). Two provisioning
 * modes share the devices and the step:
 *
 *   'blocks'     BlockLLM: an instance per block (plus scale-out replicas), shared by every application whose chain
 *                uses it; the device's pool holds each tensor once. Each sequence keeps a route (the instances it
 *                runs through) while it lives: its KV is there. The route is chosen hop by hop by the §4.3 cost
 *                model (routing.ts: block-zoo's chooseInstance over the set's queues, profiled step times and links),
 *                among the chain's own blocks and, with adaptive serving, the equivalent segments the zoo records
 *                (block-zoo's hopRoutes): a route may run another weight set's blocks in place of a run of the
 *                chain's, so it is a list of instances in span order, not one per chain block.
 *   'per-model'  per-model provisioning (PM, the baseline of design note §6.3): each application's whole model is
 *                its own set of instances in a pool of its own on one device (nothing shared, no cross-application
 *                batching); a model that does not fit next to the resident ones waits until an idle one is evicted
 *                (LRU), and is loaded again in full when it comes back.
 *
 * A step (DeviceChainExecutor.step) walks the chains block by block in lockstep, as the ChainExecutor does, so that
 * every application reaching a block at the same point runs in one batch there. Groups are appended to their
 * device's program; a program is sent only when another device needs rows it produces (or at the end of the step),
 * so consecutive blocks on one device run back to back on its hidden state, and devices whose programs do not depend
 * on each other run at the same time. The step is all or nothing: every device that ran part of it commits or aborts.
 */
import {
  type BlockManifest,
  blockBytesOf,
  type BlockZoo,
  formatBlock,
  hopRoutes,
  KvCoordinator,
  meanRowCosine,
  type MigrationRates,
  migrationRates,
  pickDevice,
  type PlacedInstance,
  placeChains,
  planScaleOut,
  type ScaleCandidate,
  ServingCapacityError,
  type Topology,
  TrafficCounter,
} from '@tessera/block-zoo';
import { attentionLayersOf, type ChainSequence, variantSignature } from '@tessera/block-zoo/chain';
import { KV_PAGE_SIZE, systemClock } from '@tessera/core';
import type { WorkerEngineClient } from '@tessera/server-kit';

import type { CohortRef } from '../engine/step-loop.js';
import { BlockllmPlacementConflictError, BlockllmPlacementNotFoundError, BlockllmRequestError } from '../errors.js';
import { type DeviceProgram, type DeviceProtocol, type DeviceStats, type InputLogSnapshot, predictedSequence, predictionId, type ProgramResult, type RowBlock, startDevice } from './protocol.js';
import { SpeculationControl, type SpeculationOptions, surrogateKey } from './speculation.js';
import { InstanceProfiler, localTopology, type RouteSnapshot, routeByCostModel, workerTransportLink } from './routing.js';

export type Provisioning = 'blocks' | 'per-model';
export type PlacementPolicy = 'locality' | 'frag-min';

export interface DeviceSetOptions {
  devices: number;
  /** Bytes of block parameters each device holds at most. */
  deviceBytes: number;
  zooDir: string;
  kvPages: number;
  maxPositions: number;
  provisioning?: Provisioning;
  policy?: PlacementPolicy;
  /**
   * Scale-out (design note §4.6, the serving core's planScaleOut): an instance whose queue — the sequences routed
   * to it — exceeds 0.8 × this gets a replica on another device. 0 turns scale-out off (default).
   */
  scaleOutQueue?: number;
  /**
   * Adaptive serving (design note §4.3, algorithm 5.5): a hop may go to an instance of an equivalent segment of
   * another weight set of the same family instead of the chain's own block. Default true; false gives routes on the
   * chain's own blocks only.
   */
  adaptive?: boolean;
  /**
   * maxQueueLen of algorithm 5.4: an instance routed this many sequences is not available to a new sequence's first
   * hop, which then takes an available equivalent instance when there is one. Default: no bound (the first hop stays
   * on the chain's own block; later hops compare estimates).
   */
  maxQueueLen?: number;
  /**
   * Speculative execution on surrogates (design note §4.5, algorithm 5.8): the instances selectSpeculation picks
   * run a surrogate from the zoo beside them, and their successors on other devices run on its prediction while
   * they run. Off when absent.
   */
  speculation?: SpeculationOptions;
  /**
   * How a `migrate` job moves the K/V of the instance's running sequences (design note §4.4, algorithm 5.7):
   * 'overlapped' (default) recomputes the front of each sequence on the target by chunked prefill over the inputs
   * the source logged while the source copies the back, split where the two would meet by the serving core's
   * planMigration (`rates`: the measured ones, unless pinned here); 'copy' copies every page. The devices log each
   * attention instance's inputs per sequence only under 'overlapped'.
   */
  kvMigration?: { mode: 'copy' | 'overlapped'; rates?: Partial<MigrationRates> };
  /**
   * Variant batching (blocks provisioning): on a device, the instances of one base block's variants — the
   * foundation's component and the fused PE blocks that modify it — share a KV cache, and the rows reaching them at
   * one point of a step run as one batch, each row keyed to its own variant's delta: the base weights pass once.
   * Default true.
   */
  variantBatching?: boolean;
  /**
   * Cohort homes (blocks provisioning, several devices): when the step loop runs a multiple of the device count of
   * cohorts, cohort i's new sequences route on device i mod n first (RouteSnapshot.home), so each device steps its
   * own cohorts and the devices do not wait on each other within a step. Default true.
   */
  cohortHomes?: boolean;
}

export interface InstanceInfo {
  instance: string;
  block: string;
  label: string;
  device: string;
  /** Pool key: 'shared' (BlockLLM) or the application (per-model provisioning). */
  pool: string;
  /**
   * What the instance adds to its device: the bytes of its tensors no earlier instance of the same pool there holds
   * (a fused LoRA block next to the foundation's block adds only the LoRA), so a device's instances sum to what its
   * pool really holds, the budget the device enforces.
   */
  bytes: number;
}

/** Counters of the cross-device step, cumulative. */
export interface DeviceCounters {
  steps: number;
  /** Steps that started while another cohort's step was in flight on the devices (pipelining). */
  overlappedSteps: number;
  /** Batches that ran several variants of one base block together (variant batching). */
  variantBatches: number;
  programs: number;
  /** Hidden-state bytes that crossed from one device to another. */
  crossBytes: number;
  crossRows: number;
  /** Wall time of the device steps, and the part of it not spent running blocks on a device (hand-offs, messages). */
  stepMs: number;
  overheadMs: number;
  /** Instances deployed and evicted (placement jobs, on-demand deployment, scale-out, per-model swaps). */
  deploys: number;
  /** Replicas deployed by scale-out. */
  scaleOuts: number;
  evictions: number;
  /** Bytes loaded onto devices by deployments. */
  loadedBytes: number;
  /** Route hops chosen by the §4.3 cost model (chooseInstance), by its reason: the lowest estimate, or the KV owner (rule 1). */
  hopsMinLatency: number;
  hopsKvOwner: number;
  /** Chosen hops whose rows come from another device (the previous block's instance is elsewhere). */
  hopsCrossDevice: number;
  /** Chosen hops that run a block of an equivalent segment instead of the chain's own (adaptive serving). */
  hopsAdaptive: number;
  /** K/V pages moved by migrate jobs: recomputed on the target from logged inputs, and copied from the source. */
  migrationPagesRecomputed: number;
  migrationPagesCopied: number;
  /** Speculations opened, accepted, rolled back; tentative block runs dropped; rows re-run on the real output. */
  speculations: number;
  specAccepted: number;
  specRolledBack: number;
  specDroppedSteps: number;
  specRepairedRows: number;
}

export interface PlacementView {
  provisioning: Provisioning;
  policy: PlacementPolicy;
  devices: { id: string; budgetBytes: number; residentBytes: number; utilisation: number; instances: string[] }[];
  /** Each instance, with the sequences routed through it since it was deployed. */
  instances: (InstanceInfo & { routed: number })[];
  chains: {
    app: string;
    instances: string[];
    devices: string[];
    /** The equivalent segments adaptive serving may run instead of the chain's blocks (same family; see equivalentsOf). */
    equivalents: ChainEquivalent[];
  }[];
  /** Whether adaptive serving is on. */
  adaptive: boolean;
  /** Speculation (null when off): its threshold and fraction, the surrogates deployed, the ledger's counts. */
  speculation: {
    acceptCosine: number;
    fraction: number;
    surrogates: { instance: string; surrogate: string; device: string; label: string; cosine: number; tracked: number }[];
    speculations: number;
    accepted: number;
    rolledBack: number;
    droppedSteps: number;
    repairedRows: number;
  } | null;
}

/** An equivalent segment of a chain: `blocks` may run instead of the chain's blocks [position, rejoin). */
export interface ChainEquivalent {
  position: number;
  blocks: string[];
  rejoin: number;
  score: number;
}

type DeviceClient = WorkerEngineClient<DeviceProtocol>;

/**
 * Steps and placement changes: steps run side by side (the step loop's cohorts: their sequences are disjoint), a
 * placement change (a job, a deployment before admission, speculation's selection) runs alone, between steps. A
 * change asked for holds back the steps asked for after it, so a busy loop cannot starve it.
 */
export class StepGate {
  /** Steps in flight now. */
  steps = 0;
  private drained: (() => void)[] = [];
  /** The last change asked for, until it ends (the next one runs after it). */
  private change: Promise<void> | null = null;

  async step<T>(fn: () => Promise<T>): Promise<T> {
    while (this.change !== null) await this.change;
    this.steps++;
    try {
      return await fn();
    } finally {
      if (--this.steps === 0) for (const done of this.drained.splice(0)) done();
    }
  }

  alone<T>(fn: () => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      while (this.steps > 0) await new Promise<void>((resolve) => this.drained.push(resolve));
      return fn();
    };
    const next = (this.change ?? Promise.resolve()).then(run, run);
    const ended = next.then(
      () => undefined,
      () => undefined,
    );
    this.change = ended;
    void ended.then(() => {
      if (this.change === ended) this.change = null;
    });
    return next;
  }
}

export class DeviceSet {
  readonly provisioning: Provisioning;
  policy: PlacementPolicy;
  readonly topology: Topology;
  readonly traffic = new TrafficCounter();
  readonly counters: DeviceCounters = {
    steps: 0,
    overlappedSteps: 0,
    variantBatches: 0,
    programs: 0,
    crossBytes: 0,
    crossRows: 0,
    stepMs: 0,
    overheadMs: 0,
    deploys: 0,
    scaleOuts: 0,
    evictions: 0,
    loadedBytes: 0,
    hopsMinLatency: 0,
    hopsKvOwner: 0,
    hopsCrossDevice: 0,
    hopsAdaptive: 0,
    migrationPagesRecomputed: 0,
    migrationPagesCopied: 0,
    speculations: 0,
    specAccepted: 0,
    specRolledBack: 0,
    specDroppedSteps: 0,
    specRepairedRows: 0,
  };
  /** Speculation's state (its surrogates and ledger); null when it is off. */
  readonly speculation: SpeculationControl | null;
  /** Each instance's time per token, from the block runs the devices report (the cost model's compute profile). */
  readonly profiler = new InstanceProfiler();
  /** Sequences routed through each instance since it was deployed (the placement view's `routed`). */
  private readonly routedTotal = new Map<string, number>();
  private readonly instances = new Map<string, InstanceInfo>();
  private readonly manifests = new Map<string, BlockManifest>();
  private readonly variantKeys = new Map<string, string>();
  /** Per-model provisioning: when each application's model was last used (LRU). */
  private readonly lastUsed = new Map<string, number>();
  private useClock = 0;
  private readonly seeded = new Set<string>();
  /**
   * Each live sequence's route: the instances it runs through in span order (one per chain block, or an equivalent
   * segment's blocks in place of some), kept while it lives (its KV is there).
   */
  readonly routes = new Map<string, { app: string; keys: string[] }>();
  readonly gate = new StepGate();
  /** Per device: released sequences it has not been told of yet. */
  readonly releases = new Map<string, string[]>();
  /** Sequences in a step in flight: a release waits for the step's end (its programs may still be on their way). */
  readonly inflight = new Set<string>();
  private readonly heldReleases = new Set<string>();
  /** `end` calls posted and not yet answered (a settle waits for them). */
  private readonly ending = new Set<Promise<unknown>>();

  private constructor(
    readonly zoo: BlockZoo,
    readonly clients: ReadonlyMap<string, DeviceClient>,
    readonly options: DeviceSetOptions,
  ) {
    this.provisioning = options.provisioning ?? 'blocks';
    this.policy = options.policy ?? 'locality';
    this.speculation = options.speculation && this.provisioning === 'blocks' ? new SpeculationControl(zoo, options.speculation) : null;
    // One machine: every device on one server; the links only matter to the placement policy's locality score (the
    // route's cost model builds its own topology with the worker transport's link, routeTopology).
    this.topology = {
      devices: [...clients.keys()].map((id) => ({ id, server: 'local', memoryBytes: options.deviceBytes, memBandwidth: 1e6, loadBandwidth: 1e6 })),
      intraServer: { bandwidth: 1e6, latencyMs: 0.01 },
      interServer: { bandwidth: 1e6, latencyMs: 0.01 },
      schedulerServer: 'local',
    };
  }

  static async start(zoo: BlockZoo, options: DeviceSetOptions): Promise<DeviceSet> {
    if (!Number.isSafeInteger(options.devices) || options.devices < 1) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `devices must be a positive integer, got ${options.devices}`);
    const ids = Array.from({ length: options.devices }, (_, i) => `device-${i}`);
    const started = await Promise.allSettled(
      ids.map((device) =>
        startDevice({
          device,
          zooDir: options.zooDir,
          budgetBytes: options.deviceBytes,
          kvPages: options.kvPages,
          maxPositions: options.maxPositions,
          inputLog: (options.kvMigration?.mode ?? 'overlapped') === 'overlapped',
          variantBatching: options.variantBatching ?? true,
        }),
      ),
    );
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) {
      await Promise.allSettled(started.map((s) => (s.status === 'fulfilled' ? s.value.close() : undefined)));
      throw (failed as PromiseRejectedResult).reason;
    }
    const clients = new Map(ids.map((id, i) => [id, (started[i] as PromiseFulfilledResult<DeviceClient>).value]));
    return new DeviceSet(zoo, clients, options);
  }

  get deviceIds(): string[] {
    return [...this.clients.keys()];
  }

  /** The instance keys of an application's chain under this provisioning. */
  instanceKeys(app: string): { key: string; manifest: BlockManifest }[] {
    return this.zoo.chain(app).blocks.map((manifest) => ({ key: this.provisioning === 'blocks' ? manifest.blockId : `${app}/${manifest.blockId}`, manifest }));
  }

  instance(key: string): InstanceInfo | undefined {
    return this.instances.get(key);
  }

  placed(): PlacedInstance[] {
    return [...this.instances.values()].map((i) => ({ instance: i.instance, block: i.block, device: i.device, bytes: i.bytes }));
  }

  /** The live sequences routed through the instance (they hold KV in it). */
  sequencesThrough(key: string): string[] {
    return [...this.routes].filter(([, r]) => r.keys.includes(key)).map(([id]) => id);
  }

  usersOf(key: string): number {
    return this.sequencesThrough(key).length;
  }

  /** Live sequences of an application. */
  liveOf(app: string): number {
    let n = 0;
    for (const r of this.routes.values()) if (r.app === app) n++;
    return n;
  }

  /** The instances of a block (BlockLLM provisioning: the first one, keyed by the block id, and scale-out replicas). */
  instancesOf(blockId: string): InstanceInfo[] {
    return [...this.instances.values()].filter((i) => i.block === blockId && i.pool === 'shared');
  }

  /** The key of a new instance of a block on a device: the block id for its first instance, else `block@device`. */
  keyFor(blockId: string, device: string): string {
    return this.instances.has(blockId) ? `${blockId}@${device}` : blockId;
  }

  /** The cost model's topology: the devices on one server, linked by the worker transport as measured so far. */
  routeTopology(): Topology {
    return localTopology(this.deviceIds, this.options.deviceBytes, workerTransportLink(this.counters));
  }

  /**
   * What the cost model needs to route a sequence of `app` whose first step carries `tokens` new tokens: the
   * chain's blocks, every shared instance with its routed sequences and per-token time, the topology, and for a
   * live sequence whose route lost an instance the instances of its old route that still hold its KV.
   */
  routeSnapshot(id: string, app: string, tokens: number, home?: string): RouteSnapshot {
    const routeBlock = (manifest: BlockManifest) => ({ blockId: manifest.blockId, label: formatBlock(manifest), bytes: blockBytesOf(manifest) });
    const chain = this.instanceKeys(app).map(({ manifest }) => routeBlock(manifest));
    const equivalents = this.equivalentsOf(app).map((e) => ({ ...e, blocks: e.blocks.map((b) => routeBlock(this.zoo.block(b))) }));
    const sequences = new Map<string, number>();
    for (const [other, r] of this.routes) if (other !== id) for (const k of r.keys) sequences.set(k, (sequences.get(k) ?? 0) + 1);
    // The candidates: every deployed instance of the chain's (designated) blocks and of its equivalent segments'.
    const instances = [...new Set([...chain, ...equivalents.flatMap((e) => e.blocks)].map((b) => b.blockId))].flatMap((block) => {
      const of = this.instancesOf(block);
      return of.map((i) => ({
        instance: i.instance,
        block,
        device: i.device,
        sequences: sequences.get(i.instance) ?? 0,
        perTokenMs: this.profiler.perTokenMs(
          i.instance,
          of.filter((o) => o !== i).map((o) => o.instance),
          this.manifests.get(i.instance)!.paramBytes,
        ),
      }));
    });
    const known = this.routes.get(id);
    const owners = known?.keys.filter((k) => this.instances.has(k));
    return {
      requestId: id,
      app,
      tokens: Math.max(1, tokens),
      chain,
      instances,
      topology: this.routeTopology(),
      equivalents,
      allowAdaptive: this.options.adaptive ?? true,
      ...(this.options.maxQueueLen !== undefined ? { maxQueueLen: this.options.maxQueueLen } : {}),
      ...(owners ? { owners } : {}),
      ...(home !== undefined ? { home } : {}),
    };
  }

  /**
   * The home device of cohort `index` of `count` (cohort homes): device index mod n when homes are on, the set
   * provisions blocks over several devices and the cohorts split evenly over the devices (`count` a multiple of n);
   * else none.
   */
  homeOf(cohort: CohortRef | undefined): string | undefined {
    const n = this.deviceIds.length;
    if (!cohort || !(this.options.cohortHomes ?? true) || this.provisioning !== 'blocks' || n < 2 || cohort.count % n !== 0) return undefined;
    return this.deviceIds[cohort.index % n];
  }

  /**
   * The equivalent segments of an application's chain (block-zoo's hopRoutes at each position, its non-designated
   * routes), for adaptive serving. Only segments of the chain's own family: another family's hidden size needs a
   * stitch block between the segments (§3.4), which neither the chain executor nor the devices run, so cross-family
   * routes (`requiresStitch`, or another family) are left out of the candidates.
   */
  equivalentsOf(app: string): ChainEquivalent[] {
    if (this.provisioning !== 'blocks') return [];
    const chain = this.zoo.chain(app);
    return chain.blocks.flatMap((_, position) =>
      hopRoutes(this.zoo, app, position)
        .filter((r) => !r.designated && !r.requiresStitch && r.family === chain.family)
        .map((r) => ({ position, blocks: r.blocks, rejoin: r.rejoin, score: r.score ?? 0 })),
    );
  }

  /**
   * A sequence's instances in span order: the route it has (sticky: its KV lives there), or a new one. BlockLLM:
   * each hop by the §4.3 cost model over the set's snapshot (routeByCostModel: hop 0 a scheduler dispatch, later
   * hops agent dispatches from the previous hop's device; with adaptive serving an equivalent segment's instances
   * may stand in for a run of the chain's blocks), the reasons counted. `tokens`: the new tokens of the sequence's
   * first step (its prompt). `home`: the device of the sequence's cohort (homeOf), preferred by a new route.
   */
  route(id: string, app: string, tokens = 1, home?: string): { key: string; manifest: BlockManifest; device: string }[] {
    const known = this.routes.get(id);
    const hopsOf = (keys: readonly string[]) => keys.map((key) => ({ key, manifest: this.manifests.get(key)!, device: this.instances.get(key)!.device }));
    if (known && known.keys.every((k) => this.instances.has(k))) return hopsOf(known.keys);
    let keys: string[];
    if (this.provisioning !== 'blocks') keys = this.instanceKeys(app).map((c) => c.key);
    else {
      const hops = routeByCostModel(this.routeSnapshot(id, app, tokens, home));
      for (const h of hops) {
        if (h.reason === 'kv-owner') this.counters.hopsKvOwner++;
        else this.counters.hopsMinLatency++;
        if (h.crossDevice) this.counters.hopsCrossDevice++;
        if (h.adaptive) this.counters.hopsAdaptive++;
      }
      keys = hops.map((h) => h.instance);
    }
    for (const k of keys) if (!this.instances.has(k)) throw new BlockllmPlacementNotFoundError(`instance ${k} of ${app} is not deployed`);
    this.routes.set(id, { app, keys });
    for (const k of keys) if (!known?.keys.includes(k)) this.routedTotal.set(k, (this.routedTotal.get(k) ?? 0) + 1);
    return hopsOf(keys);
  }

  /**
   * Scale-out: the serving core's planScaleOut over every shared instance, its queue being the sequences routed
   * through it plus the admitted ones about to be; each planned replica is deployed (a device that turns out to lack
   * the room keeps the plan from happening, nothing else). Requests are not moved: new sequences route to the
   * replica by the cost model (its queue is empty).
   */
  private async scaleOut(admitted: readonly string[]): Promise<void> {
    const hotApps = new Set([...admitted, ...[...this.routes.values()].map((r) => r.app)]);
    for (const plan of this.scaleOutPlan(admitted)) {
      if (!(await this.tryReplica(plan.block, plan.device))) continue;
      // Locality (§4.7): the chains through the replica follow it to its device where they fit, so a sequence
      // routed there runs its whole chain on one device instead of hopping back for its own blocks.
      for (const app of hotApps) {
        const chain = this.zoo.chain(app).blocks;
        if (!chain.some((b) => b.blockId === plan.block)) continue;
        for (const b of chain) if (!this.instancesOf(b.blockId).some((i) => i.device === plan.device)) await this.tryReplica(b.blockId, plan.device);
      }
    }
  }

  /** planScaleOut's replicas over the set's queues, with the admitted applications' sequences counted in. */
  private scaleOutPlan(admitted: readonly string[]): ReturnType<typeof planScaleOut> {
    const maxQueueLen = this.options.scaleOutQueue ?? 0;
    if (this.provisioning !== 'blocks' || maxQueueLen <= 0 || this.clients.size < 2) return [];
    const queues = new Map<string, string[]>();
    for (const [id, r] of this.routes) for (const k of r.keys) queues.set(k, [...(queues.get(k) ?? []), id]);
    admitted.forEach((app, n) => {
      for (const c of this.instanceKeys(app)) {
        const least = this.instancesOf(c.manifest.blockId).sort((a, b) => (queues.get(a.instance)?.length ?? 0) - (queues.get(b.instance)?.length ?? 0))[0];
        if (least) queues.set(least.instance, [...(queues.get(least.instance) ?? []), `admitted-${n}`]);
      }
    });
    // A replica's size is what it adds where it would go (the least among the devices without the block).
    const addedBytes = (block: string) => {
      const m = this.zoo.block(block);
      const there = new Set(this.instancesOf(block).map((i) => i.device));
      return Math.min(...this.deviceIds.filter((d) => !there.has(d)).map((d) => this.marginal(m, d)));
    };
    const candidates: ScaleCandidate[] = [...this.instances.values()]
      .filter((i) => i.pool === 'shared' && this.instancesOf(i.block).length < this.clients.size)
      .map((i) => ({ instance: i.instance, block: i.block, device: i.device, bytes: addedBytes(i.block), queue: queues.get(i.instance) ?? [], maxQueueLen }));
    return planScaleOut(this.topology, this.placed(), candidates, this.traffic, { policy: this.policy });
  }

  /**
   * Whether admitting `admitted` deploys anything (ensure would): a chain block without an instance, a model that
   * is not resident, or a scale-out replica with room on its device. Counts the use of each application (the LRU of
   * per-model provisioning).
   */
  needsDeployment(admitted: readonly string[]): boolean {
    for (const app of admitted) this.lastUsed.set(app, ++this.useClock);
    for (const app of new Set(admitted)) {
      if (this.provisioning === 'blocks') {
        if (this.instanceKeys(app).some(({ manifest }) => this.instancesOf(manifest.blockId).length === 0)) return true;
      } else if (this.instanceKeys(app).some((k) => !this.instances.has(k.key))) return true;
    }
    const free = this.free();
    return this.scaleOutPlan(admitted).some((plan) => this.marginal(this.zoo.block(plan.block), plan.device) <= free.get(plan.device)!);
  }

  /** Deploys a scale-out replica when the device has room (by the registry, then by the device's own budget). */
  private async tryReplica(block: string, device: string): Promise<boolean> {
    if (this.instancesOf(block).some((i) => i.device === device)) return true;
    const m = this.zoo.block(block);
    if (this.marginal(m, device) > this.free().get(device)!) return false;
    try {
      await this.deploy(this.keyFor(block, device), m, device, 'shared');
      this.counters.scaleOuts++;
      return true;
    } catch (err) {
      if (err instanceof BlockllmPlacementConflictError) return false;
      throw err;
    }
  }

  private client(device: string): DeviceClient {
    const c = this.clients.get(device);
    if (!c) throw new BlockllmPlacementNotFoundError(`no device ${device}; the devices are ${this.deviceIds.join(', ')}`);
    return c;
  }

  /**
   * Forgets a sequence on every device (with each device's next program, or at the next settle); one in a step in
   * flight is forgotten once that step ended.
   */
  release(id: string): void {
    this.speculation?.release(id);
    if (this.inflight.has(id)) {
      this.heldReleases.add(id);
      return;
    }
    for (const d of this.deviceIds) {
      let list = this.releases.get(d);
      if (!list) this.releases.set(d, (list = []));
      list.push(id);
    }
  }

  /** A step's sequences leave the flight: the releases held for them go out. */
  landed(ids: Iterable<string>): void {
    for (const id of ids) {
      this.inflight.delete(id);
      if (this.heldReleases.delete(id)) this.release(id);
    }
  }

  /** The sequences a device has to forget before anything else. */
  takeReleases(device: string): string[] {
    const release = this.releases.get(device) ?? [];
    this.releases.delete(device);
    return release;
  }

  /**
   * Ends a step on a device: posted at once (a worker takes its messages in order, so it lands before any later
   * program of those sequences), answered in the background; a settle waits for it.
   */
  endStep(device: string, step: number, commit: boolean): Promise<unknown> {
    const ended = this.client(device).call('end', { step, commit, release: this.takeReleases(device) });
    const tracked = ended.finally(() => this.ending.delete(tracked));
    this.ending.add(tracked);
    return tracked;
  }

  /** Waits for the posted step ends and delivers the releases (before the instances change). */
  async settle(): Promise<void> {
    await Promise.all([...this.ending]);
    await Promise.all(
      this.deviceIds.map((d) => {
        const release = this.takeReleases(d);
        return release.length === 0 ? null : this.client(d).call('end', { step: -1, commit: false, release });
      }),
    );
  }

  async deploy(key: string, manifest: BlockManifest, device: string, pool: string): Promise<InstanceInfo> {
    await this.settle();
    if (this.instances.has(key)) throw new BlockllmPlacementConflictError(`${key} is already deployed on ${this.instances.get(key)!.device}`);
    if (manifest.span === null) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `block ${manifest.blockId} is a ${manifest.kind}, not a chain block`);
    await this.client(device).call('deploy', { instance: key, manifest, pool, variants: this.variantsOf(manifest) });
    const info: InstanceInfo = { instance: key, block: manifest.blockId, label: formatBlock(manifest), device, pool, bytes: this.marginal(manifest, device, pool) };
    this.instances.set(key, info);
    this.manifests.set(key, manifest);
    this.counters.deploys++;
    this.counters.loadedBytes += manifest.paramBytes;
    return info;
  }

  /** An instance's base block (variantSignature of its block; its own key for a block that runs alone), cached. */
  variantKey(instance: string): string {
    let k = this.variantKeys.get(instance);
    if (k === undefined) {
      const m = this.manifests.get(instance);
      k = (m && variantSignature(m)) ?? instance;
      this.variantKeys.set(instance, k);
    }
    return k;
  }

  /** The distinct blocks of the served chains that are variants of this block's base block (itself included). */
  private variantsOf(manifest: BlockManifest): number {
    const signature = variantSignature(manifest);
    if (signature === null) return 1;
    const blocks = new Set([manifest.blockId]);
    for (const app of this.zoo.apps()) for (const b of this.zoo.chain(app).blocks) if (variantSignature(b) === signature) blocks.add(b.blockId);
    return blocks.size;
  }

  async evict(key: string): Promise<void> {
    const info = this.instances.get(key);
    if (!info) throw new BlockllmPlacementNotFoundError(`no instance ${key} is deployed`);
    await this.settle();
    // Its surrogate goes with it (a migrated instance speculates again when the selection picks it on its new device).
    await this.dropSurrogate(key, false);
    await this.client(info.device).call('evict', { instance: key });
    this.instances.delete(key);
    this.manifests.delete(key);
    this.profiler.forget(key);
    this.routedTotal.delete(key);
    this.recount(info.device);
    this.counters.evictions++;
  }

  /**
   * Moves an instance to another device with the KV of every sequence routed through it (design note §4.4: the
   * request-related data moves with the instance, so running sequences keep their tokens). Between steps: the last
   * step is committed first; the new instance is deployed under a transient key, each routed sequence's committed
   * K/V is copied from the old one (host snapshots over the worker transport) into it, the old one is evicted and
   * the new one takes its key, so the routes stay as they are. A failure before the eviction (the target's cache
   * cannot take the pages, the deploy does not fit) evicts the new instance and leaves the old one serving.
   */
  async migrate(key: string, device: string): Promise<{ from: string; sequences: number; pages: number; recomputedPages: number; copiedPages: number }> {
    const info = this.instances.get(key);
    if (!info) throw new BlockllmPlacementNotFoundError(`no instance ${key} is deployed`);
    this.client(device); // an unknown device throws here, before anything moves
    if (info.device === device) throw new BlockllmPlacementConflictError(`${key} is already on ${device}`);
    const manifest = this.manifests.get(key)!;
    const temp = `${key}~${device}`;
    await this.deploy(temp, manifest, device, info.pool);
    let sequences = 0;
    let pages = 0;
    let recomputedPages = 0;
    try {
      const ids = this.sequencesThrough(key);
      if (ids.length > 0) {
        // Overlapped (5.7): the front of each sequence is recomputed on the target from the inputs the source
        // logged while the source exports the back; the back then lands on the recomputed front.
        const overlapped = (this.options.kvMigration?.mode ?? 'overlapped') === 'overlapped';
        const { front, recompute } = overlapped ? await this.planFront(key, temp, manifest, info.device, device, ids) : { front: new Map<string, number>(), recompute: null };
        const [, out] = await Promise.all([
          recompute && this.client(device).call('recomputeKv', { ...recompute, instance: temp }),
          this.client(info.device).call('exportKv', { instance: key, ids, from: Object.fromEntries(front) }),
        ]);
        sequences = out.sequences.length;
        this.counters.crossBytes += snapshotBytes(out.sequences);
        pages = (await this.client(device).call('importKv', { instance: temp, sequences: out.sequences })).pages;
        recomputedPages = [...front.values()].reduce((n, t) => n + Math.ceil(t / KV_PAGE_SIZE), 0);
      }
    } catch (err) {
      await this.evict(temp);
      throw err;
    }
    const routed = this.routedTotal.get(key) ?? 0;
    await this.evict(key);
    await this.client(device).call('rename', { from: temp, to: key });
    // The instance keeps its count of routed sequences; its time per token is measured anew on its new device.
    this.routedTotal.set(key, routed);
    this.routedTotal.delete(temp);
    this.profiler.forget(temp);
    const moved = this.instances.get(temp)!;
    this.instances.delete(temp);
    this.instances.set(key, { ...moved, instance: key });
    this.manifests.delete(temp);
    this.manifests.set(key, manifest);
    this.counters.migrationPagesRecomputed += recomputedPages;
    this.counters.migrationPagesCopied += pages - recomputedPages;
    return { from: info.device, sequences, pages, recomputedPages, copiedPages: pages - recomputedPages };
  }

  /**
   * Plans an overlapped migration's recompute half: the serving core's planMigration (a KvCoordinator holding the
   * sequences' K/V at the source) splits the pages, in global order, where chunked prefill on the target from the
   * front and copying from the back would meet, at the measured rates (recompute: the instance's profiled time per
   * token; copy: the worker link's bandwidth over the block's K/V bytes per page) unless pinned. Returns each
   * sequence's front length (the copy starts there) and the target's recompute job: the inputs the source logged
   * (the whole log, so the target can be migrated again), run while the source exports the back. Sequences
   * without a whole log (they arrived by a KV move; a prefix block) are copied whole.
   */
  private async planFront(key: string, temp: string, manifest: BlockManifest, src: string, dst: string, ids: readonly string[]): Promise<{ front: Map<string, number>; recompute: { chunk: number; sequences: (InputLogSnapshot & { upTo: number })[] } | null }> {
    const logs = (await this.client(src).call('exportInputs', { instance: key, ids: [...ids] })).sequences.filter((s) => s.length > 0);
    const front = new Map<string, number>();
    if (logs.length === 0) return { front, recompute: null };
    const coordinator = new KvCoordinator({ clock: systemClock });
    for (const s of logs) coordinator.append(s.id, manifest.blockId, key, s.length);
    const siblings = this.instancesOf(manifest.blockId).map((i) => i.instance).filter((k) => k !== key);
    const perTokenMs = this.profiler.perTokenMs(key, siblings, manifest.paramBytes);
    const measured = migrationRates(this.routeTopology(), src, dst, blockBytesOf(manifest), { fixedMs: workerTransportLink(this.counters).latencyMs, perRowMs: 0, perTokenMs });
    const rates: MigrationRates = { ...measured, ...this.options.kvMigration?.rates };
    const plan = coordinator.planMigration(logs.map((s) => ({ request: s.id, block: manifest.blockId })), key, temp, rates);
    const byId = new Map(logs.map((s) => [s.id, s]));
    const sequences = plan.sequences.map((p) => ({ ...byId.get(p.request)!, upTo: p.recomputeTokens }));
    for (const s of sequences) front.set(s.id, s.upTo);
    this.counters.crossBytes += logs.reduce((n, s) => n + s.rows.byteLength, 0);
    return { front, recompute: { chunk: Math.max(1, Math.floor(rates.chunkPages)) * KV_PAGE_SIZE, sequences } };
  }

  /**
   * The instances the live sequences of `key` may move to when it is evicted: the other instances of its block
   * (scale-out replicas, or the first instance when `key` is a replica) not in `leaving`, the fewest sequences routed
   * through them first, then by key. Throws a 409 naming why when sequences hold KV in `key` and there is none.
   */
  moveTargets(key: string, leaving: ReadonlySet<string> = new Set()): InstanceInfo[] {
    const info = this.instances.get(key);
    if (!info) throw new BlockllmPlacementNotFoundError(`no instance ${key} is deployed`);
    const n = this.usersOf(key);
    if (n === 0) return [];
    const targets = this.instancesOf(info.block)
      .filter((i) => i.instance !== key && !leaving.has(i.instance))
      .map((i) => ({ i, users: this.usersOf(i.instance) }))
      .sort((a, b) => a.users - b.users || (a.i.instance < b.i.instance ? -1 : a.i.instance > b.i.instance ? 1 : 0))
      .map((t) => t.i);
    if (targets.length === 0) {
      const others = this.instancesOf(info.block).filter((i) => i.instance !== key);
      throw new BlockllmPlacementConflictError(
        `instance ${key} holds the KV of ${n} running sequence(s) and ${others.length === 0 ? `is the only instance of block ${info.block} (${formatBlock(this.manifests.get(key)!)})` : `every other instance of its block (${others.map((i) => i.instance).join(', ')}) goes too`}: ` +
          `there is none left for them to move to. A migrate job moves the instance to another device with their KV; or deploy a replica of the block first, or retry when they finish`,
      );
    }
    return targets;
  }

  /**
   * Whether the KV of the live sequences of `key` fits the cache of some instance they may move to (moveTargets), by
   * the pages they hold now and the pages free there: null when it does (or there is nothing to move), else why not.
   * A check before the job runs; the move itself checks again, all or nothing.
   */
  async moveRoomProblem(key: string, leaving: ReadonlySet<string> = new Set()): Promise<string | null> {
    const targets = this.moveTargets(key, leaving);
    if (targets.length === 0) return null;
    const ids = this.sequencesThrough(key);
    let held: { cache: boolean; pages: number };
    let room: { t: InstanceInfo; free: number }[];
    try {
      held = await this.client(this.instances.get(key)!.device).call('kvPages', { instance: key, ids });
      if (!held.cache || held.pages === 0) return null;
      room = await Promise.all(targets.map(async (t) => ({ t, free: (await this.client(t.device).call('kvPages', { instance: t.instance, ids: [] })).free })));
    } catch {
      // Not between steps: a job may have changed the instances meanwhile; the job's own run decides.
      return null;
    }
    if (room.some((r) => r.free >= held.pages)) return null;
    return (
      `the ${ids.length} running sequence(s) routed through ${key} hold ${held.pages} KV page(s) there, more than any other instance of its block has free ` +
      `(${room.map((r) => `${r.t.instance} on ${r.t.device}: ${r.free}`).join(', ')}); nothing changed: retry when sequences finish, or deploy a replica with room`
    );
  }

  /**
   * Evicts an instance; the live sequences routed through it first move to another instance of its block (design
   * note §4.4: their KV goes along, so they keep their tokens). Between steps: the last step is committed, their
   * committed K/V (prefix K/V included) is copied from the instance into the first of moveTargets whose cache takes
   * all of it (all or nothing per target; none: a 409 and nothing changed), their routes are rewritten to that
   * instance, then the instance is evicted. No other instance (or every other one in `leaving`): a 409, nothing
   * changed (`migrate` moves the instance itself with their KV).
   */
  async evictMoving(key: string, leaving: ReadonlySet<string> = new Set()): Promise<{ to: string | null; sequences: number; pages: number }> {
    const info = this.instances.get(key);
    if (!info) throw new BlockllmPlacementNotFoundError(`no instance ${key} is deployed`);
    const targets = this.moveTargets(key, leaving);
    if (targets.length === 0) {
      await this.evict(key);
      return { to: null, sequences: 0, pages: 0 };
    }
    await this.settle();
    const ids = this.sequencesThrough(key);
    const out = await this.client(info.device).call('exportKv', { instance: key, ids });
    const bytes = snapshotBytes(out.sequences); // before the import: the transport may move the buffers
    const refusals: string[] = [];
    let to: InstanceInfo | null = null;
    let pages = 0;
    for (const t of targets) {
      try {
        pages = (await this.client(t.device).call('importKv', { instance: t.instance, sequences: out.sequences })).pages;
        to = t;
        break;
      } catch (err) {
        if (!(err instanceof BlockllmPlacementConflictError)) throw err;
        refusals.push(err.message);
      }
    }
    if (to === null) {
      throw new BlockllmPlacementConflictError(
        `the ${ids.length} running sequence(s) routed through ${key} (${out.sequences.length} with KV there) fit no other instance of its block: ${refusals.join('; ')}; nothing changed: retry when sequences finish, or deploy a replica with room`,
      );
    }
    if (to.device !== info.device) this.counters.crossBytes += bytes;
    const target = to.instance;
    for (const id of ids) {
      const r = this.routes.get(id)!;
      r.keys = r.keys.map((k) => (k === key ? target : k));
    }
    this.routedTotal.set(target, (this.routedTotal.get(target) ?? 0) + ids.length);
    await this.evict(key);
    return { to: target, sequences: ids.length, pages };
  }

  /** The bytes `manifest` would add to `device` (its tensors that no instance of `pool` there holds). */
  marginal(manifest: BlockManifest, device: string, pool = 'shared'): number {
    const held = new Set<string>();
    for (const [key, i] of this.instances) if (i.device === device && i.pool === pool) for (const t of this.manifests.get(key)!.tensors) held.add(t.id);
    return this.bytesBeyond(manifest, held);
  }

  /** The bytes of `manifest`'s tensors that `held` lacks, each tensor once. */
  private bytesBeyond(manifest: BlockManifest, held: ReadonlySet<string>): number {
    let n = 0;
    const seen = new Set<string>();
    for (const t of manifest.tensors) {
      if (held.has(t.id) || seen.has(t.id)) continue;
      seen.add(t.id);
      n += this.zoo.tensor(t.id).bytes;
    }
    return n;
  }

  /** Re-derives the device's instances' bytes in deployment order (after an eviction took tensors others share). */
  private recount(device: string): void {
    const held = new Map<string, Set<string>>();
    for (const [key, i] of this.instances) {
      if (i.device !== device) continue;
      let h = held.get(i.pool);
      if (!h) held.set(i.pool, (h = new Set()));
      let n = 0;
      for (const t of this.manifests.get(key)!.tensors) {
        if (h.has(t.id)) continue;
        h.add(t.id);
        n += this.zoo.tensor(t.id).bytes;
      }
      i.bytes = n;
    }
  }

  /** Free parameter bytes per device by the registry (the policy's view). */
  private free(): Map<string, number> {
    const free = new Map(this.deviceIds.map((d) => [d, this.options.deviceBytes]));
    for (const i of this.instances.values()) free.set(i.device, free.get(i.device)! - i.bytes);
    for (const sur of this.speculation?.surrogates() ?? []) free.set(sur.device, free.get(sur.device)! - this.marginal(sur.manifest, sur.device));
    return free;
  }

  /**
   * Deploys what the applications' chains lack. BlockLLM: each missing block on pickDevice's choice. Per-model
   * provisioning: the application's whole model on one device, evicting idle models (least recently used) for room.
   * Returns per application 'wait' (per-model: no room until a running model finishes) or the error that keeps it
   * from being served.
   */
  async ensure(admitted: readonly string[], busy: ReadonlySet<string>): Promise<Map<string, 'wait' | Error>> {
    const apps = new Set(admitted);
    const out = new Map<string, 'wait' | Error>();
    // Models made resident for this round are as busy as the running ones: a later one must not evict them.
    const held = new Set(busy);
    for (const app of apps) {
      try {
        if (this.provisioning === 'blocks') await this.ensureBlocks(app);
        else if (await this.ensureModel(app, held)) held.add(app);
        else out.set(app, 'wait');
      } catch (err) {
        out.set(app, err as Error);
      }
    }
    await this.scaleOut(admitted.filter((a) => !out.has(a)));
    return out;
  }

  private async ensureBlocks(app: string): Promise<void> {
    for (const { manifest } of this.instanceKeys(app)) {
      if (this.instancesOf(manifest.blockId).length > 0) continue;
      if (!this.seeded.has(app)) {
        // The chain's adjacent blocks are traffic neighbours: the locality policy keeps them on one device.
        this.seeded.add(app);
        const c = this.zoo.chain(app).blocks;
        for (let i = 0; i + 1 < c.length; i++) this.traffic.record(c[i]!.blockId, c[i + 1]!.blockId);
      }
      // The policy's choice among the devices, by what the block would add at the cheapest of them (its tensors
      // may be there already, held by a fused block); where that device cannot take it after all, the device that
      // can with the least added.
      const pick = (): string | null => {
        const free = this.free();
        const adds = new Map(this.deviceIds.map((d) => [d, this.marginal(manifest, d)]));
        const chosen = pickDevice(this.topology, this.placed(), manifest.blockId, Math.min(...adds.values()), this.traffic, { policy: this.policy });
        if (chosen && adds.get(chosen.id)! <= free.get(chosen.id)!) return chosen.id;
        const fits = this.deviceIds.filter((d) => adds.get(d)! <= free.get(d)!).sort((a, b) => adds.get(a)! - adds.get(b)!);
        return fits[0] ?? null;
      };
      let d = pick();
      if (d === null) {
        await this.pruneUnused();
        d = pick();
      }
      if (d === null && (await this.yieldSurrogates())) d = pick();
      if (d === null) {
        const most = Math.max(...this.free().values());
        throw new ServingCapacityError(manifest.paramBytes, most, `block ${formatBlock(manifest)} of ${app} (${manifest.paramBytes} bytes) fits on no device: the most free is ${most} bytes`);
      }
      try {
        await this.deploy(this.keyFor(manifest.blockId, d), manifest, d, 'shared');
      } catch (err) {
        // The device's own budget is the last word; a chain block comes before a surrogate.
        if (!(await this.yieldSurrogates(d))) throw err;
        await this.deploy(this.keyFor(manifest.blockId, d), manifest, d, 'shared');
      }
    }
  }

  /**
   * Evicts the surrogates (of `device`, or every device) to make room for chain blocks: speculation is optional,
   * serving a chain is not. Their instances do not speculate again while they live (unless `refuse` is false: a
   * re-placement, after which the selection starts over). Returns whether any went.
   */
  private async yieldSurrogates(device?: string, refuse = true): Promise<boolean> {
    const spec = this.speculation;
    const going = (spec?.surrogates() ?? []).filter((s) => device === undefined || s.device === device);
    for (const s of going) await this.dropSurrogate(s.target, refuse);
    return going.length > 0;
  }

  /** Evicts the surrogate beside `target`, if any; `refuse`: that instance does not get one again while it lives. */
  private async dropSurrogate(target: string, refuse: boolean): Promise<void> {
    const spec = this.speculation;
    const s = spec?.detach(target);
    if (!s) return;
    if (refuse) spec!.refuse(target);
    await this.client(s.device).call('evict', { instance: s.key });
  }

  private async ensureModel(app: string, busy: ReadonlySet<string>): Promise<boolean> {
    const keys = this.instanceKeys(app);
    if (keys.every((k) => this.instances.has(k.key))) return true;
    const bytes = keys.reduce((n, k) => n + k.manifest.paramBytes, 0);
    if (bytes > this.options.deviceBytes) throw new ServingCapacityError(bytes, this.options.deviceBytes, `the model of ${app} (${bytes} bytes) is larger than a device (${this.options.deviceBytes} bytes)`);
    const modelsOn = (device: string) => [...new Set([...this.instances.values()].filter((i) => i.device === device && i.pool !== app).map((i) => i.pool))];
    let target: string | null = null;
    for (const [device, free] of this.free()) if (free >= bytes) (target ??= device);
    if (target === null) {
      // Evict idle models (least recently used first) on the device where that frees room soonest.
      for (const device of this.deviceIds) {
        const idle = modelsOn(device).filter((m) => !busy.has(m) && this.liveOf(m) === 0).sort((a, b) => (this.lastUsed.get(a) ?? 0) - (this.lastUsed.get(b) ?? 0));
        let free = this.free().get(device)!;
        const victims: string[] = [];
        for (const m of idle) {
          if (free >= bytes) break;
          victims.push(m);
          free += [...this.instances.values()].filter((i) => i.device === device && i.pool === m).reduce((n, i) => n + i.bytes, 0);
        }
        if (free < bytes) continue;
        for (const m of victims) for (const i of [...this.instances.values()]) if (i.device === device && i.pool === m) await this.evict(i.instance);
        target = device;
        break;
      }
    }
    if (target === null) return false;
    for (const k of keys) if (!this.instances.has(k.key)) await this.deploy(k.key, k.manifest, target, app);
    return true;
  }

  /**
   * Speculation's periodic selection (algorithm 5.8): selectSpeculation over the instances, by drain time (the
   * instance's profiled time per token × the sequences routed through it); each chosen instance gets its block's
   * best surrogate deployed beside it on its device (one that does not fit is skipped until the choice changes), and
   * the surrogates of instances no longer chosen are evicted. Between steps.
   */
  async refreshSpeculation(step: number): Promise<void> {
    const spec = this.speculation;
    if (!spec) return;
    const instances = [...this.instances.values()];
    const plan = spec.plan(step, {
      instances,
      drainMs: (key) => {
        const i = this.instances.get(key)!;
        const siblings = this.instancesOf(i.block).map((x) => x.instance).filter((k) => k !== key);
        return this.profiler.perTokenMs(key, siblings, this.manifests.get(key)!.paramBytes) * this.usersOf(key);
      },
      chains: this.zoo.apps().map((a) => this.zoo.chain(a).blocks.map((b) => b.blockId)),
    });
    const wanted = new Set(plan.map((p) => p.instance));
    await this.settle();
    for (const s of spec.surrogates()) {
      if (wanted.has(s.target) && this.instances.get(s.target)?.device === s.device) continue;
      await this.dropSurrogate(s.target, false);
    }
    for (const p of plan) {
      if (spec.surrogateOf(p.instance) || spec.wasRefused(p.instance)) continue;
      try {
        await this.client(p.device).call('deploy', { instance: surrogateKey(p.instance), manifest: p.surrogate, pool: 'shared' });
      } catch (err) {
        // No room on the device (its pool's budget, or the device's): that instance does not speculate.
        if (!(err instanceof BlockllmPlacementConflictError) && (err as { kind?: string }).kind !== 'capacity') throw err;
        spec.refuse(p.instance);
        continue;
      }
      spec.attach(p.instance, p.device, p.surrogate, p.cosine);
      this.counters.loadedBytes += p.surrogate.paramBytes;
    }
  }

  /** Evicts instances no served chain uses any more (after a zoo re-partition) and idle scale-out replicas. */
  async pruneUnused(): Promise<string[]> {
    const used = new Set(this.zoo.apps().flatMap((a) => this.instanceKeys(a).map((k) => k.manifest.blockId)));
    const gone: string[] = [];
    for (const [key, i] of [...this.instances]) {
      const replica = key !== i.block && this.instancesOf(i.block).length > 1;
      if (this.usersOf(key) === 0 && (!used.has(i.block) || replica)) {
        await this.evict(key);
        gone.push(key);
      }
    }
    return gone;
  }

  /**
   * What a placement by `policy` would do: placeChains over the served chains, and the instances it removes (each
   * one not on its block's planned device, and every replica).
   */
  placePlan(apps: readonly string[], policy: PlacementPolicy = this.policy): { plan: { block: string; device: string }[]; manifests: Map<string, BlockManifest>; removals: InstanceInfo[] } {
    if (this.provisioning !== 'blocks') throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', 'per-model provisioning places whole models on demand; a block placement applies to BlockLLM provisioning');
    const chains = apps.map((a) => this.zoo.chain(a).blocks);
    const manifests = new Map(chains.flat().map((m) => [m.blockId, m]));
    const traffic = TrafficCounter.fromChains(chains.map((c) => ({ blocks: c.map((m) => m.blockId) })));
    // The policy orders blocks by their bytes with shared tensors charged once, to the first block (in chain order)
    // that holds them: a fused LoRA block costs its LoRA, its base weights being the foundation block's.
    const seen = new Set<string>();
    const sizes = new Map<string, number>();
    for (const m of chains.flat()) {
      if (sizes.has(m.blockId)) continue;
      let n = 0;
      for (const t of m.tensors) if (!seen.has(t.id)) (seen.add(t.id), (n += this.zoo.tensor(t.id).bytes));
      sizes.set(m.blockId, n);
    }
    // Where a block goes, it adds only the tensors the blocks placed there before it lack (a device holds each
    // tensor once), so the plan's bytes per device are the bytes the devices will hold and a plan that fits deploys.
    const bytesOn = (block: string, device: string, placed: readonly PlacedInstance[]): number =>
      this.bytesBeyond(manifests.get(block)!, new Set(placed.filter((p) => p.device === device).flatMap((p) => manifests.get(p.block)!.tensors.map((t) => t.id))));
    const blockChains = chains.map((c) => c.map((m) => m.blockId));
    let plan: PlacedInstance[];
    try {
      plan = placeChains(this.topology, blockChains, sizes, traffic, { policy, bytesOn });
    } catch (err) {
      // The locality order is greedy: it can paint itself into a corner (a chain's last block fitting nowhere next
      // to copies of tensors it shares) where best fit, largest block first, packs the same blocks. Locality is a
      // preference; fitting is not, so a failed locality plan falls back to best fit.
      if (!(err instanceof ServingCapacityError) || policy !== 'locality') throw err;
      plan = placeChains(this.topology, blockChains, sizes, traffic, { policy: 'frag-min', bytesOn });
    }
    const want = new Map(plan.map((p) => [p.block, p.device]));
    const removals = [...this.instances.values()].filter((i) => want.get(i.block) !== i.device || i.instance !== i.block);
    return { plan, manifests, removals };
  }

  /**
   * placePlan, checked: the instances it removes (`leaving`) and a 409 when a removed instance holding live
   * sequences' KV has no kept instance of its block for them to move to (moveTargets).
   */
  placeMoves(apps: readonly string[], policy: PlacementPolicy = this.policy): ReturnType<DeviceSet['placePlan']> & { leaving: Set<string> } {
    const planned = this.placePlan(apps, policy);
    const leaving = new Set(planned.removals.map((i) => i.instance));
    for (const i of planned.removals) this.moveTargets(i.instance, leaving);
    return { ...planned, leaving };
  }

  /**
   * The initial placement (and the 'place' job): placeMoves, then the moves that turn the current registry into it
   * (evictions first, so the new instances have room). The live sequences of a removed instance move to an instance
   * of its block the placement keeps (evictMoving); when one has none, the job is refused (409) before anything
   * changes.
   */
  async place(apps: readonly string[], policy: PlacementPolicy = this.policy): Promise<{ deployed: string[]; evicted: string[]; movedSequences: number; kvPages: number }> {
    // The plan is of chain blocks; surrogates give their room back and the selection deploys them again.
    await this.yieldSurrogates(undefined, false);
    const { plan, manifests, removals, leaving } = this.placeMoves(apps, policy);
    const evicted: string[] = [];
    const deployed: string[] = [];
    let movedSequences = 0;
    let kvPages = 0;
    for (const i of removals) {
      const moved = await this.evictMoving(i.instance, leaving);
      movedSequences += moved.sequences;
      kvPages += moved.pages;
      evicted.push(i.instance);
    }
    for (const p of plan) {
      if (this.instancesOf(p.block).some((i) => i.device === p.device)) continue;
      const m = manifests.get(p.block)!;
      const free = this.free();
      const device = [p.device, ...this.deviceIds.filter((d) => d !== p.device)].find((d) => this.marginal(m, d) <= free.get(d)!);
      if (device === undefined) {
        const most = Math.max(...free.values());
        throw new ServingCapacityError(m.paramBytes, most, `block ${formatBlock(m)} (${this.marginal(m, p.device)} bytes more) fits on no device: the most free is ${most} bytes`);
      }
      await this.deploy(this.keyFor(p.block, device), m, device, 'shared');
      deployed.push(p.block);
    }
    this.policy = policy;
    return { deployed, evicted, movedSequences, kvPages };
  }

  async deviceStats(): Promise<DeviceStats[]> {
    return Promise.all([...this.clients.values()].map((c) => c.call('stats', null)));
  }

  async view(apps: readonly string[]): Promise<PlacementView> {
    const stats = await this.deviceStats();
    return {
      provisioning: this.provisioning,
      policy: this.policy,
      devices: stats.map((s) => ({
        id: s.device,
        budgetBytes: s.budgetBytes,
        residentBytes: s.residentBytes,
        utilisation: s.upMs > 0 ? s.busyMs / s.upMs : 0,
        instances: s.instances.map((i) => i.instance),
      })),
      instances: [...this.instances.values()].map((i) => ({ ...i, routed: this.routedTotal.get(i.instance) ?? 0 })),
      chains: apps.map((app) => {
        // The chain's first instances (a scale-out replica serves some of its sequences too).
        const keys = this.instanceKeys(app).map((k) => (this.provisioning === 'blocks' ? (this.instancesOf(k.manifest.blockId)[0]?.instance ?? k.key) : k.key));
        return { app, instances: keys, devices: keys.map((k) => this.instances.get(k)?.device ?? ''), equivalents: this.equivalentsOf(app) };
      }),
      adaptive: this.provisioning === 'blocks' && (this.options.adaptive ?? true),
      speculation: this.speculation && {
        ...this.speculation.stats(),
        acceptCosine: this.speculation.ledger.acceptCosine,
        fraction: this.speculation.fraction,
        surrogates: this.speculation.surrogates().map((s) => ({ instance: s.target, surrogate: s.key, device: s.device, label: formatBlock(s.manifest), cosine: s.cosine, tracked: s.tracked.size })),
      },
    };
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.clients.values()].map((c) => c.close()));
  }
}

/** Step numbers, unique in the process (a rebuilt executor continues them, so a device never sees one twice). */
let stepCounter = 0;

interface Walker {
  index: number;
  seq: ChainSequence;
  chain: { key: string; manifest: BlockManifest; device: string }[];
  cursor: number;
  /** Device holding the sequence's hidden rows now (null before its first block). */
  at: string | null;
  /** A sent program whose exports hold the rows for the next hop (a prediction, or a repair's real output). */
  source: Promise<ProgramResult> | null;
  /** Set at a speculated block: the prediction's rows, the next hop's source. */
  next?: Promise<ProgramResult> | null;
  /** Chain positions speculated on in this step. */
  specAt: number[];
}

/** A speculation opened in a step: its sequence, its ledger tag, and the programs of the prediction and of the real output. */
interface OpenSpeculation {
  w: Walker;
  tag: string;
  position: number;
  device: string;
  predicted: Promise<ProgramResult>;
  real: Promise<ProgramResult> | null;
}

interface Pending {
  program: DeviceProgram;
  /** Sent programs whose exports this one imports (awaited before sending). */
  from: Promise<ProgramResult>[];
  importIds: Set<string>;
}

/** What a block run reports to the step loop's counters. */
export interface DeviceBlockRun {
  rows: number;
  apps: number;
  copiedRows: number;
}

/**
 * The step loop's executor over a DeviceSet: the ChainExecutor's surface (load, step, release, dispose), with an
 * asynchronous step and `prepare` (deployment before admission).
 */
export class DeviceChainExecutor {
  constructor(
    readonly set: DeviceSet,
    private readonly onBlockRun?: (run: DeviceBlockRun) => void,
  ) {}

  load(app: string): void {
    this.set.zoo.chain(app);
  }

  async prepare(admitted: readonly string[], busy: ReadonlySet<string>): Promise<Map<string, 'wait' | Error>> {
    // Nothing to deploy (the common case): no need to stop the steps in flight.
    if (!this.set.needsDeployment(admitted)) return new Map();
    return this.set.gate.alone(() => this.set.ensure(admitted, busy));
  }

  release(id: string): void {
    if (!this.set.routes.delete(id)) return;
    this.set.release(id);
  }

  dispose(): void {
    for (const id of [...this.set.routes.keys()]) this.release(id);
  }

  async step(sequences: readonly ChainSequence[], cohort?: CohortRef): Promise<Float32Array[]> {
    const spec = this.set.speculation;
    const step = ++stepCounter;
    if (spec?.due(step)) await this.set.gate.alone(() => this.set.refreshSpeculation(step));
    const ids = sequences.map((s) => String(s.id));
    for (const id of ids) this.set.inflight.add(id);
    try {
      return await this.set.gate.step(() => this.runStep(step, sequences, this.set.homeOf(cohort)));
    } finally {
      this.set.landed(ids);
    }
  }

  private async runStep(step: number, sequences: readonly ChainSequence[], home: string | undefined): Promise<Float32Array[]> {
    const set = this.set;
    const spec = set.speculation;
    if (set.gate.steps > 1) set.counters.overlappedSteps++;
    const t0 = performance.now();
    // Sequences starting in this step (no route yet): a surrogate with its own K/V may track them from here.
    const first = new Set(sequences.map((s) => String(s.id)).filter((id) => !set.routes.has(id)));
    const walkers: Walker[] = sequences.map((seq, index) => {
      if (seq.tokens.length === 0) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `sequence ${String(seq.id)} has no new tokens`);
      return { index, seq, chain: set.route(String(seq.id), seq.app, seq.tokens.length, home), cursor: 0, at: null, source: null, specAt: [] };
    });
    const appOrder = [...new Set(sequences.map((s) => s.app))];

    const pending = new Map<string, Pending>();
    const sent: { device: string; result: Promise<ProgramResult> }[] = [];
    const touched = new Set<string>();
    const pendingOf = (device: string): Pending => {
      let p = pending.get(device);
      if (!p) {
        touched.add(device);
        p = { program: { step, release: [], imports: null, groups: [], exports: [] }, from: [], importIds: new Set() };
        pending.set(device, p);
      }
      return p;
    };
    // Programs to one device are posted in the order they were made (a later one may hand on rows an earlier one
    // left there), each after the programs whose rows it imports have answered.
    const posted = new Map<string, Promise<void>>();
    const send = (device: string): Promise<ProgramResult> => {
      const p = pendingOf(device);
      pending.delete(device);
      const previous = posted.get(device) ?? Promise.resolve();
      let markPosted!: () => void;
      posted.set(device, new Promise<void>((resolve) => (markPosted = resolve)));
      const result = (async () => {
        try {
          await previous;
          const sources = await Promise.all(p.from);
          // The releases so far go with it (taken when it is posted, not made: a program made earlier may be posted
          // after another cohort's, and a page must be free before any program that needs it runs).
          p.program.release = set.takeReleases(device);
          const blocks = sources.map((r) => r.exports).filter((b): b is RowBlock => b !== null && b.ids.some((id) => p.importIds.has(id)));
          if (blocks.length > 0) p.program.imports = concatRows(blocks, p.importIds);
          const transfer: ArrayBuffer[] = [];
          if (p.program.imports) {
            set.counters.crossBytes += p.program.imports.data.byteLength;
            set.counters.crossRows += p.program.imports.rows.reduce((a, b) => a + b, 0);
            transfer.push(p.program.imports.data.buffer as ArrayBuffer);
          }
          return set.clients.get(device)!.call('run', p.program, transfer);
        } finally {
          markPosted();
        }
      })();
      sent.push({ device, result });
      return result;
    };

    const speculations: OpenSpeculation[] = [];

    /**
     * Walks `list` from each walker's cursor to the end of its chain in lockstep, appending groups to their device's
     * program. With `speculate`, a group at an instance with a surrogate first runs the surrogate (its program sent
     * at once, so the prediction leaves before the real block runs) and the real block's program is sent right
     * after it: the successors on other devices run on the prediction while the block runs.
     */
    const walk = (list: Walker[], speculate: boolean): void => {
      const order = [...list].sort((a, b) => appOrder.indexOf(a.seq.app) - appOrder.indexOf(b.seq.app) || a.index - b.index);
      for (;;) {
        const active = order.filter((w) => w.cursor < w.chain.length);
        if (active.length === 0) break;
        const start = Math.min(...active.map((w) => w.chain[w.cursor]!.manifest.span!.start));
        const groups = new Map<string, Walker[]>();
        for (const w of active) {
          const hop = w.chain[w.cursor]!;
          if (hop.manifest.span!.start !== start) continue;
          groups.set(hop.key, [...(groups.get(hop.key) ?? []), w]);
        }
        // By device, then by base block: a device's variants of one base block go into its program one after the
        // other, so the device runs them as one batch (variant batching); the sort is stable otherwise.
        const ordered = [...groups].sort(([a, ga], [b, gb]) => {
          const da = ga[0]!.chain[ga[0]!.cursor]!.device;
          const db = gb[0]!.chain[gb[0]!.cursor]!.device;
          if (da !== db) return da < db ? -1 : 1;
          const va = set.variantKey(a);
          const vb = set.variantKey(b);
          return va === vb ? 0 : va < vb ? -1 : 1;
        });
        for (const [key, group] of ordered) {
          const device = group[0]!.chain[group[0]!.cursor]!.device;
          // Rows living on another device: that device's program hands them on (sent now if still pending); rows a
          // sent program already hands on (a prediction, or a repair's real output) are imported from it.
          const bySource = new Map<string, Walker[]>();
          for (const w of group) {
            if (w.source !== null) {
              const dst = pendingOf(device);
              if (!dst.from.includes(w.source)) dst.from.push(w.source);
              dst.importIds.add(String(w.seq.id));
              w.source = null;
              if (speculate) set.traffic.record(w.chain[w.cursor - 1]!.manifest.blockId, w.chain[w.cursor]!.manifest.blockId);
            } else if (w.at !== null && w.at !== device) bySource.set(w.at, [...(bySource.get(w.at) ?? []), w]);
          }
          for (const [source, ws] of bySource) {
            const src = pendingOf(source);
            src.program.exports.push(...ws.map((w) => String(w.seq.id)));
            const result = send(source);
            const dst = pendingOf(device);
            dst.from.push(result);
            for (const w of ws) dst.importIds.add(String(w.seq.id));
            for (const w of ws) set.traffic.record(w.chain[w.cursor - 1]!.manifest.blockId, w.chain[w.cursor]!.manifest.blockId);
          }
          const seqsOf = (ws: readonly Walker[]) => ws.map((w) => ({ id: String(w.seq.id), app: w.seq.app, tokens: Array.from(w.seq.tokens) }));
          const surrogate = speculate ? spec?.surrogateOf(key) : undefined;
          let predicted: Walker[] = [];
          let prediction: Promise<ProgramResult> | null = null;
          if (spec && surrogate) {
            const runs = new Set(spec.runsOn(surrogate, group.map((w) => String(w.seq.id)), first));
            const riders = group.filter((w) => runs.has(String(w.seq.id)));
            // Worth it only where the successor runs elsewhere (a device runs one program at a time); never the
            // last block, never right after a block speculated on in this iteration (rule 1).
            predicted = riders.filter((w) => w.cursor + 1 < w.chain.length && w.chain[w.cursor + 1]!.device !== device && !w.specAt.includes(w.cursor - 1));
            if (riders.length > 0) {
              const p = pendingOf(device);
              p.program.groups.push({ instance: surrogate.key, seqs: seqsOf(riders), predict: true });
              if (predicted.length > 0) {
                p.program.exports.push(...predicted.map((w) => predictionId(String(w.seq.id))));
                const sentPrediction = send(device);
                prediction = sentPrediction;
                const renamed = sentPrediction.then((r) => ({ ...r, exports: r.exports && { ...r.exports, ids: r.exports.ids.map(predictedSequence) } }));
                for (const w of predicted) {
                  const tag = spec.ledger.open(String(w.seq.id), step, w.cursor, w.chain.length);
                  speculations.push({ w, tag, position: w.cursor, device, predicted: sentPrediction, real: null });
                  w.specAt.push(w.cursor);
                  w.next = renamed;
                }
              }
            }
          }
          pendingOf(device).program.groups.push({ instance: key, seqs: seqsOf(group) });
          if (prediction !== null) {
            // The real output goes back for verification; sent now, so the block runs while its successors do.
            const p = pendingOf(device);
            p.program.exports.push(...predicted.map((w) => String(w.seq.id)));
            const real = send(device);
            for (const s of speculations) if (s.predicted === prediction) s.real = real;
          }
          for (const w of group) {
            // A step after an open speculation of its iteration is tentative (the ledger's record).
            if (spec && speculate && w.specAt.some((p) => p < w.cursor)) {
              const m = w.chain[w.cursor]!.manifest;
              spec.ledger.record({ request: String(w.seq.id), iteration: step, position: w.cursor, instance: key, block: m.blockId, kvTokens: attentionLayersOf(m.stages ?? []) ? w.seq.tokens.length : 0 });
            }
            w.at = device;
            w.cursor++;
            if (w.next) {
              w.source = w.next;
              w.next = null;
            }
          }
        }
      }
      for (const device of [...pending.keys()]) send(device);
    };

    let failure: unknown = null;
    const results = new Array<Float32Array>(sequences.length);
    let computeOnPath = 0;
    const absorb = async (from: number): Promise<void> => {
      const outcomes = await Promise.allSettled(sent.slice(from).map((s) => s.result));
      const bad = outcomes.find((o) => o.status === 'rejected');
      if (bad) throw (bad as PromiseRejectedResult).reason;
      for (const o of outcomes) {
        const r = (o as PromiseFulfilledResult<ProgramResult>).value;
        computeOnPath += r.computeMs;
        for (const run of r.runs) {
          set.profiler.record(run.instance, run.rows, run.ms);
          this.onBlockRun?.({ rows: run.rows, apps: run.apps, copiedRows: 0 });
        }
        if (r.copiedRows > 0) this.onBlockRun?.({ rows: 0, apps: 0, copiedRows: r.copiedRows });
        set.counters.variantBatches += r.variantBatches;
        for (const l of r.logits) {
          const w = walkers.find((x) => String(x.seq.id) === l.id)!;
          results[w.index] = l.data;
        }
      }
    };
    try {
      walk(walkers, spec !== null);
      await absorb(0);
      if (spec && speculations.length > 0) {
        const repairs = await this.verify(spec, step, speculations);
        if (repairs.length > 0) {
          const from = sent.length;
          walk(repairs, false);
          await absorb(from);
        }
      }
      set.counters.programs += sent.length;
      const wall = performance.now() - t0;
      set.counters.stepMs += wall;
      // Devices that ran at the same time count once: the overhead is the wall time no device program covers.
      set.counters.overheadMs += Math.max(0, wall - Math.min(computeOnPath, wall));
    } catch (err) {
      failure = err;
    }
    if (failure !== null) {
      // Every device that ran part of the step gives its pages back now; the releases its programs carried were
      // applied (a release is idempotent), the ones of devices whose program never went out are sent too.
      // Open speculations of the failed step are aborted (nothing of it is kept).
      if (spec) {
        for (const s of speculations) if (spec.ledger.openTags(String(s.w.seq.id), step).includes(s.tag)) spec.ledger.verify(s.tag, -Infinity);
        for (const s of speculations) spec.ledger.retire(String(s.w.seq.id), step);
      }
      await Promise.allSettled([...touched].map((device) => set.endStep(device, step, false)));
      throw failure;
    }
    if (spec) {
      const st = spec.stats();
      Object.assign(set.counters, { speculations: st.speculations, specAccepted: st.accepted, specRolledBack: st.rolledBack, specDroppedSteps: st.droppedSteps, specRepairedRows: st.repairedRows });
    }
    // Committed on every device it touched, before any later program of its sequences reaches them.
    for (const device of touched) void set.endStep(device, step, true).catch(() => undefined);
    set.counters.steps++;
    return results;
  }

  /**
   * Verifies the step's speculations in chain order (the ledger's verify at its cosine threshold: the prediction's
   * rows against the real output's, averaged over the sequence's new tokens, A18) and returns the walkers to re-run
   * from the speculated block's successor on its real output: the rejected ones. A rejection aborts the later tags
   * of the same sequence (their tentative steps are re-run with it). The K/V the tentative steps appended is not
   * committed yet, so the repair writes over it at the same positions.
   */
  private async verify(spec: SpeculationControl, step: number, speculations: readonly OpenSpeculation[]): Promise<Walker[]> {
    const repairs = new Map<string, Walker>();
    // One source per real output: the next hop's program imports each sent program's rows once.
    const sources = new Map<Promise<ProgramResult>, Promise<ProgramResult>>();
    for (const s of [...speculations].sort((a, b) => a.position - b.position)) {
      const id = String(s.w.seq.id);
      if (!spec.ledger.openTags(id, step).includes(s.tag)) continue;
      const predictedRows = rowsIn((await s.predicted).exports, predictionId(id));
      const real = await s.real!;
      const v = spec.ledger.verify(s.tag, meanRowCosine(rowsIn(real.exports, id), predictedRows, real.exports!.width));
      if (v.accepted) continue;
      spec.repairedRows += s.w.seq.tokens.length;
      if (!sources.has(s.real!)) sources.set(s.real!, Promise.resolve(real));
      repairs.set(id, { ...s.w, cursor: v.resumeAt, at: s.device, source: sources.get(s.real!)!, specAt: [], next: null });
    }
    for (const s of speculations) spec.ledger.retire(String(s.w.seq.id), step);
    return [...repairs.values()];
  }
}

/** The rows of sequence `id` in an exported RowBlock. */
function rowsIn(block: RowBlock | null, id: string): Float32Array {
  if (block === null) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `no rows were handed on for ${id}`);
  let at = 0;
  for (let k = 0; k < block.ids.length; k++) {
    const n = block.rows[k]! * block.width;
    if (block.ids[k] === id) return block.data.subarray(at, at + n);
    at += n;
  }
  throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `the rows handed on lack ${id}`);
}

/** The rows of `ids` (in the blocks' order) as one RowBlock; each block is imported from once, so a sequence's rows appear once. */
function concatRows(blocks: RowBlock[], ids: ReadonlySet<string>): RowBlock {
  const width = blocks[0]!.width;
  const out: RowBlock = { ids: [], rows: [], width, data: new Float32Array(0) };
  const parts: Float32Array[] = [];
  for (const b of blocks) {
    let at = 0;
    b.ids.forEach((id, k) => {
      const n = b.rows[k]! * width;
      if (ids.has(id)) {
        out.ids.push(id);
        out.rows.push(b.rows[k]!);
        parts.push(b.data.subarray(at, at + n));
      }
      at += n;
    });
  }
  out.data = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) out.data.set(p, at), (at += p.length);
  return out;
}

/** The K/V bytes of exported sequences (what a KV move carries between devices). */
function snapshotBytes(sequences: readonly { snapshot: { layers: readonly { k: ArrayBufferView; v: ArrayBufferView }[] } }[]): number {
  return sequences.reduce((n, s) => n + s.snapshot.layers.reduce((m, l) => m + l.k.byteLength + l.v.byteLength, 0), 0);
}

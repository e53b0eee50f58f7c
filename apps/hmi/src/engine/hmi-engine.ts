/**
 * The HMI engine: the shared model, the PLOT service, the tenant store, the manager and its job queue, and the
 * serving path — the dispatcher (A11, pure policy) feeding the pipelined runner (A12). It runs in the server's own
 * thread: lookups and kernels are native calls, training steps and pipeline stages are one event-loop turn each.
 *
 *   classify(tenant, inputs) → one request per input → Dispatcher.add(tenant's PLOT version)
 *     → schedule(): while the runner has a free slot, take the oldest batch → runner.run(batch) → each request's
 *       logits → the tenant's labels and probabilities
 */
import { rmSync } from 'node:fs';

import { type EncoderModel, loadEncoder, TextTokenizer } from '@tessera/engine';

import { type DispatchBatch, Dispatcher } from '../policy/dispatcher.js';
import { UnknownTenantError } from '../errors.js';
import type { JobQueue } from '../jobs/queue.js';
import { Manager, type ManagerSettings } from '../manager/manager.js';
import { type LoadedTenant, TenantStore } from '../manager/tenant-store.js';
import { PlotService, type PlotSnapshot } from './plot.js';
import { HmiRunner } from './runner.js';
import type { PipelineMode } from '@tessera/adapter-swap';

export interface HmiEngineOptions extends Omit<ManagerSettings, 'modelDir'> {
  modelDir: string;
  /** Layers materialised as PLOT; the rest run with adapters. */
  lowerLayers: number;
  /** General corpus of the root table (texts). */
  generalCorpus: readonly string[];
  maxBatch: number;
  /** In-flight batches (host staging slots K). */
  slots: number;
  /** Tenants kept on the device between batches (the runner's device LRU; 0: none). */
  deviceCache?: number | undefined;
  pipeline: PipelineMode | 'sequential';
  queue: JobQueue;
  /** The directory of tenant files (`<id>.tsadapt`): tenants persisted there by an earlier run come back. */
  tenantsDir: string;
  /** Host LRU budget of the tenants' arrays, in bytes (default unlimited). */
  hostBudgetBytes?: number | undefined;
  /** fsync tenant files (default true; off for a scratch directory). */
  durableTenants?: boolean | undefined;
  /** Remove the tenants directory at close (a scratch directory the server made). */
  removeTenantsDir?: boolean | undefined;
}

export interface ClassifyResult {
  label: string;
  labelIndex: number;
  logits: number[];
  probabilities: number[];
}

interface Pending {
  ids: readonly number[];
  tenantId: string;
  /** The tenant's revision when the request was queued: its version is the batch's. */
  revision: number;
  /** Its version's snapshot, held from arrival (an update may retire the version meanwhile). */
  snapshot: PlotSnapshot;
  resolve: (logits: Float32Array) => void;
  reject: (err: unknown) => void;
}

export function softmax(logits: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!);
  const e = Array.from(logits, (x) => Math.exp(x - max));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

export class HmiEngine {
  readonly model: EncoderModel;
  readonly tokenizer: TextTokenizer;
  readonly plot: PlotService;
  readonly tenants: TenantStore;
  readonly manager: Manager;
  readonly runner: HmiRunner;
  readonly dispatcher: Dispatcher<Pending>;
  readonly queue: JobQueue;
  readonly options: HmiEngineOptions;
  /** Classify requests answered and failed (for /metrics). */
  readonly counts = { requests: 0, failed: 0 };
  failure: Error | null = null;
  private closed = false;

  private constructor(options: HmiEngineOptions, model: EncoderModel, tokenizer: TextTokenizer, plot: PlotService) {
    this.options = options;
    this.model = model;
    this.tokenizer = tokenizer;
    this.plot = plot;
    this.queue = options.queue;
    const c = model.config;
    this.tenants = new TenantStore(
      { hidden: c.hiddenSize, bottleneck: options.bottleneck, layers: c.numLayers - options.lowerLayers },
      { dir: options.tenantsDir, hostBudgetBytes: options.hostBudgetBytes, durable: options.durableTenants },
    );
    this.manager = new Manager(model, tokenizer, plot, this.tenants, options.queue, { ...options }, (id) => this.dropTenant(id));
    const mode = options.pipeline === 'sequential' ? 'synchronized' : options.pipeline;
    this.runner = new HmiRunner({
      model, plot, bottleneck: options.bottleneck, maxBatch: options.maxBatch, slots: options.pipeline === 'sequential' ? 1 : options.slots, mode,
      // The sequential path is the oracle: it copies every batch's adapters, so no device cache there.
      deviceCache: options.pipeline === 'sequential' ? 0 : options.deviceCache,
      // §1.8's hierarchical prefetch: while a batch retrieves, the next batch's tenants come from disk to host.
      onRetrieve: () => this.prefetchNext(),
    });
    this.dispatcher = new Dispatcher<Pending>({ maxBatch: options.maxBatch });
  }

  /** Loads the model, builds the root PLOT and starts the job worker. */
  static async start(options: HmiEngineOptions): Promise<HmiEngine> {
    const model = loadEncoder(options.modelDir);
    const c = model.config;
    if (!(Number.isInteger(options.lowerLayers) && options.lowerLayers >= 1 && options.lowerLayers < c.numLayers)) {
      model.weights.dispose();
      throw new RangeError(`lowerLayers must be an integer in [1, ${c.numLayers - 1}] for a ${c.numLayers}-layer model, got ${options.lowerLayers}`);
    }
    const tokenizer = TextTokenizer.fromDir(options.modelDir);
    const plot = new PlotService({ model, lowerLayers: options.lowerLayers, generalCorpus: options.generalCorpus.map((t) => tokenizer.encode(t)), minCorpusTokens: options.minCorpusTokens });
    const engine = new HmiEngine(options, model, tokenizer, plot);
    // Tenants persisted on the root by an earlier run (domains' tenants come back when their version is rebuilt).
    engine.manager.adoptDormant();
    await options.queue.start(engine.manager.process);
    return engine;
  }

  get healthy(): boolean {
    return !this.closed && this.failure === null;
  }

  /** Requests waiting in the dispatcher plus those in batches on the runner. */
  get inFlight(): number {
    return this.dispatcher.depth + this.running;
  }

  private running = 0;

  /** Classifies token-id inputs with a tenant's model; resolves in input order. */
  async classify(tenantId: string, inputs: readonly (readonly number[])[]): Promise<ClassifyResult[]> {
    const tenant = this.tenants.record(tenantId);
    if (!tenant) throw new UnknownTenantError(tenantId);
    const results = inputs.map(
      (ids) =>
        new Promise<Float32Array>((resolve, reject) => {
          const snapshot = this.plot.snapshot(tenant.version);
          const done = <T>(f: (x: T) => void) => (x: T) => {
            pending.snapshot.release();
            f(x);
          };
          const pending: Pending = { ids, tenantId, revision: tenant.revision, snapshot, resolve: done(resolve), reject: done(reject) };
          this.dispatcher.add(tenant.version, pending);
        }),
    );
    this.schedule();
    const logits = await Promise.all(results);
    return logits.map((l) => {
      let best = 0;
      for (let c = 1; c < l.length; c++) if (l[c]! > l[best]!) best = c;
      return { label: tenant.labels[best]!, labelIndex: best, logits: Array.from(l), probabilities: softmax(l) };
    });
  }

  /** Batches taken and resolving their tenants' arrays (they hold a runner slot). */
  private resolving = 0;

  /** A11's "take a batch whenever the pipeline has a free slot". */
  private schedule(): void {
    while (!this.closed && this.dispatcher.depth > 0 && this.runner.inFlight + this.resolving < this.runner.slots) {
      const batch = this.dispatcher.take()!;
      void this.launch(batch);
    }
  }

  /** The oldest waiting batch's tenants, disk → host, while the batch before it runs (§1.8). */
  private prefetchNext(): void {
    const next = this.dispatcher.peek();
    if (next) void this.tenants.prefetch(next.requests.map((r) => r.tenantId));
  }

  /**
   * Resolves the batch's tenants to their arrays (host hits, or disk reads: before the batch enters the pipeline,
   * so no stage waits on the disk), then runs it. A request whose tenant was updated since it was queued goes back
   * to the dispatcher under the tenant's new version; one whose tenant was deleted fails with 404.
   */
  private async launch(batch: DispatchBatch<Pending>): Promise<void> {
    this.resolving++;
    this.running += batch.requests.length;
    let settled: PromiseSettledResult<LoadedTenant>[];
    try {
      settled = await Promise.allSettled(batch.requests.map((r) => this.tenants.load(r.tenantId)));
    } finally {
      this.resolving--;
    }
    // From here to runner.run nothing awaits: the records checked are the ones the batch runs with.
    const kept: Pending[] = [];
    const tenants: LoadedTenant[] = [];
    batch.requests.forEach((r, i) => {
      const s = settled[i]!;
      const current = this.tenants.record(r.tenantId);
      if (s.status === 'rejected' || !current) {
        this.running--;
        r.reject(s.status === 'rejected' ? s.reason : new UnknownTenantError(r.tenantId));
      } else if (s.value.revision !== current.revision || current.version !== batch.version) {
        // Updated meanwhile: its arrays belong to another revision (or version) than the batch's.
        this.running--;
        r.snapshot.release();
        r.snapshot = this.plot.snapshot(current.version);
        r.revision = current.revision;
        this.dispatcher.add(current.version, r);
      } else {
        kept.push(r);
        tenants.push(s.value);
      }
    });
    if (kept.length === 0 || this.closed) {
      for (const r of kept) r.reject(new Error('the server is shutting down'));
      this.running -= kept.length;
      this.schedule();
      return;
    }
    const run = { snapshot: kept[0]!.snapshot, requests: kept.map((r, i) => ({ ids: r.ids, tenant: tenants[i]! })) };
    const done = this.options.pipeline === 'sequential' ? Promise.resolve().then(() => this.runner.runSequential(run)) : this.runner.run(run);
    done
      .then(
        (logits) => {
          this.counts.requests += kept.length;
          kept.forEach((r, i) => r.resolve(logits[i]!));
        },
        (err: unknown) => {
          this.counts.failed += kept.length;
          for (const r of kept) r.reject(err);
        },
      )
      .finally(() => {
        this.running -= kept.length;
        this.schedule();
      });    // Requests sent back to the dispatcher may fit a free slot now.
    this.schedule();
  }

  /** A deleted tenant's queued requests fail with 404 (batches already running finish with the state they hold). */
  private dropTenant(id: string): void {
    for (const r of this.dispatcher.remove((p) => p.tenantId === id)) r.reject(new UnknownTenantError(id));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.queue.close();
    this.closed = true;
    for (const r of this.dispatcher.remove(() => true)) r.reject(new Error('the server is shutting down'));
    // Let running batches finish before their buffers go.
    for (let i = 0; i < 200 && this.running > 0; i++) await new Promise((r) => setTimeout(r, 10));
    this.runner.close();
    this.plot.close();
    this.model.weights.dispose();
    if (this.options.removeTenantsDir) rmSync(this.tenants.files.dir, { recursive: true, force: true });
  }
}

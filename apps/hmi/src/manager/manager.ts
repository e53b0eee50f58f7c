/**
 * The manager (hmi.md §1.11, A6–A8): operations a–e as jobs.
 *
 *   a  create domain   further-pretrain the lower layers on the corpus (MLM), select its tri-grams by α-coverage,
 *                      compute their window-mode values with the new lower layers → a new branch of the PLOT tree
 *   b  update domain   continue that FPT on more corpus, recount over the cumulative corpus → a new version beside
 *                      the old one (copy-on-write); tenants stay on the version they were trained on until retrained
 *   c  create tenant   fine-tune adapters + head on the labelled data, on the domain's current version (pinned)
 *   d  update tenant   continue fine-tuning from its state, moving it to its domain's current version
 *   e  delete          a tenant (unpins its version), or a domain without tenants (409 otherwise)
 *
 * Each `submit*` checks its input and the registry at once (so a bad request is a 4xx, not a failed job), reserves
 * its target so no second operation on it can be queued, and enqueues. The processor does the work and then
 * commits it in one synchronous step after its last cancellation check, so a cancelled job leaves nothing behind.
 */
import type { EncoderModel, TextTokenizer } from '@tessera/engine';
import { ROOT_VERSION, selectByCoverage, TrigramCounts } from '@tessera/plot-store';

import { fineTuneTenant, furtherPretrain, type TrainSettings } from '../engine/training.js';
import { plotFingerprint, type PlotService } from '../engine/plot.js';
import { HmiConflictError, HmiInputError, UnknownDomainError, UnknownTenantError } from '../errors.js';
import type { JobContext, JobQueue, JobSpec, JobView } from '../jobs/queue.js';
import { expectedTenantBytes, type LoadedTenant, type TenantRecord, type TenantState, type TenantStore } from './tenant-store.js';

export const ROOT_DOMAIN = 'root';
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export interface DomainRecord {
  name: string;
  /** The live PLOT version. */
  version: string;
  /** The FPT'd lower layers (null for the root: the shared model's). */
  lower: Map<string, Float32Array> | null;
  /** Cumulative tri-gram counts of the domain corpus (A7 recounts over old + new). */
  counts: TrigramCounts;
  alpha: number;
  corpusTexts: number;
  fptSteps: number;
  lastLoss: number | null;
  createdAt: string;
  updatedAt: string;
}

export interface ManagerSettings {
  modelDir: string;
  /** Trainer settings of domain FPT and tenant FT. */
  fpt: TrainSettings;
  ft: TrainSettings;
  bottleneck: number;
  /** Default α of a new domain. */
  alpha: number;
  minCorpusTokens: number;
}

export interface CreateDomainInput { name: string; corpus: string[]; alpha?: number | undefined; steps?: number | undefined }
export interface UpdateDomainInput { corpus: string[]; steps?: number | undefined }
export interface Example { text: string; label: string }
export interface CreateTenantInput { id?: string | undefined; domain: string; labels: string[]; examples: Example[]; steps?: number | undefined }
export interface UpdateTenantInput { examples: Example[]; steps?: number | undefined }

interface DomainJobData { name: string; corpus: number[][]; alpha: number; steps: number }
interface TenantJobData { id: string; domain: string; labels: string[]; examples: { ids: number[]; label: number }[]; steps: number }

export class Manager {
  readonly domains = new Map<string, DomainRecord>();
  /** target ('domain:<name>' | 'tenant:<id>') → the job that holds it. */
  private readonly pending = new Map<string, { job: string; domain: string | null; op: string }>();
  private readonly finishedEarly = new Set<string>();
  private nextTenant = 1;
  private readonly specialIds: number[];
  private readonly maskId: number;

  constructor(
    readonly model: EncoderModel,
    readonly tokenizer: TextTokenizer,
    readonly plot: PlotService,
    readonly tenants: TenantStore,
    readonly queue: JobQueue,
    readonly settings: ManagerSettings,
    /** Called after a tenant is deleted (the engine fails its queued requests). */
    private readonly onTenantDeleted: (id: string) => void = () => {},
  ) {
    const now = new Date().toISOString();
    this.domains.set(ROOT_DOMAIN, {
      name: ROOT_DOMAIN, version: ROOT_VERSION, lower: null, counts: new TrigramCounts(), alpha: 1, corpusTexts: 0, fptSteps: 0, lastLoss: null, createdAt: now, updatedAt: now,
    });
    const s = tokenizer.specialTokenIds;
    this.specialIds = [s.cls, s.sep, s.pad ?? 0, s.unk].filter((x): x is number => x !== undefined);
    const mask = tokenizer.tokenToId('[MASK]');
    if (mask === undefined) throw new Error(`the tokenizer of ${settings.modelDir} has no [MASK] token (domain further-pretraining is masked LM)`);
    this.maskId = mask;
  }

  get labelsMax(): number {
    return this.model.config.numLabels;
  }

  // ------------------------------------------------------------------ submit (checks, reserve, enqueue)

  async createDomain(input: CreateDomainInput): Promise<JobView> {
    const { name } = input;
    if (!NAME.test(name)) throw new HmiInputError('TESSERA_HMI_BAD_NAME', `domain name ${JSON.stringify(name)}: use letters, digits, '.', '_', '-' (at most 64, starting with a letter or digit)`, 'name');
    if (name === ROOT_DOMAIN || this.domains.has(name)) throw new HmiConflictError('TESSERA_HMI_DOMAIN_EXISTS', `domain ${JSON.stringify(name)} already exists`, { domain: name });
    const alpha = input.alpha ?? this.settings.alpha;
    const corpus = this.corpusIds(input.corpus);
    return this.enqueue(`domain:${name}`, null, { op: 'create_domain', target: name, data: { name, corpus, alpha, steps: this.steps(input.steps, this.settings.fpt) } satisfies DomainJobData });
  }

  async updateDomain(name: string, input: UpdateDomainInput): Promise<JobView> {
    if (name === ROOT_DOMAIN) throw new HmiConflictError('TESSERA_HMI_ROOT', 'the root is the shared model: it is not further-pretrained here');
    const rec = this.domain(name);
    const corpus = this.corpusIds(input.corpus);
    return this.enqueue(`domain:${name}`, null, { op: 'update_domain', target: name, data: { name, corpus, alpha: rec.alpha, steps: this.steps(input.steps, this.settings.fpt) } satisfies DomainJobData });
  }

  async deleteDomain(name: string): Promise<JobView> {
    if (name === ROOT_DOMAIN) throw new HmiConflictError('TESSERA_HMI_ROOT', 'the root cannot be deleted');
    this.domain(name);
    this.checkDomainUnused(name);
    return this.enqueue(`domain:${name}`, null, { op: 'delete_domain', target: name, data: { name } });
  }

  async createTenant(input: CreateTenantInput): Promise<JobView> {
    const id = input.id ?? this.freshTenantId();
    if (!NAME.test(id)) throw new HmiInputError('TESSERA_HMI_BAD_NAME', `tenant id ${JSON.stringify(id)}: use letters, digits, '.', '_', '-' (at most 64, starting with a letter or digit)`, 'id');
    if (this.tenants.has(id)) throw new HmiConflictError('TESSERA_HMI_TENANT_EXISTS', `tenant ${JSON.stringify(id)} already exists`, { tenant: id });
    if (this.tenants.isDormant(id)) {
      throw new HmiConflictError('TESSERA_HMI_TENANT_EXISTS', `tenant ${JSON.stringify(id)} is on disk from an earlier run, waiting for its PLOT version; delete it to reuse the id`, { tenant: id });
    }
    this.domain(input.domain);
    if (this.pending.get(`domain:${input.domain}`)?.op === 'delete_domain') {
      throw new HmiConflictError('TESSERA_HMI_BUSY', `domain ${JSON.stringify(input.domain)} is being deleted`, { domain: input.domain });
    }
    const labels = this.checkLabels(input.labels);
    const examples = this.examplesIds(input.examples, labels);
    const data: TenantJobData = { id, domain: input.domain, labels, examples, steps: this.steps(input.steps, this.settings.ft) };
    return this.enqueue(`tenant:${id}`, input.domain, { op: 'create_tenant', target: id, data });
  }

  async updateTenant(id: string, input: UpdateTenantInput): Promise<JobView> {
    const t = this.tenant(id);
    const examples = this.examplesIds(input.examples, t.labels);
    const data: TenantJobData = { id, domain: t.domain, labels: [...t.labels], examples, steps: this.steps(input.steps, this.settings.ft) };
    return this.enqueue(`tenant:${id}`, t.domain, { op: 'update_tenant', target: id, data });
  }

  async deleteTenant(id: string): Promise<JobView> {
    // A dormant tenant (on disk from an earlier run, its version not rebuilt) can be deleted too.
    const t = this.tenants.isDormant(id) ? this.tenants.dormantRecords().find((r) => r.id === id)! : this.tenant(id);
    return this.enqueue(`tenant:${id}`, t.domain, { op: 'delete_tenant', target: id, data: { id } });
  }

  /** DELETE /v1/jobs/:id: a queued job never runs, so its reservation goes here; a running one's in its finally. */
  async cancel(jobId: string): Promise<JobView> {
    const view = await this.queue.cancel(jobId);
    if (view.state === 'cancelled') this.release(jobId, false);
    return view;
  }

  // ------------------------------------------------------------------ reads

  domain(name: string): DomainRecord {
    const d = this.domains.get(name);
    if (!d) throw new UnknownDomainError(name);
    return d;
  }

  tenant(id: string): TenantRecord {
    const t = this.tenants.record(id);
    if (!t) throw new UnknownTenantError(id);
    return t;
  }

  domainView(d: DomainRecord) {
    const info = this.plot.tree.info(d.version);
    const cov = info.coverage;
    return {
      name: d.name,
      version: d.version,
      generation: info.generation,
      parent: info.parent,
      entries: info.entries,
      alpha: d.name === ROOT_DOMAIN ? null : d.alpha,
      coverage: cov ? { distinct: cov.distinct, kept: cov.kept, covered_fraction: cov.coveredFraction, kept_fraction: cov.keptFraction, corpus_tokens: cov.corpusTokens } : null,
      tenants: this.tenants.countOnDomain(d.name),
      // Every version of the domain not yet collected: superseded ones stay while tenants are pinned to them (A7).
      versions: this.plot.tree.versions().filter((v) => v.domain === d.name).map((v) => ({ id: v.id, state: v.state, pins: v.pins, entries: v.entries })),
      corpus_texts: d.corpusTexts,
      fpt_steps: d.fptSteps,
      last_loss: d.lastLoss,
      created_at: d.createdAt,
      updated_at: d.updatedAt,
    };
  }

  tenantView(t: TenantRecord) {
    const b = this.tenants.bytesOf(t.id);
    return {
      id: t.id,
      domain: t.domain,
      version: t.version,
      labels: [...t.labels],
      examples: t.examples,
      steps: t.steps,
      bytes: { adapters: b.adapters, head: b.head, total: b.total, device_resident: 0, file: this.tenants.fileBytesOf(t.id), host_cached: this.tenants.files.peek(t.id) !== undefined },
      created_at: t.createdAt,
      updated_at: t.updatedAt,
    };
  }

  /** What a tenant of this server costs by the formula (each tenant's bytes equal it for its label count). */
  expectedBytes(labels: number): number {
    return expectedTenantBytes(this.tenants.shape, labels);
  }

  // ------------------------------------------------------------------ the processor

  readonly process = async (spec: JobSpec, ctx: JobContext): Promise<unknown> => {
    try {
      switch (spec.op) {
        case 'create_domain':
        case 'update_domain':
          return await this.runDomain(spec.op, spec.data as DomainJobData, ctx);
        case 'create_tenant':
        case 'update_tenant':
          return await this.runTenant(spec.op, spec.data as TenantJobData, ctx);
        case 'delete_tenant':
          return this.runDeleteTenant((spec.data as { id: string }).id);
        case 'delete_domain':
          return this.runDeleteDomain((spec.data as { name: string }).name);
        default:
          throw new HmiInputError('TESSERA_HMI_BAD_INPUT', `unknown operation ${JSON.stringify(spec.op)}`, null);
      }
    } finally {
      this.release(ctx.id);
    }
  };

  private async runDomain(op: 'create_domain' | 'update_domain', d: DomainJobData, ctx: JobContext): Promise<unknown> {
    const existing = this.domains.get(d.name);
    if (op === 'create_domain' && existing) throw new HmiConflictError('TESSERA_HMI_DOMAIN_EXISTS', `domain ${JSON.stringify(d.name)} already exists`, { domain: d.name });
    if (op === 'update_domain' && !existing) throw new UnknownDomainError(d.name);
    const fpt = this.settings.fpt;
    const trained = await furtherPretrain(
      { modelDir: this.settings.modelDir, lowerLayers: this.plot.lowerLayers, ...(existing?.lower ? { start: existing.lower } : {}), corpus: d.corpus, steps: d.steps, batchSize: fpt.batchSize, lr: fpt.lr, seed: fpt.seed, maskTokenId: this.maskId, specialTokenIds: this.specialIds },
      { signal: ctx.signal, progress: (f) => ctx.progress(0.7 * f) },
    );
    try {
      const added = new TrigramCounts().addBatch(this.plot.codec.keys(d.corpus));
      const counts = existing ? existing.counts.merged(added) : added;
      const selection = selectByCoverage(counts, d.alpha);
      const values = await this.plot.computeValues(trained.model, selection.keys, { signal: ctx.signal, progress: (f) => ctx.progress(0.7 + 0.29 * f) });
      ctx.signal.throwIfAborted();
      // Commit: from here on nothing awaits, so a cancellation cannot leave half a domain.
      const now = new Date().toISOString();
      const info = existing ? this.plot.tree.updateBranch(existing.version, { selection, values }) : this.plot.tree.createBranch({ domain: d.name, selection, values });
      this.plot.fingerprints.set(info.id, plotFingerprint(selection.keys, values));
      const rec: DomainRecord = {
        name: d.name, version: info.id, lower: trained.lower, counts, alpha: d.alpha, corpusTexts: (existing?.corpusTexts ?? 0) + d.corpus.length,
        fptSteps: (existing?.fptSteps ?? 0) + d.steps, lastLoss: trained.loss, createdAt: existing?.createdAt ?? now, updatedAt: now,
      };
      this.domains.set(d.name, rec);
      const adopted = this.adoptDormant();
      this.plot.collect();
      return { domain: d.name, version: info.id, entries: info.entries, kept_fraction: selection.keptFraction, covered_fraction: selection.coveredFraction, loss: trained.loss, restored_tenants: adopted };
    } finally {
      trained.model.weights.dispose();
    }
  }

  private async runTenant(op: 'create_tenant' | 'update_tenant', d: TenantJobData, ctx: JobContext): Promise<unknown> {
    const dom = this.domain(d.domain);
    const old = this.tenants.record(d.id);
    if (op === 'create_tenant' && old) throw new HmiConflictError('TESSERA_HMI_TENANT_EXISTS', `tenant ${JSON.stringify(d.id)} already exists`, { tenant: d.id });
    if (op === 'update_tenant' && !old) throw new UnknownTenantError(d.id);
    // The warm start: the tenant's arrays, from the host tier or its file.
    const start: LoadedTenant | undefined = old ? await this.tenants.load(d.id) : undefined;
    const version = dom.version;
    const snapshot = this.plot.snapshot(version);
    try {
      const ft = this.settings.ft;
      const trained = await fineTuneTenant(
        { model: this.model, plot: this.plot, snapshot, bottleneck: this.settings.bottleneck, examples: d.examples, labels: d.labels.length, steps: d.steps, batchSize: ft.batchSize, lr: ft.lr, seed: ft.seed, ...(start ? { start } : {}) },
        { signal: ctx.signal, progress: (f) => ctx.progress(0.99 * f) },
      );
      ctx.signal.throwIfAborted();
      const now = new Date().toISOString();
      const state: TenantState = {
        id: d.id, domain: d.domain, version, labels: d.labels, adapters: trained.adapters, head: trained.head,
        examples: (old?.examples ?? 0) + d.examples.length, steps: (old?.steps ?? 0) + d.steps, createdAt: old?.createdAt ?? now, updatedAt: now,
      };
      // The file first, under a temporary name (the one await of the commit); then one synchronous step: the
      // rename, the metadata, the pins. A cancellation that arrives during the write still leaves nothing.
      const staged = await this.tenants.stage(state, this.plot.fingerprints.get(version) ?? '');
      if (ctx.signal.aborted || !this.plot.tree.has(version)) {
        staged.abort();
        ctx.signal.throwIfAborted();
        // The domain may have been updated meanwhile: the tenant keeps the version it was trained on (pinned).
        throw new UnknownDomainError(d.domain);
      }
      const current = this.tenants.record(d.id);
      if (op === 'create_tenant' && current) {
        staged.abort();
        throw new HmiConflictError('TESSERA_HMI_TENANT_EXISTS', `tenant ${JSON.stringify(d.id)} already exists`, { tenant: d.id });
      }
      staged.commit();
      this.plot.tree.pin(version);
      if (current) this.plot.tree.unpin(current.version);
      this.plot.collect();
      return { tenant: d.id, domain: d.domain, version, loss: trained.loss, train_accuracy: trained.accuracy, bytes: this.tenants.bytesOf(d.id).total, file_bytes: this.tenants.fileBytesOf(d.id) };
    } finally {
      snapshot.release();
    }
  }

  private runDeleteTenant(id: string): unknown {
    const served = this.tenants.has(id);
    const bytes = served ? this.tenants.bytesOf(id).total : 0;
    const fileBytes = this.tenants.fileBytesOf(id);
    const old = this.tenants.delete(id);
    if (!old) throw new UnknownTenantError(id);
    if (served) {
      this.plot.tree.unpin(old.version);
      this.plot.collect();
      this.onTenantDeleted(id);
    }
    return { tenant: id, deleted: true, freed_bytes: bytes, freed_file_bytes: fileBytes };
  }

  /**
   * Serves the persisted tenants whose PLOT version exists now with the table they were trained on (the same
   * fingerprint): the root at start, a domain's version once it is rebuilt the same way. Returns their number.
   */
  adoptDormant(): number {
    let n = 0;
    for (const r of this.tenants.dormantRecords()) {
      const fp = this.plot.fingerprints.get(r.version);
      if (fp === undefined || fp !== r.plot || !this.plot.tree.has(r.version) || !this.domains.has(r.domain) || this.pending.has(`tenant:${r.id}`)) continue;
      this.tenants.adopt(r.id);
      this.plot.tree.pin(r.version);
      n++;
    }
    return n;
  }

  private runDeleteDomain(name: string): unknown {
    const d = this.domain(name);
    this.checkDomainUnused(name, true);
    this.plot.tree.delete(d.version);
    this.domains.delete(name);
    this.plot.collect();
    return { domain: name, deleted: true };
  }

  // ------------------------------------------------------------------ helpers

  private async enqueue(target: string, domain: string | null, spec: JobSpec): Promise<JobView> {
    const holder = this.pending.get(target);
    if (holder) throw new HmiConflictError('TESSERA_HMI_BUSY', `${target.replace(':', ' ')} has a pending operation (job ${holder.job}); wait for it or cancel it`, { job: holder.job });
    // Reserved before the await, so two requests in one turn cannot both pass the check.
    const slot = { job: '', domain, op: spec.op };
    this.pending.set(target, slot);
    try {
      const view = await this.queue.add(spec);
      slot.job = view.id;
      // A job that finished before add() returned (a quick delete) released nothing yet: release it now.
      if (this.finishedEarly.delete(view.id)) this.pending.delete(target);
      return view;
    } catch (err) {
      this.pending.delete(target);
      throw err;
    }
  }

  /** Frees the job's reservation; `early`: the job may have ended before enqueue() learnt its id. */
  private release(jobId: string, early = true): void {
    let found = false;
    for (const [target, slot] of this.pending) {
      if (slot.job === jobId) {
        this.pending.delete(target);
        found = true;
      }
    }
    if (!found && early) this.finishedEarly.add(jobId);
  }

  private checkDomainUnused(name: string, running = false): void {
    const tenants = this.tenants.countOnDomain(name);
    if (tenants > 0) throw new HmiConflictError('TESSERA_HMI_DOMAIN_IN_USE', `domain ${JSON.stringify(name)} has ${tenants} tenant(s); delete them first`, { domain: name, tenants });
    for (const [target, slot] of this.pending) {
      if (slot.domain === name && target.startsWith('tenant:') && !running) {
        throw new HmiConflictError('TESSERA_HMI_DOMAIN_IN_USE', `domain ${JSON.stringify(name)} has a pending tenant operation (job ${slot.job})`, { domain: name, job: slot.job });
      }
    }
  }

  private freshTenantId(): string {
    let id: string;
    do id = `tenant-${this.nextTenant++}`;
    while (this.tenants.has(id) || this.tenants.isDormant(id) || this.pending.has(`tenant:${id}`));
    return id;
  }

  private steps(requested: number | undefined, defaults: TrainSettings): number {
    return requested ?? defaults.steps;
  }

  private encode(text: string, param: string): number[] {
    const ids = this.tokenizer.encode(text);
    const max = this.model.config.maxPositions;
    if (ids.length > max) throw new HmiInputError('TESSERA_HMI_BAD_INPUT', `${param} is ${ids.length} tokens, more than the model's ${max} positions`, param, { tokens: ids.length, limit: max });
    return ids;
  }

  private corpusIds(corpus: readonly string[]): number[][] {
    const ids = corpus.map((t, i) => this.encode(t, `corpus[${i}]`));
    const tokens = ids.reduce((n, s) => n + s.length, 0);
    if (tokens < this.settings.minCorpusTokens) {
      throw new HmiInputError('TESSERA_HMI_CORPUS_TOO_SMALL', `the corpus is ${tokens} tokens; a domain needs at least ${this.settings.minCorpusTokens}`, 'corpus', { tokens, minimum: this.settings.minCorpusTokens });
    }
    return ids;
  }

  private checkLabels(labels: readonly string[]): string[] {
    const max = this.labelsMax;
    if (labels.length < 2 || labels.length > max || new Set(labels).size !== labels.length) {
      throw new HmiInputError('TESSERA_HMI_BAD_LABELS', `labels must be 2 … ${max} distinct names (the shared model's head has ${max} outputs), got ${JSON.stringify(labels)}`, 'labels', { maximum: max });
    }
    return [...labels];
  }

  private examplesIds(examples: readonly Example[], labels: readonly string[]): { ids: number[]; label: number }[] {
    return examples.map((e, i) => {
      const label = labels.indexOf(e.label);
      if (label < 0) throw new HmiInputError('TESSERA_HMI_BAD_LABEL', `examples[${i}].label ${JSON.stringify(e.label)} is not one of ${JSON.stringify(labels)}`, `examples[${i}].label`);
      return { ids: this.encode(e.text, `examples[${i}].text`), label };
    });
  }
}

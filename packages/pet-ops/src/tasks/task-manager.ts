/**
 * The Task Manager (pets.md §3.2–3.4): the Task Register (id → <shared model tag, PET type>, parameters kept in
 * host memory in their compressed form) and the Task Loader (shared model first, exactly once; then each task's
 * PET tensors, all resident). [EXT] unloadTask / unregisterTask / unloadSharedModel give memory back.
 *
 * Memory accounting follows the native allocator (every allocation charged in 64-byte granules), so
 * `memory()` agrees with `allocatorStats().inUse` deltas: PetS total = γ + Σ η_t (+ activations at run time).
 */
import { type EncoderConfig, readHfConfig } from '@tessera/engine';
import { type Backend, BudgetExceededError, allocatorStats, getBackend } from '@tessera/native';
import { DeviceBudgetError, PetConfigError, TaskStateError, UnknownSharedModelError, UnknownTaskError } from '../errors.js';
import { isConfigValidating } from '../operators/base.js';
import { checkSharedConfig } from '../operators/validate.js';
import { PetRegistry, defaultPetRegistry } from '../registry.js';
import { type HostTensor, type LoadedPet, PET_TYPES, type PetParams, type PetType, type SharedModel } from '../types.js';
import { SharedEncoder, type SharedModelSource } from './shared-model.js';

export interface TaskInfo {
  readonly id: string;
  readonly name?: string;
  readonly type: PetType;
  readonly sharedModelTag: string;
  readonly labels: readonly string[];
  readonly state: 'registered' | 'loaded';
  /** Bytes of the stored (compressed) parameters. */
  readonly storedBytes: number;
  /** Device bytes while loaded, else null. */
  readonly deviceBytes: number | null;
}

export interface TaskManagerMemory {
  /** The manager's own cap (`deviceBudgetBytes`), or null when only the native allocator's budget applies. */
  budgetBytes: number | null;
  /** Device bytes of the loaded shared models (each counted once). */
  sharedBytes: number;
  /** Device bytes of the loaded tasks' PET parameters. */
  petBytes: number;
  loadedTasks: number;
  registeredTasks: number;
  /** Loaded tasks and their device bytes, per PET type. */
  perType: Record<PetType, { tasks: number; bytes: number }>;
  /** The native allocator's budget and bytes in use (all users of the backend, activations included). */
  deviceBudgetBytes: number;
  deviceInUseBytes: number;
}

export interface TaskManagerOptions {
  backend?: Backend;
  registry?: PetRegistry;
  /** An extra cap on shared + PET bytes, on top of the native allocator's budget. */
  deviceBudgetBytes?: number;
}

interface SharedEntry {
  readonly tag: string;
  readonly source: SharedModelSource;
  readonly config: EncoderConfig;
  model: SharedEncoder | null;
}

interface TaskEntry {
  readonly id: string;
  readonly name?: string;
  readonly type: PetType;
  readonly tag: string;
  readonly params: PetParams;
  readonly storedBytes: number;
  loaded: LoadedPet | null;
}

function copyParams(params: PetParams): PetParams {
  const tensors = new Map<string, HostTensor>();
  for (const [name, t] of params.tensors) tensors.set(name, { dtype: t.dtype, shape: [...t.shape], data: t.data.slice() });
  const c = params.config;
  return {
    type: params.type,
    config: { ...c, labels: [...c.labels], ...(c.targetModules ? { targetModules: [...c.targetModules] } : {}) },
    tensors,
  };
}

export class TaskManager {
  readonly backend: Backend;
  readonly registry: PetRegistry;
  private readonly cap: number | null;
  private readonly shared = new Map<string, SharedEntry>();
  private readonly taskEntries = new Map<string, TaskEntry>();
  private nextId = 1;

  constructor(options: TaskManagerOptions = {}) {
    this.backend = options.backend ?? getBackend();
    this.registry = options.registry ?? defaultPetRegistry();
    const cap = options.deviceBudgetBytes;
    if (cap !== undefined && !(Number.isFinite(cap) && cap >= 0)) throw new RangeError(`TaskManager: deviceBudgetBytes must be a non-negative number, got ${cap}`);
    this.cap = cap ?? null;
  }

  // ─── shared models ────────────────────────────────────────────────────────────────────────────────────────

  /** Registers a shared model under `tag` (its config is read now; its weights load on first use). */
  addSharedModel(tag: string, source: SharedModelSource): void {
    if (typeof tag !== 'string' || tag === '') throw new PetConfigError('addSharedModel: the tag must be a non-empty string');
    if (this.shared.has(tag)) throw new TaskStateError(`a shared model tagged ${JSON.stringify(tag)} was already added`);
    const config = 'dir' in source ? readHfConfig(source.dir) : source.config;
    if (config.family !== 'encoder') throw new PetConfigError(`shared model ${JSON.stringify(tag)}: PET tasks need a BERT-style encoder, got a ${config.architecture}`);
    checkSharedConfig(config);
    this.shared.set(tag, { tag, source, config, model: null });
  }

  sharedModelTags(): string[] {
    return [...this.shared.keys()];
  }

  private sharedEntry(tag: string): SharedEntry {
    const e = this.shared.get(tag);
    if (!e) throw new UnknownSharedModelError(tag, [...this.shared.keys()]);
    return e;
  }

  /** The shared model's config (no loading). */
  sharedConfig(tag: string): EncoderConfig {
    return this.sharedEntry(tag).config;
  }

  /** Loads the shared model once; later calls return the same object. */
  loadSharedModel(tag: string): SharedModel {
    const e = this.sharedEntry(tag);
    if (e.model) return e.model;
    let model: SharedEncoder;
    try {
      model = SharedEncoder.load(tag, e.source, this.backend);
    } catch (err) {
      if (err instanceof BudgetExceededError) throw DeviceBudgetError.fromNative(`loading shared model ${tag}`, err);
      throw err;
    }
    if (this.cap !== null) {
      const used = this.usedBytes();
      if (used + model.bytes > this.cap) {
        model.dispose();
        throw new DeviceBudgetError(`loading shared model ${tag}`, model.bytes, this.cap - used, this.cap);
      }
    }
    e.model = model;
    return model;
  }

  /** The loaded shared model (TaskStateError when it is not loaded). */
  sharedModel(tag: string): SharedModel {
    const e = this.sharedEntry(tag);
    if (!e.model) throw new TaskStateError(`shared model ${JSON.stringify(tag)} is not loaded`);
    return e.model;
  }

  /** Frees the shared model's weights. Its tasks must be unloaded first. */
  unloadSharedModel(tag: string): void {
    const e = this.sharedEntry(tag);
    const loaded = [...this.taskEntries.values()].filter((t) => t.tag === tag && t.loaded);
    if (loaded.length > 0) throw new TaskStateError(`shared model ${JSON.stringify(tag)} still serves ${loaded.length} loaded task(s) (${loaded.slice(0, 3).map((t) => t.id).join(', ')}); unload them first`);
    e.model?.dispose();
    e.model = null;
  }

  // ─── tasks ────────────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Registers a task: checks the PET type, the tag and the parameters against the shared model's config (no
   * weights needed), keeps a copy of the parameters and returns the task's unique id.
   */
  registerTask(petType: PetType, sharedModelTag: string, params: PetParams, options: { id?: string; name?: string } = {}): string {
    const op = this.registry.get(petType);
    const shared = this.sharedEntry(sharedModelTag);
    if (params.type !== petType) throw new PetConfigError(`registerTask: the parameters are of type ${params.type}, but the task is registered as ${petType}`);
    if (isConfigValidating(op)) op.validateForConfig(shared.config, params);
    else op.validate(this.loadSharedModel(sharedModelTag), params);
    let id = options.id;
    if (id !== undefined) {
      if (typeof id !== 'string' || id === '') throw new PetConfigError('registerTask: options.id must be a non-empty string');
      if (this.taskEntries.has(id)) throw new TaskStateError(`a task with id ${JSON.stringify(id)} is already registered`);
    } else {
      do id = `task-${this.nextId++}`;
      while (this.taskEntries.has(id));
    }
    const stored = copyParams(params);
    this.taskEntries.set(id, {
      id,
      ...(options.name === undefined ? {} : { name: options.name }),
      type: petType,
      tag: sharedModelTag,
      params: stored,
      storedBytes: op.storedBytes(stored),
      loaded: null,
    });
    return id;
  }

  private entry(id: string): TaskEntry {
    const e = this.taskEntries.get(id);
    if (!e) throw new UnknownTaskError(id);
    return e;
  }

  /** The stored parameters of a task (do not modify them). */
  params(id: string): PetParams {
    return this.entry(id).params;
  }

  /**
   * Loads tasks: each one's shared model first (once), then its PET tensors. All or nothing: if any task does not
   * fit (DeviceBudgetError) or fails, nothing this call loaded stays loaded (shared models included).
   * Already-loaded ids are skipped.
   */
  loadTasks(ids: readonly string[]): void {
    const pending: TaskEntry[] = [];
    for (const id of ids) {
      const e = this.entry(id);
      if (!e.loaded && !pending.includes(e)) pending.push(e);
    }
    const newShared: SharedEntry[] = [];
    const newTasks: TaskEntry[] = [];
    try {
      for (const e of pending) {
        const s = this.sharedEntry(e.tag);
        if (!s.model) {
          this.loadSharedModel(e.tag);
          newShared.push(s);
        }
      }
      for (const e of pending) {
        const shared = this.sharedEntry(e.tag).model!;
        let pet: LoadedPet;
        try {
          pet = this.registry.get(e.type).load(shared, e.params, this.backend);
        } catch (err) {
          if (err instanceof BudgetExceededError) throw DeviceBudgetError.fromNative(`loading task ${e.id} (${e.type})`, err);
          throw err;
        }
        e.loaded = pet;
        newTasks.push(e);
        if (this.cap !== null) {
          const used = this.usedBytes();
          if (used > this.cap) throw new DeviceBudgetError(`loading task ${e.id} (${e.type})`, pet.bytes, this.cap - (used - pet.bytes), this.cap);
        }
      }
    } catch (err) {
      for (const e of newTasks) {
        e.loaded?.dispose();
        e.loaded = null;
      }
      for (const s of newShared) {
        s.model?.dispose();
        s.model = null;
      }
      throw err;
    }
  }

  /** Frees a loaded task's device tensors; it stays registered. TaskStateError if it is not loaded. */
  unloadTask(id: string): void {
    const e = this.entry(id);
    if (!e.loaded) throw new TaskStateError(`task ${id} is not loaded`);
    e.loaded.dispose();
    e.loaded = null;
  }

  /** Removes a task (unloading it first when loaded). */
  unregisterTask(id: string): void {
    const e = this.entry(id);
    e.loaded?.dispose();
    e.loaded = null;
    this.taskEntries.delete(id);
  }

  private info(e: TaskEntry): TaskInfo {
    return {
      id: e.id,
      ...(e.name === undefined ? {} : { name: e.name }),
      type: e.type,
      sharedModelTag: e.tag,
      labels: e.params.config.labels,
      state: e.loaded ? 'loaded' : 'registered',
      storedBytes: e.storedBytes,
      deviceBytes: e.loaded ? e.loaded.bytes : null,
    };
  }

  task(id: string): TaskInfo {
    return this.info(this.entry(id));
  }

  /** Every registered task, in registration order. */
  tasks(): TaskInfo[] {
    return [...this.taskEntries.values()].map((e) => this.info(e));
  }

  /** A loaded task with its device parameters and shared model (TaskStateError when it is not loaded). */
  loadedTask(id: string): { info: TaskInfo; pet: LoadedPet; shared: SharedModel } {
    const e = this.entry(id);
    if (!e.loaded) throw new TaskStateError(`task ${id} is registered but not loaded (loadTasks([${JSON.stringify(id)}]) first)`);
    return { info: this.info(e), pet: e.loaded, shared: this.sharedEntry(e.tag).model! };
  }

  private usedBytes(): number {
    let n = 0;
    for (const s of this.shared.values()) if (s.model) n += s.model.bytes;
    for (const e of this.taskEntries.values()) if (e.loaded) n += e.loaded.bytes;
    return n;
  }

  memory(): TaskManagerMemory {
    const perType = Object.fromEntries(PET_TYPES.map((t) => [t, { tasks: 0, bytes: 0 }])) as Record<PetType, { tasks: number; bytes: number }>;
    let sharedBytes = 0;
    let petBytes = 0;
    let loadedTasks = 0;
    for (const s of this.shared.values()) if (s.model) sharedBytes += s.model.bytes;
    for (const e of this.taskEntries.values()) {
      if (!e.loaded) continue;
      loadedTasks++;
      petBytes += e.loaded.bytes;
      perType[e.type].tasks++;
      perType[e.type].bytes += e.loaded.bytes;
    }
    const stats = allocatorStats(this.backend);
    return {
      budgetBytes: this.cap,
      sharedBytes,
      petBytes,
      loadedTasks,
      registeredTasks: this.taskEntries.size,
      perType,
      deviceBudgetBytes: stats.budget,
      deviceInUseBytes: stats.inUse,
    };
  }

  /** Unloads and unregisters every task and frees every shared model. */
  dispose(): void {
    for (const e of this.taskEntries.values()) e.loaded?.dispose();
    this.taskEntries.clear();
    for (const s of this.shared.values()) {
      s.model?.dispose();
      s.model = null;
    }
  }
}

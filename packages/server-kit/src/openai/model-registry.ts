/**
 * ModelRegistry: the names a multi-adapter server answers to, on the HTTP thread. The request's `model` field picks
 * what runs: the base model's name → the base model; an adapter's name → that adapter on the base; `base:adapter`
 * → the same adapter, spelled with its parent. Anything else is a 404 `model_not_found`: never a silent fall-back
 * to the base model. The engine keeps the adapters themselves; this is the name → directory map the API exposes,
 * and its `resolve` is a GenerationBackend's.
 */
import { HttpError } from '../http/errors.js';

/** 404 for a `model` that is neither the base model nor a registered adapter (OpenAI's wording and code). */
export function modelNotFound(model: string): HttpError {
  return new HttpError(404, 'model_not_found', `The model \`${model}\` does not exist.`, { type: 'invalid_request_error', param: 'model' });
}

export interface BaseModelEntry {
  /** The id clients send as `model` (default: the model directory's name). */
  name: string;
  /** The model directory. */
  root: string;
  maxModelLen: number;
  /** Unix seconds. */
  created: number;
}

export interface AdapterEntry {
  name: string;
  /** The adapter directory (absolute). */
  path: string;
  rank: number;
  /** Unix seconds when it was registered. */
  created: number;
}

export class ModelRegistry {
  readonly base: BaseModelEntry;
  private readonly entries = new Map<string, AdapterEntry>();
  /** Names with a load in flight: a second load of the same name is refused while the first is validated. */
  private readonly pending = new Set<string>();

  constructor(base: BaseModelEntry) {
    this.base = base;
  }

  adapters(): AdapterEntry[] {
    return [...this.entries.values()];
  }

  get(name: string): AdapterEntry | undefined {
    return this.entries.get(name);
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  /** True when `name` is taken: the base model, a registered adapter, or a load in flight. */
  isTaken(name: string): boolean {
    return name === this.base.name || this.entries.has(name) || this.pending.has(name);
  }

  /** The adapter a `model` value selects (null = the base model); throws the 404 for anything unknown. */
  resolve(model: string): { adapter: string | null } {
    if (model === this.base.name) return { adapter: null };
    if (this.entries.has(model)) return { adapter: model };
    const prefix = `${this.base.name}:`;
    if (model.startsWith(prefix) && this.entries.has(model.slice(prefix.length))) return { adapter: model.slice(prefix.length) };
    throw modelNotFound(model);
  }

  /** Marks a name as being loaded; returns false when it is already taken. */
  reserve(name: string): boolean {
    if (this.isTaken(name)) return false;
    this.pending.add(name);
    return true;
  }

  /** Ends a reservation: with the entry when the load succeeded, without it when it failed. */
  settle(name: string, entry: AdapterEntry | null): void {
    this.pending.delete(name);
    if (entry) this.entries.set(name, entry);
  }

  /** Adds an adapter registered at start-up. */
  add(entry: AdapterEntry): void {
    this.entries.set(entry.name, entry);
  }

  remove(name: string): AdapterEntry | undefined {
    const entry = this.entries.get(name);
    this.entries.delete(name);
    return entry;
  }
}

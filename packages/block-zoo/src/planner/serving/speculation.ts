/**
 * Speculative execution bookkeeping (design note §4.5, algorithm 5.8). Selection: the top fraction of block
 * instances by queue drain time, never the last block of a chain, never two blocks adjacent in any chain, only
 * blocks with a surrogate. Runtime: a speculation opens a tag for (request, iteration, position); every later step
 * of that request-iteration taken before the tag is verified is tentative and depends on it (tentative work may
 * propagate, A20). Verification at cosine ≥ 0.95 commits the tag; below, the tag aborts and the rollback plan lists
 * exactly the tentative KV appends to truncate and the position to re-execute from with the real output. An
 * iteration's token is released only when none of its tags is open (A19).
 */
import type { BlockId } from '../ids.js';
import { checkInteger, ServingInvalidError, ServingNotFoundError, ServingStateError } from './errors.js';

/** Speculation's acceptance threshold: cosine of the surrogate's output against the real block's (design note 5.0). */
export const DEFAULT_SPEC_ACCEPT_COSINE = 0.95;
/** Fraction of block instances that speculate (design note 5.0). */
export const DEFAULT_SPEC_TOP_FRACTION = 0.1;

export interface SpeculationCandidate {
  instance: string;
  block: BlockId;
  /** Σ profiled compute of the queued batches (the ranking, A17). */
  drainMs: number;
}

/**
 * Chooses the instances that speculate (selectSpeculation): ceil(fraction × instances), by drain time descending
 * (ties by instance id), skipping blocks that end a chain, blocks without a surrogate, and blocks adjacent in any
 * chain to a block already chosen.
 */
export function selectSpeculation(candidates: readonly SpeculationCandidate[], chains: readonly (readonly BlockId[])[], hasSurrogate: ReadonlySet<BlockId>, fraction = DEFAULT_SPEC_TOP_FRACTION): SpeculationCandidate[] {
  if (!(fraction >= 0 && fraction <= 1)) throw new ServingInvalidError(`fraction must be in [0, 1], got ${fraction}`);
  const budget = Math.ceil(fraction * candidates.length);
  const last = new Set<BlockId>();
  const neighbours = new Map<BlockId, Set<BlockId>>();
  for (const chain of chains) {
    if (chain.length > 0) last.add(chain[chain.length - 1]!);
    for (let i = 0; i + 1 < chain.length; i++) {
      const [a, b] = [chain[i]!, chain[i + 1]!];
      if (!neighbours.has(a)) neighbours.set(a, new Set());
      if (!neighbours.has(b)) neighbours.set(b, new Set());
      neighbours.get(a)!.add(b);
      neighbours.get(b)!.add(a);
    }
  }
  const ranked = [...candidates].sort((a, b) => b.drainMs - a.drainMs || (a.instance < b.instance ? -1 : a.instance > b.instance ? 1 : 0));
  const chosen: SpeculationCandidate[] = [];
  const chosenBlocks = new Set<BlockId>();
  for (const c of ranked) {
    if (chosen.length >= budget) break;
    if (last.has(c.block) || !hasSurrogate.has(c.block)) continue;
    if ([...(neighbours.get(c.block) ?? [])].some((n) => chosenBlocks.has(n))) continue;
    chosen.push(c);
    chosenBlocks.add(c.block);
  }
  return chosen;
}

/** One step of a request-iteration at a chain position, as recorded. */
export interface SpecStep {
  request: string;
  iteration: number;
  position: number;
  instance: string;
  block: BlockId;
  /** KV positions the step appended at the instance (0 for a block without attention). */
  kvTokens: number;
  /** The open tags it depends on (empty: final). */
  dependsOn: readonly string[];
}

export interface SpecTag {
  tag: string;
  request: string;
  iteration: number;
  /** The chain position of the speculated block X (its successor ran on the surrogate's prediction). */
  position: number;
  state: 'open' | 'committed' | 'aborted';
}

export interface RollbackPlan {
  tag: string;
  /** KV to truncate: drop `tokens` positions from the end of the request's KV at (instance, block). Latest first. */
  truncate: readonly { instance: string; block: BlockId; request: string; tokens: number }[];
  /** The tentative steps dropped (to be re-executed). */
  dropped: readonly SpecStep[];
  /** Tags opened downstream that depended on the aborted one (aborted with it). */
  abortedTags: readonly string[];
  /** Re-execute the iteration from this chain position with the real output. */
  resumeAt: number;
}

export type Verification = { tag: string; accepted: true; committedSteps: number } | ({ accepted: false } & RollbackPlan);

export interface SpeculationStats {
  speculations: number;
  accepted: number;
  rolledBack: number;
  droppedSteps: number;
}

const iterKey = (request: string, iteration: number) => `${request}#${iteration}`;

export class SpeculationLedger {
  readonly acceptCosine: number;
  private readonly tags = new Map<string, SpecTag>();
  /** Steps per request-iteration, in record order. */
  private readonly steps = new Map<string, SpecStep[]>();
  private readonly counters: SpeculationStats = { speculations: 0, accepted: 0, rolledBack: 0, droppedSteps: 0 };

  constructor(options: { acceptCosine?: number } = {}) {
    this.acceptCosine = options.acceptCosine ?? DEFAULT_SPEC_ACCEPT_COSINE;
    if (!(this.acceptCosine >= -1 && this.acceptCosine <= 1)) throw new ServingInvalidError(`acceptCosine must be in [-1, 1], got ${this.acceptCosine}`);
  }

  /**
   * Opens a speculation on the block at `position` of a chain of `chainLength` blocks: its successor may run on the
   * surrogate's prediction. Refuses the last block (its output cannot be corrected) and a block adjacent to one with
   * an open tag in the same iteration.
   */
  open(request: string, iteration: number, position: number, chainLength: number): string {
    checkInteger(iteration, 'iteration');
    checkInteger(position, 'position');
    checkInteger(chainLength, 'chainLength', 1);
    if (position >= chainLength - 1) throw new ServingInvalidError(`request ${request}: position ${position} is the last block of a chain of ${chainLength}; the last block never speculates`);
    const tag = `${iterKey(request, iteration)}@${position}`;
    if (this.tags.has(tag)) throw new ServingStateError(`speculation ${tag} was already opened`);
    for (const t of this.tags.values()) {
      if (t.request === request && t.iteration === iteration && t.state === 'open' && Math.abs(t.position - position) <= 1) {
        throw new ServingStateError(`request ${request}: position ${position} is adjacent to the open speculation at ${t.position}; consecutive blocks never speculate`);
      }
    }
    this.tags.set(tag, { tag, request, iteration, position, state: 'open' });
    this.counters.speculations++;
    return tag;
  }

  /**
   * Records a step. It is tentative (and depends on them) when open tags of the same request-iteration sit at
   * earlier positions: the step ran on a predicted input.
   */
  record(step: Omit<SpecStep, 'dependsOn'>): SpecStep {
    checkInteger(step.kvTokens, 'kvTokens');
    const k = iterKey(step.request, step.iteration);
    const list = this.steps.get(k) ?? [];
    if (list.some((s) => s.position === step.position)) throw new ServingStateError(`request ${step.request} iteration ${step.iteration} already has a step at position ${step.position}`);
    const dependsOn = [...this.tags.values()].filter((t) => t.request === step.request && t.iteration === step.iteration && t.state === 'open' && t.position < step.position).map((t) => t.tag);
    const s: SpecStep = { ...step, dependsOn };
    list.push(s);
    this.steps.set(k, list);
    return s;
  }

  /** Verifies a tag with the measured cosine (surrogate vs real output, mean over the iteration's tokens, A18). */
  verify(tag: string, cosine: number): Verification {
    const t = this.tags.get(tag);
    if (!t) throw new ServingNotFoundError('tag', tag);
    if (t.state !== 'open') throw new ServingStateError(`speculation ${tag} is already ${t.state}`);
    if (Number.isNaN(cosine)) throw new ServingInvalidError(`cosine for ${tag} is NaN`);
    const k = iterKey(t.request, t.iteration);
    const list = this.steps.get(k) ?? [];
    if (cosine >= this.acceptCosine) {
      t.state = 'committed';
      this.counters.accepted++;
      let committed = 0;
      for (const s of list) {
        if (!s.dependsOn.includes(tag)) continue;
        (s as { dependsOn: readonly string[] }).dependsOn = s.dependsOn.filter((d) => d !== tag);
        if (s.dependsOn.length === 0) committed++;
      }
      return { tag, accepted: true, committedSteps: committed };
    }
    t.state = 'aborted';
    this.counters.rolledBack++;
    // Downstream tags opened on predicted input fall with this one.
    const abortedTags: string[] = [];
    for (const o of this.tags.values()) {
      if (o.request === t.request && o.iteration === t.iteration && o.state === 'open' && o.position > t.position) {
        o.state = 'aborted';
        this.tags.delete(o.tag);
        abortedTags.push(o.tag);
      }
    }
    const dropped = list.filter((s) => s.dependsOn.includes(tag));
    const kept = list.filter((s) => !s.dependsOn.includes(tag));
    this.steps.set(k, kept);
    this.counters.droppedSteps += dropped.length;
    const truncate = dropped.filter((s) => s.kvTokens > 0).reverse().map((s) => ({ instance: s.instance, block: s.block, request: s.request, tokens: s.kvTokens }));
    // The aborted tag itself is forgotten so the position may speculate again on a later try.
    this.tags.delete(tag);
    return { accepted: false, tag, truncate, dropped, abortedTags, resumeAt: t.position + 1 };
  }

  /** Whether the iteration's sampled token may be released: no open tag of it remains. */
  canRelease(request: string, iteration: number): boolean {
    return ![...this.tags.values()].some((t) => t.request === request && t.iteration === iteration && t.state === 'open');
  }

  /** The open tags of a request-iteration. */
  openTags(request: string, iteration: number): string[] {
    return [...this.tags.values()].filter((t) => t.request === request && t.iteration === iteration && t.state === 'open').map((t) => t.tag);
  }

  /** The iteration's steps that are final (depend on no open tag), in chain order. */
  finalSteps(request: string, iteration: number): SpecStep[] {
    return (this.steps.get(iterKey(request, iteration)) ?? []).filter((s) => s.dependsOn.length === 0).sort((a, b) => a.position - b.position);
  }

  /** Forgets a request-iteration once its token is released (all its tags resolved). */
  retire(request: string, iteration: number): void {
    if (!this.canRelease(request, iteration)) throw new ServingStateError(`request ${request} iteration ${iteration} still has open speculations: ${this.openTags(request, iteration).join(', ')}`);
    this.steps.delete(iterKey(request, iteration));
    for (const [k, t] of this.tags) if (t.request === request && t.iteration === iteration) this.tags.delete(k);
  }

  stats(): SpeculationStats {
    return { ...this.counters };
  }
}

/** Mean over rows of the cosine between two [rows × width] row-major outputs (design note A18). */
export function meanRowCosine(a: ArrayLike<number>, b: ArrayLike<number>, width: number): number {
  checkInteger(width, 'width', 1);
  if (a.length !== b.length || a.length % width !== 0) throw new ServingInvalidError(`outputs of ${a.length} and ${b.length} values are not rows of width ${width}`);
  const rows = a.length / width;
  if (rows === 0) throw new ServingInvalidError('no rows to compare');
  let total = 0;
  for (let r = 0; r < rows; r++) {
    let dot = 0;
    let na = 0;
    let nb = 0;
    for (let i = r * width; i < (r + 1) * width; i++) {
      dot += a[i]! * b[i]!;
      na += a[i]! * a[i]!;
      nb += b[i]! * b[i]!;
    }
    total += na === 0 || nb === 0 ? (na === nb ? 1 : 0) : dot / Math.sqrt(na * nb);
  }
  return total / rows;
}

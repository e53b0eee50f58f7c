/**
 * PetS's coordinated batching (pets.md §5, Algorithm 1) and its three baselines (§5.2), planned over a pool of
 * queries with an α/β cost model.
 *
 * Step 1 (Eq. 4) splits one task's length-sorted queries into contiguous mini-batches minimizing Σ β; Step 2
 * (Eq. 5) splits the length-sorted mini-batches into contiguous macro-batches minimizing Σ α. Both are the 1-D
 * partition DPs of the pseudocode with its strict '<' (a tie keeps the earliest split, i.e. the largest last
 * group). Caps are +∞ costs; the DP loops skip the ranges a cap makes infinite, which changes no result (an
 * infinite candidate never wins a strict '<') but keeps R = 1024 to O(R·cap) cost-model calls.
 */
import type { CostModel } from './cost-model.js';
import { CostModelError, PlanError } from './errors.js';
import type { BatchPlan, BatchingStrategy, CbQuery, CostEstimate, MacroBatch, MiniBatch, PlanOptions } from './types.js';

export const DEFAULT_FIXED_SIZE = 32;
export const DEFAULT_MAX_MINI = 32;
export const DEFAULT_MAX_MACRO = 128;

/** Every strategy, in the order 'auto' prefers them on equal estimates. */
export const BATCHING_STRATEGIES: readonly BatchingStrategy[] = ['cb', 'alpha-only', 'beta-only', 'fixed'];

/** A query with its sort keys: arrival (given or the input index), then the input index as the last tie-break. */
interface Keyed {
  q: CbQuery;
  arrival: number;
  index: number;
}

const byLength = (a: Keyed, b: Keyed): number => a.q.length - b.q.length || a.arrival - b.arrival || a.index - b.index;
const byArrival = (a: Keyed, b: Keyed): number => a.arrival - b.arrival || a.index - b.index;

// ---------------------------------------------------------------------------------------------------------------
// Step 1: intra-task batching (Eq. 4)

/**
 * Step 1 for ONE task's queries: its queries sorted by (length, arrival), split into contiguous mini-batches with
 * minimal Σ β(petType, n, maxLength); n > maxMini costs +∞. Mini-batches come back in ascending length order.
 */
export function intraTaskBatching(queries: readonly CbQuery[], petType: string, cost: CostModel, maxMini: number = DEFAULT_MAX_MINI): MiniBatch[] {
  checkCost(cost);
  checkCap('maxMini', maxMini);
  if (typeof petType !== 'string' || petType.length === 0) {
    throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS', `intraTaskBatching: petType must be a non-empty string, got ${String(petType)}`);
  }
  const keyed = keyQueries(queries, 'intraTaskBatching');
  if (keyed.length === 0) return [];
  const task = keyed[0]!.q.task;
  for (const k of keyed) {
    if (k.q.task !== task) {
      throw new PlanError('TESSERA_INVALID_QUERY',
        `intraTaskBatching: all queries must belong to one task; query ${describeId(k.q.id)} has task '${k.q.task}', the first has '${task}'`);
    }
  }
  keyed.sort(byLength);
  return intraDp(keyed.map((k) => k.q), task, petType, cost, maxMini);
}

/** The Eq. 4 DP over `sorted` (ascending length, one task). */
function intraDp(sorted: readonly CbQuery[], task: string, petType: string, cost: CostModel, maxMini: number): MiniBatch[] {
  const n = sorted.length;
  const state = new Float64Array(n + 1);
  const split = new Int32Array(n + 1);
  for (let j = 1; j <= n; j++) {
    const l = sorted[j - 1]!.length;
    let best = Infinity;
    let bestK = -1;
    // Candidate last group q[k..j] (1-based); groups over maxMini cost +∞ and are skipped.
    for (let k = j > maxMini ? j - maxMini + 1 : 1; k <= j; k++) {
      const b = cost.beta(petType, j - k + 1, l);
      if (b !== b) throw nanCost(`β('${petType}', ${j - k + 1}, ${l})`);
      const c = state[k - 1]! + b;
      if (c < best) {
        best = c;
        bestK = k - 1;
      }
    }
    if (bestK < 0) {
      throw new PlanError('TESSERA_PLAN_INFEASIBLE',
        `Step 1: task '${task}' (PET type '${petType}'): every mini-batch ending at its query ${describeId(sorted[j - 1]!.id)} ` +
        `(length ${l}) costs +∞ under the cost model (maxMini ${maxMini}); the β table's cap or range is too small`);
    }
    state[j] = best;
    split[j] = bestK;
  }
  const out: MiniBatch[] = [];
  for (let j = n; j > 0;) {
    const i = split[j]!;
    out.push({ task, petType, queries: sorted.slice(i, j), maxLength: sorted[j - 1]!.length });
    j = i;
  }
  return out.reverse();
}

// ---------------------------------------------------------------------------------------------------------------
// Step 2: inter-task batching (Eq. 5)

/**
 * Step 2: the mini-batches sorted by (maxLength, position in the input), split into contiguous macro-batches with
 * minimal Σ α(size, maxLength); size > maxMacro costs +∞. The mini-batch objects are kept as given (each one
 * PET segment, so a task may appear twice in a macro-batch).
 */
export function interTaskBatching(miniBatches: readonly MiniBatch[], cost: CostModel, maxMacro: number = DEFAULT_MAX_MACRO): MacroBatch[] {
  checkCost(cost);
  checkCap('maxMacro', maxMacro);
  if (!Array.isArray(miniBatches)) throw new PlanError('TESSERA_INVALID_MINI_BATCH', 'interTaskBatching: miniBatches must be an array');
  const seen = new Set<CbQuery>();
  miniBatches.forEach((mb, i) => checkMiniBatch(mb, i, seen));
  const order = miniBatches.map((_, i) => i);
  order.sort((a, b) => miniBatches[a]!.maxLength - miniBatches[b]!.maxLength || a - b);
  const sorted = order.map((i) => miniBatches[i]!);
  return interFromSorted(sorted, cost, maxMacro);
}

function interFromSorted(sorted: readonly MiniBatch[], cost: CostModel, maxMacro: number): MacroBatch[] {
  const M = sorted.length;
  const sizes = new Int32Array(M);
  const lengths = new Float64Array(M);
  for (let i = 0; i < M; i++) {
    sizes[i] = sorted[i]!.queries.length;
    lengths[i] = sorted[i]!.maxLength;
  }
  const ranges = interDp(sizes, lengths, cost, maxMacro, (i) => {
    const mb = sorted[i]!;
    return `mini-batch of task '${mb.task}' (${mb.queries.length} queries, max length ${mb.maxLength})`;
  });
  const out: MacroBatch[] = [];
  for (let r = 0; r < ranges.length; r += 2) {
    const minis = sorted.slice(ranges[r]!, ranges[r + 1]!);
    let size = 0;
    for (const mb of minis) size += mb.queries.length;
    out.push({ miniBatches: minis, maxLength: minis[minis.length - 1]!.maxLength, size });
  }
  return out;
}

/**
 * The Eq. 5 DP over items sorted by ascending length; returns flat [start0, end0, start1, end1, ...] ranges of
 * the macro-batches in ascending order.
 */
function interDp(sizes: Int32Array, lengths: Float64Array, cost: CostModel, maxMacro: number, describe: (i: number) => string): number[] {
  const M = sizes.length;
  const prefix = new Float64Array(M + 1);
  for (let i = 0; i < M; i++) prefix[i + 1] = prefix[i]! + sizes[i]!;
  const state = new Float64Array(M + 1);
  const split = new Int32Array(M + 1);
  let jMin = 1; // the first j whose range j..i fits maxMacro; it only moves forward as i grows
  for (let i = 1; i <= M; i++) {
    const L = lengths[i - 1]!;
    while (jMin <= i && prefix[i]! - prefix[jMin - 1]! > maxMacro) jMin++;
    let best = Infinity;
    let bestJ = -1;
    for (let j = jMin; j <= i; j++) {
      const N = prefix[i]! - prefix[j - 1]!;
      const a = cost.alpha(N, L);
      if (a !== a) throw nanCost(`α(${N}, ${L})`);
      const c = state[j - 1]! + a;
      if (c < best) {
        best = c;
        bestJ = j - 1;
      }
    }
    if (bestJ < 0) {
      throw new PlanError('TESSERA_PLAN_INFEASIBLE',
        `Step 2: every macro-batch ending with the ${describe(i - 1)} costs +∞ under the cost model ` +
        `(maxMacro ${maxMacro}); the α table's cap or range is too small`);
    }
    state[i] = best;
    split[i] = bestJ;
  }
  const ranges: number[] = [];
  for (let i = M; i > 0;) {
    const j = split[i]!;
    ranges.push(i, j); // reversed below into [start, end] pairs
    i = j;
  }
  return ranges.reverse();
}

// ---------------------------------------------------------------------------------------------------------------
// Eq. 3

/** Eq. 3: Σ_i α(N_i, L_i) + Σ_i Σ_j β(pt_ij, n_ij, l_ij), each mini-batch at its own max length. */
export function estimateCost(batches: readonly MacroBatch[], cost: CostModel): CostEstimate {
  checkCost(cost);
  let alpha = 0;
  let beta = 0;
  for (const b of batches) {
    alpha += cost.alpha(b.size, b.maxLength);
    for (const mb of b.miniBatches) beta += cost.beta(mb.petType, mb.queries.length, mb.maxLength);
  }
  return { alpha, beta, total: alpha + beta };
}

// ---------------------------------------------------------------------------------------------------------------
// planBatches

interface Resolved {
  cost: CostModel;
  fixedSize: number;
  /** min(maxMini, maxMacro): a mini-batch larger than a macro-batch could never be placed. */
  maxMini: number;
  maxMacro: number;
  petTypes: Map<string, string>;
  /** By (length, arrival). */
  byLength: Keyed[];
  /** By arrival. */
  byArrival: Keyed[];
  /** Tasks in order of their first arrival. */
  tasks: string[];
  /** Step 1's output (shared by 'cb' and 'beta-only'), computed once. */
  stepOne?: MiniBatch[];
}

/**
 * Plans `queries` with one strategy, or with 'auto' every strategy, keeping the one with the lowest Eq. 3
 * estimate. Every query appears in exactly one mini-batch of one macro-batch (the CbQuery objects are passed
 * through, not copied). Throws PlanError for malformed queries or options, an unknown task, or a cost model that
 * prices the plan at +∞.
 */
export function planBatches(queries: readonly CbQuery[], options: PlanOptions): BatchPlan {
  if (options === null || typeof options !== 'object') throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS', 'planBatches: options must be an object');
  const strategy = options.strategy;
  if (strategy !== 'auto' && !BATCHING_STRATEGIES.includes(strategy)) {
    throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS',
      `planBatches: strategy must be one of 'auto', ${BATCHING_STRATEGIES.map((s) => `'${s}'`).join(', ')}; got ${String(strategy)}`);
  }
  checkCost(options.cost);
  if (typeof options.petTypeOf !== 'function') throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS', 'planBatches: petTypeOf must be a function');
  const maxMini = checkCap('maxMini', options.maxMini ?? DEFAULT_MAX_MINI);
  const maxMacro = checkCap('maxMacro', options.maxMacro ?? DEFAULT_MAX_MACRO);
  const fixedSize = checkCap('fixedSize', options.fixedSize ?? Math.min(DEFAULT_FIXED_SIZE, maxMacro));
  if (fixedSize > maxMacro) {
    throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS', `planBatches: fixedSize (${fixedSize}) must not exceed maxMacro (${maxMacro})`);
  }

  const keyed = keyQueries(queries, 'planBatches');
  const byArrivalOrder = [...keyed].sort(byArrival);
  const petTypes = new Map<string, string>();
  const tasks: string[] = [];
  for (const k of byArrivalOrder) {
    const task = k.q.task;
    if (petTypes.has(task)) continue;
    let petType: unknown;
    try {
      petType = options.petTypeOf(task);
    } catch (cause) {
      throw new PlanError('TESSERA_UNKNOWN_TASK', `planBatches: unknown task '${task}' (query ${describeId(k.q.id)}): petTypeOf threw`, { cause });
    }
    if (typeof petType !== 'string' || petType.length === 0) {
      throw new PlanError('TESSERA_UNKNOWN_TASK', `planBatches: petTypeOf('${task}') must return a non-empty string, got ${String(petType)}`);
    }
    petTypes.set(task, petType);
    tasks.push(task);
  }
  const ctx: Resolved = {
    cost: options.cost, fixedSize, maxMini: Math.min(maxMini, maxMacro), maxMacro, petTypes,
    byLength: keyed.sort(byLength), byArrival: byArrivalOrder, tasks,
  };

  if (strategy !== 'auto') {
    const batches = buildStrategy(strategy, ctx);
    const estimate = estimateCost(batches, ctx.cost);
    if (!(estimate.total < Infinity)) throw unpriceable(strategy, batches, ctx.cost);
    return { strategy, batches, estimate };
  }

  const candidates: Partial<Record<BatchingStrategy, CostEstimate>> = {};
  let chosen: { strategy: BatchingStrategy; batches: MacroBatch[]; estimate: CostEstimate } | null = null;
  let firstFailure: unknown = null;
  for (const s of BATCHING_STRATEGIES) {
    let batches: MacroBatch[];
    try {
      batches = buildStrategy(s, ctx);
    } catch (err) {
      if (err instanceof PlanError && err.code === 'TESSERA_PLAN_INFEASIBLE') {
        firstFailure ??= err;
        continue;
      }
      throw err;
    }
    const estimate = estimateCost(batches, ctx.cost);
    candidates[s] = estimate;
    if (!(estimate.total < Infinity)) {
      firstFailure ??= unpriceable(s, batches, ctx.cost);
      continue;
    }
    // Strict '<' in preference order: an equal estimate keeps the earlier strategy (cb first).
    if (chosen === null || estimate.total < chosen.estimate.total) chosen = { strategy: s, batches, estimate };
  }
  if (chosen === null) throw firstFailure as PlanError;
  return { ...chosen, candidates };
}

function buildStrategy(strategy: BatchingStrategy, ctx: Resolved): MacroBatch[] {
  if (ctx.byLength.length === 0) return [];
  switch (strategy) {
    case 'cb':
      return interFromSorted(sortMinis(stepOne(ctx)), ctx.cost, ctx.maxMacro);
    case 'beta-only':
      return sortMinis(stepOne(ctx)).map((mb) => ({ miniBatches: [mb], maxLength: mb.maxLength, size: mb.queries.length }));
    case 'alpha-only':
      return alphaOnly(ctx);
    case 'fixed':
      return fixed(ctx);
  }
}

/** Step 1 for every task, tasks in order of first arrival, each task's mini-batches ascending. */
function stepOne(ctx: Resolved): MiniBatch[] {
  if (ctx.stepOne !== undefined) return ctx.stepOne;
  const perTask = new Map<string, CbQuery[]>(ctx.tasks.map((t) => [t, []]));
  for (const k of ctx.byLength) perTask.get(k.q.task)!.push(k.q);
  const out: MiniBatch[] = [];
  for (const task of ctx.tasks) {
    for (const mb of intraDp(perTask.get(task)!, task, ctx.petTypes.get(task)!, ctx.cost, ctx.maxMini)) out.push(mb);
  }
  ctx.stepOne = out;
  return out;
}

/** Stable sort by max length: equal lengths keep Step 1's order (task first arrival, then ascending). */
function sortMinis(minis: readonly MiniBatch[]): MiniBatch[] {
  const order = minis.map((_, i) => i);
  order.sort((a, b) => minis[a]!.maxLength - minis[b]!.maxLength || a - b);
  return order.map((i) => minis[i]!);
}

/** Step 2 over single-query mini-batches, then one segment per (macro-batch, task) (the artifact's α-only). */
function alphaOnly(ctx: Resolved): MacroBatch[] {
  const R = ctx.byLength.length;
  const sizes = new Int32Array(R).fill(1);
  const lengths = new Float64Array(R);
  for (let i = 0; i < R; i++) lengths[i] = ctx.byLength[i]!.q.length;
  const ranges = interDp(sizes, lengths, ctx.cost, ctx.maxMacro, (i) => `query ${describeId(ctx.byLength[i]!.q.id)} (length ${lengths[i]})`);
  const out: MacroBatch[] = [];
  for (let r = 0; r < ranges.length; r += 2) out.push(mergeByTask(ctx.byLength.slice(ranges[r]!, ranges[r + 1]!), ctx));
  return out;
}

/** Arrival-order chunks of fixedSize (the last partial chunk kept: every query must be served). */
function fixed(ctx: Resolved): MacroBatch[] {
  const out: MacroBatch[] = [];
  for (let s = 0; s < ctx.byArrival.length; s += ctx.fixedSize) out.push(mergeByTask(ctx.byArrival.slice(s, s + ctx.fixedSize), ctx));
  return out;
}

/**
 * One macro-batch of `rows` with same-task queries merged into one segment (tasks in order of first appearance
 * in `rows`, queries in `rows` order); a segment over maxMini is cut into consecutive chunks of maxMini so the
 * plan stays within the β caps.
 */
function mergeByTask(rows: readonly Keyed[], ctx: Resolved): MacroBatch {
  const groups = new Map<string, CbQuery[]>();
  let maxLength = 0;
  for (const k of rows) {
    let g = groups.get(k.q.task);
    if (g === undefined) groups.set(k.q.task, (g = []));
    g.push(k.q);
    if (k.q.length > maxLength) maxLength = k.q.length;
  }
  const miniBatches: MiniBatch[] = [];
  for (const [task, qs] of groups) {
    for (let s = 0; s < qs.length; s += ctx.maxMini) {
      const chunk = qs.slice(s, s + ctx.maxMini);
      let l = 0;
      for (const q of chunk) if (q.length > l) l = q.length;
      miniBatches.push({ task, petType: ctx.petTypes.get(task)!, queries: chunk, maxLength: l });
    }
  }
  return { miniBatches, maxLength, size: rows.length };
}

// ---------------------------------------------------------------------------------------------------------------
// Validation

function keyQueries(queries: readonly CbQuery[], where: string): Keyed[] {
  if (!Array.isArray(queries)) throw new PlanError('TESSERA_INVALID_QUERY', `${where}: queries must be an array`);
  const ids = new Set<number | string>();
  const out: Keyed[] = new Array<Keyed>(queries.length);
  for (let i = 0; i < queries.length; i++) {
    const q: unknown = queries[i];
    if (q === null || typeof q !== 'object') throw new PlanError('TESSERA_INVALID_QUERY', `${where}: queries[${i}] must be an object`);
    const { id, task, length, arrival } = q as Partial<CbQuery>;
    if (!((typeof id === 'number' && Number.isFinite(id)) || typeof id === 'string')) {
      throw new PlanError('TESSERA_INVALID_QUERY', `${where}: queries[${i}].id must be a string or a finite number, got ${String(id)}`);
    }
    if (typeof task !== 'string' || task.length === 0) {
      throw new PlanError('TESSERA_INVALID_QUERY', `${where}: query ${describeId(id)} (queries[${i}]): task must be a non-empty string, got ${String(task)}`);
    }
    if (typeof length !== 'number' || !Number.isInteger(length) || length < 1) {
      throw new PlanError('TESSERA_INVALID_QUERY', `${where}: query ${describeId(id)} (queries[${i}]): length must be an integer >= 1, got ${String(length)}`);
    }
    if (arrival !== undefined && (typeof arrival !== 'number' || !Number.isFinite(arrival))) {
      throw new PlanError('TESSERA_INVALID_QUERY', `${where}: query ${describeId(id)} (queries[${i}]): arrival must be a finite number, got ${String(arrival)}`);
    }
    if (ids.has(id)) throw new PlanError('TESSERA_DUPLICATE_QUERY', `${where}: query id ${describeId(id)} appears twice (queries[${i}])`);
    ids.add(id);
    out[i] = { q: q as CbQuery, arrival: arrival ?? i, index: i };
  }
  return out;
}

function checkMiniBatch(mb: MiniBatch, i: number, seen: Set<CbQuery>): void {
  const bad = (why: string): PlanError => new PlanError('TESSERA_INVALID_MINI_BATCH', `interTaskBatching: miniBatches[${i}]: ${why}`);
  if (mb === null || typeof mb !== 'object') throw bad('must be an object');
  if (typeof mb.petType !== 'string' || mb.petType.length === 0) throw bad(`petType must be a non-empty string, got ${String(mb.petType)}`);
  if (!Array.isArray(mb.queries) || mb.queries.length === 0) throw bad('queries must be a non-empty array');
  let max = 0;
  for (const q of mb.queries) {
    if (q === null || typeof q !== 'object' || typeof q.length !== 'number' || !Number.isInteger(q.length) || q.length < 1) {
      throw bad(`query ${describeId((q as CbQuery | null)?.id)} must have an integer length >= 1`);
    }
    if (q.task !== mb.task) throw bad(`query ${describeId(q.id)} has task '${q.task}', the mini-batch has '${mb.task}'`);
    if (seen.has(q)) throw bad(`query ${describeId(q.id)} is also in another mini-batch`);
    seen.add(q);
    if (q.length > max) max = q.length;
  }
  if (mb.maxLength !== max) throw bad(`maxLength is ${String(mb.maxLength)} but its longest query has length ${max}`);
}

function checkCost(cost: CostModel): void {
  if (cost === null || typeof cost !== 'object' || typeof cost.alpha !== 'function' || typeof cost.beta !== 'function') {
    throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS', 'cost must be a CostModel (alpha(N, L) and beta(petType, n, l) functions)');
  }
}

function checkCap(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new PlanError('TESSERA_INVALID_PLAN_OPTIONS', `${name} must be an integer >= 1, got ${String(v)}`);
  }
  return v;
}

function nanCost(what: string): CostModelError {
  return new CostModelError('TESSERA_INVALID_COST_MODEL', `cost model returned NaN for ${what}`);
}

function unpriceable(strategy: BatchingStrategy, batches: readonly MacroBatch[], cost: CostModel): PlanError {
  for (let i = 0; i < batches.length; i++) {
    const b = batches[i]!;
    const a = cost.alpha(b.size, b.maxLength);
    if (!(a < Infinity)) {
      return new PlanError('TESSERA_PLAN_INFEASIBLE',
        `planBatches('${strategy}'): macro-batch ${i} (${b.size} queries at length ${b.maxLength}) has α = ${a}; the α table's cap is too small`);
    }
    for (const mb of b.miniBatches) {
      const be = cost.beta(mb.petType, mb.queries.length, mb.maxLength);
      if (!(be < Infinity)) {
        return new PlanError('TESSERA_PLAN_INFEASIBLE',
          `planBatches('${strategy}'): macro-batch ${i}, task '${mb.task}' (${mb.queries.length} queries at length ${mb.maxLength}) ` +
          `has β('${mb.petType}') = ${be}; the β table's cap is too small`);
      }
    }
  }
  return new PlanError('TESSERA_PLAN_INFEASIBLE', `planBatches('${strategy}'): the estimate is not finite`);
}

function describeId(id: unknown): string {
  return typeof id === 'string' ? `'${id}'` : String(id);
}

/**
 * The two latency models of PetS's coordinated batching (pets.md §4): α for the shared model, β for one PET
 * operator invocation. Both are whole-model latencies in the same unit (ms), so Eq. 2 / Eq. 3 sums are
 * meaningful (§11 #3); the DPs themselves would work with mismatched units.
 */
import type { CostTable } from './cost-table.js';
import { CostModelError } from './errors.js';

export interface CostModel {
  /** Shared-model latency of N queries padded to length L (α, whole model). */
  alpha(N: number, L: number): number;
  /** PET-op latency of one mini-batch of n queries of max length l of PET type petType (β, whole model). */
  beta(petType: string, n: number, l: number): number;
}

/** α and β from profiled tables (see `profileCostTables`); an unknown PET type throws TESSERA_PET_UNKNOWN_TYPE. */
export function tableCostModel(alpha: CostTable, beta: ReadonlyMap<string, CostTable> | Readonly<Record<string, CostTable>>): CostModel {
  if (alpha === null || typeof alpha !== 'object' || typeof alpha.lookup !== 'function') {
    throw new CostModelError('TESSERA_INVALID_COST_MODEL', 'tableCostModel: alpha must be a CostTable');
  }
  if (beta === null || typeof beta !== 'object') {
    throw new CostModelError('TESSERA_INVALID_COST_MODEL', 'tableCostModel: beta must be a Map or record of CostTables');
  }
  // Copied into a Map so a record's prototype keys ('constructor', ...) are never taken for PET types.
  const betaTables = new Map<string, CostTable>(beta instanceof Map ? beta : Object.entries(beta));
  for (const [petType, table] of betaTables) {
    if (table === null || typeof table !== 'object' || typeof table.lookup !== 'function') {
      throw new CostModelError('TESSERA_INVALID_COST_MODEL', `tableCostModel: beta['${petType}'] must be a CostTable`);
    }
  }
  return {
    alpha: (N, L) => alpha.lookup(N, L),
    beta: (petType, n, l) => {
      const table = betaTables.get(petType);
      if (table === undefined) throw unknownPetType(petType, betaTables.keys());
      return table.lookup(n, l);
    },
  };
}

export interface AnalyticCostParams {
  /** α = a0 + a1·N·L + a2·N·L²: launch, per-token and attention (quadratic in L) terms. */
  a0: number;
  a1: number;
  a2: number;
  /** β fixed (launch) cost per PET type: β = k[pt] + m[pt]·n·l. */
  k: Readonly<Record<string, number>>;
  /** β per-token cost per PET type; same keys as k. */
  m: Readonly<Record<string, number>>;
  /** β = +∞ when n > maxMini (default: no cap). */
  maxMini?: number;
  /** α = +∞ when N > maxMacro (default: no cap). */
  maxMacro?: number;
}

/**
 * The analytic stand-in for profiled tables (pets.md §10, Fig. 12 row): α(N, L) = a0 + a1·N·L + a2·N·L²,
 * β(pt, n, l) = k_pt + m_pt·n·l, +∞ beyond the caps. With a large k_pt it is "launch-heavy β".
 */
export function analyticCostModel(p: AnalyticCostParams): CostModel {
  if (p === null || typeof p !== 'object') throw new CostModelError('TESSERA_INVALID_COST_MODEL', 'analyticCostModel: params must be an object');
  for (const name of ['a0', 'a1', 'a2'] as const) checkCoefficient(name, p[name]);
  if (p.k === null || typeof p.k !== 'object' || p.m === null || typeof p.m !== 'object') {
    throw new CostModelError('TESSERA_INVALID_COST_MODEL', 'analyticCostModel: k and m must be records from PET type to number');
  }
  const launch = new Map(Object.entries(p.k));
  const perToken = new Map(Object.entries(p.m));
  for (const [pt, v] of launch) {
    checkCoefficient(`k['${pt}']`, v);
    if (!perToken.has(pt)) throw new CostModelError('TESSERA_INVALID_COST_MODEL', `analyticCostModel: k has PET type '${pt}' but m does not`);
  }
  for (const [pt, v] of perToken) {
    checkCoefficient(`m['${pt}']`, v);
    if (!launch.has(pt)) throw new CostModelError('TESSERA_INVALID_COST_MODEL', `analyticCostModel: m has PET type '${pt}' but k does not`);
  }
  const maxMini = checkCap('maxMini', p.maxMini);
  const maxMacro = checkCap('maxMacro', p.maxMacro);
  const { a0, a1, a2 } = p;
  return {
    alpha: (N, L) => {
      checkArgs('alpha', N, L);
      return N > maxMacro ? Infinity : a0 + a1 * N * L + a2 * N * L * L;
    },
    beta: (petType, n, l) => {
      const k = launch.get(petType);
      if (k === undefined) throw unknownPetType(petType, launch.keys());
      checkArgs('beta', n, l);
      return n > maxMini ? Infinity : k + perToken.get(petType)! * n * l;
    },
  };
}

function unknownPetType(petType: string, known: Iterable<string>): CostModelError {
  return new CostModelError('TESSERA_PET_UNKNOWN_TYPE',
    `cost model: no β for PET type '${petType}' (known: ${[...known].map((k) => `'${k}'`).join(', ') || 'none'})`);
}

function checkCoefficient(name: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new CostModelError('TESSERA_INVALID_COST_MODEL', `analyticCostModel: ${name} must be a finite number >= 0, got ${String(v)}`);
  }
}

function checkCap(name: string, v: unknown): number {
  if (v === undefined) return Infinity;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new CostModelError('TESSERA_INVALID_COST_MODEL', `analyticCostModel: ${name} must be an integer >= 1, got ${String(v)}`);
  }
  return v;
}

function checkArgs(which: string, n: number, l: number): void {
  if (!(n >= 0) || !(l >= 0)) {
    throw new CostModelError('TESSERA_INVALID_COST_LOOKUP', `analyticCostModel.${which}: batch and length must be numbers >= 0, got ${n}, ${l}`);
  }
}

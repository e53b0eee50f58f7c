/**
 * Arlo and the baselines of §10.2 / §9-J as policies of the same objects: which runtimes exist, how requests
 * are padded, how the dispatcher picks, how instances are allocated, and how the cluster scales. A server or the
 * simulator builds its estimator, dispatcher, Runtime Scheduler and scaler from one of these, so every scheme
 * runs on the same code paths and differs only where the paper says it does.
 *
 * | scheme  | runtimes                  | dispatch                 | allocation                    | scaling          |
 * |---------|---------------------------|--------------------------|-------------------------------|------------------|
 * | arlo    | the polymorphed lengths   | Algorithm 1              | the allocation program        | target tracking  |
 * | st      | one, padded to the longest| least outstanding        | all on it                     | headroom         |
 * | dt      | one dynamic-shape runtime | least outstanding        | all on it                     | headroom         |
 * | infaas  | the polymorphed lengths   | bin-packing              | proportional to bin work      | headroom         |
 * | ilb     | the polymorphed lengths   | ideal runtime only       | the allocation program        | target tracking  |
 * | ig      | the polymorphed lengths   | least busy of candidates | the allocation program        | target tracking  |
 * | even    | the polymorphed lengths   | Algorithm 1              | ⌊G/I⌋ each (Table 3)          | target tracking  |
 *
 * INFaaS's internals (bin-packing rule, per-variant scaling) are our interpretation (arlo.md §15.16).
 */
import { type Clock, systemClock } from '@tessera/core';

import { type AllocationSolver, EvenSolver, ProportionalSolver, SingleRuntimeSolver } from './allocation.js';
import type { DispatchPolicy } from './dispatcher.js';
import { LengthSchedulerArgumentError } from './errors.js';
import { AutoSolver } from './highs.js';
import { checkRuntimeLengths } from './lengths.js';

export type SchemeName = 'arlo' | 'st' | 'dt' | 'infaas' | 'ilb' | 'ig' | 'even';

export const SCHEMES: readonly SchemeName[] = ['arlo', 'st', 'dt', 'infaas', 'ilb', 'ig', 'even'];

export interface SchedulingPolicy {
  name: SchemeName;
  /** The runtimes' max lengths (one for ST and DT). */
  lengths: number[];
  /** DT: the runtime takes any length unpadded (with slower dynamic-shape kernels); everything else pads. */
  dynamicShape: boolean;
  dispatch: DispatchPolicy;
  /**
   * Makes the allocation solver (a fresh one per scheduler). Its clock is for its time limit and `solveMs`, so the
   * wall clock by default even under simulation, where the period runs on virtual time.
   */
  solver: (clock?: Clock) => AllocationSolver;
  scaling: 'target-tracking' | 'headroom';
}

export interface PolicyOptions {
  /** IG's busyness: raw outstanding (Fig. 4, default) or outstanding / capacity. */
  normalized?: boolean;
  /** Algorithm 1 parameters for the schemes that use it. */
  lambda?: number;
  alpha?: number;
  maxPeek?: number;
}

/** The scheme's policy over the polymorphed `lengths` (ST and DT keep only the longest). */
export function schedulingPolicy(name: SchemeName, lengths: readonly number[], options: PolicyOptions = {}): SchedulingPolicy {
  checkRuntimeLengths(lengths);
  const all = [...lengths];
  const longest = [all[all.length - 1]!];
  const arlo: DispatchPolicy = {
    kind: 'arlo',
    ...(options.lambda === undefined ? {} : { lambda: options.lambda }),
    ...(options.alpha === undefined ? {} : { alpha: options.alpha }),
    ...(options.maxPeek === undefined ? {} : { maxPeek: options.maxPeek }),
  };
  const program = (clock: Clock = systemClock): AllocationSolver => new AutoSolver({ clock });
  switch (name) {
    case 'arlo':
      return { name, lengths: all, dynamicShape: false, dispatch: arlo, solver: program, scaling: 'target-tracking' };
    case 'st':
      return { name, lengths: longest, dynamicShape: false, dispatch: { kind: 'ideal' }, solver: (c) => new SingleRuntimeSolver(c), scaling: 'headroom' };
    case 'dt':
      return { name, lengths: longest, dynamicShape: true, dispatch: { kind: 'ideal' }, solver: (c) => new SingleRuntimeSolver(c), scaling: 'headroom' };
    case 'infaas':
      return { name, lengths: all, dynamicShape: false, dispatch: { kind: 'bin-packing' }, solver: (c) => new ProportionalSolver(c), scaling: 'headroom' };
    case 'ilb':
      return { name, lengths: all, dynamicShape: false, dispatch: { kind: 'ideal' }, solver: program, scaling: 'target-tracking' };
    case 'ig':
      return { name, lengths: all, dynamicShape: false, dispatch: { kind: 'greedy', normalized: options.normalized ?? false }, solver: program, scaling: 'target-tracking' };
    case 'even':
      return { name, lengths: all, dynamicShape: false, dispatch: arlo, solver: (c) => new EvenSolver(c), scaling: 'target-tracking' };
    default:
      throw new LengthSchedulerArgumentError(`unknown scheme "${String(name)}"; expected one of ${SCHEMES.join(', ')}`);
  }
}

/**
 * The length a request of `length` tokens runs at on runtime `runtime` of the policy: the runtime's max length
 * (zero-padding, masked), or the request's own length on DT's dynamic-shape runtime. Longer requests are
 * truncated to the longest runtime.
 */
export function paddedLength(policy: SchedulingPolicy, length: number, runtime: number): number {
  const max = policy.lengths[runtime];
  if (max === undefined) throw new LengthSchedulerArgumentError(`runtime ${runtime} is not one of the policy's ${policy.lengths.length} runtimes`);
  return policy.dynamicShape ? Math.min(length, max) : max;
}

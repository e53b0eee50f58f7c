/**
 * Auto-scaling (arlo.md §8). Arlo's target tracking: add one instance (running the longest runtime) when the p98
 * latency of recently finished requests reaches 95 % of the SLO; every 60 s, release the least busy instance when
 * that p98 is under 50 % of the SLO. The baselines (ST, DT, INFaaS-like) use INFaaS's headroom scaling on
 * utilisation instead. Both only decide; the caller provisions or releases, and the next allocation period uses
 * the new instance count. Time comes from the injected clock.
 */
import { type Clock, systemClock } from '@tessera/core';

import type { InstanceView } from './dispatcher.js';
import { LengthSchedulerArgumentError } from './errors.js';
import { quantileSorted } from './profile.js';

export type ScaleDecision =
  | { action: 'out'; /** Runtime the new instance loads: the longest. */ runtime: number; reason: string }
  | { action: 'in'; /** The instance to release. */ instanceId: string; reason: string };

export interface TargetTrackingOptions {
  sloMs: number;
  /** Index of the longest runtime (new instances run it). */
  longestRuntime: number;
  clock?: Clock;
  /** Scale out at p98 ≥ this × SLO (default 0.95). */
  outAt?: number;
  /** Scale in at p98 < this × SLO (default 0.5). */
  inAt?: number;
  /** Latency percentile tracked (default 0.98). */
  quantile?: number;
  /** Scale-in is considered at most this often (default 60 000 ms). */
  scaleInEveryMs?: number;
  /** "Recent" = finished within this window (default 10 000 ms) … */
  windowMs?: number;
  /** … and among the last this many (default 2 000). */
  windowCount?: number;
  /** No second scale-out within this long of the last (the provisioning delay; default 5 000 ms). */
  cooldownMs?: number;
  minInstances?: number;
  maxInstances?: number;
}

/** Target tracking on tail latency. Feed it every finished request's latency; call `tick` periodically. */
export class TargetTrackingScaler {
  private readonly clock: Clock;
  private readonly sloMs: number;
  private readonly longestRuntime: number;
  private readonly outAt: number;
  private readonly inAt: number;
  private readonly quantile: number;
  private readonly scaleInEveryMs: number;
  private readonly windowMs: number;
  private readonly windowCount: number;
  private readonly cooldownMs: number;
  private readonly minInstances: number;
  private readonly maxInstances: number;
  /** Ring of (finish time, latency). */
  private readonly times: Float64Array;
  private readonly latencies: Float64Array;
  private head = 0;
  private size = 0;
  private lastOut = -Infinity;
  private lastInCheck: number;

  constructor(options: TargetTrackingOptions) {
    if (!(options.sloMs > 0)) throw new LengthSchedulerArgumentError(`sloMs must be > 0, got ${options.sloMs}`);
    this.clock = options.clock ?? systemClock;
    this.sloMs = options.sloMs;
    this.longestRuntime = options.longestRuntime;
    this.outAt = options.outAt ?? 0.95;
    this.inAt = options.inAt ?? 0.5;
    this.quantile = options.quantile ?? 0.98;
    this.scaleInEveryMs = options.scaleInEveryMs ?? 60_000;
    this.windowMs = options.windowMs ?? 10_000;
    this.windowCount = options.windowCount ?? 2000;
    this.cooldownMs = options.cooldownMs ?? 5000;
    this.minInstances = options.minInstances ?? 1;
    this.maxInstances = options.maxInstances ?? Infinity;
    if (!(this.inAt < this.outAt)) throw new LengthSchedulerArgumentError(`inAt (${this.inAt}) must be below outAt (${this.outAt})`);
    if (!Number.isInteger(this.windowCount) || this.windowCount < 1) throw new LengthSchedulerArgumentError(`windowCount must be a positive integer, got ${this.windowCount}`);
    this.times = new Float64Array(this.windowCount);
    this.latencies = new Float64Array(this.windowCount);
    this.lastInCheck = this.clock.now();
  }

  /** A request finished now after `latencyMs`. */
  record(latencyMs: number): void {
    if (!(Number.isFinite(latencyMs) && latencyMs >= 0)) throw new LengthSchedulerArgumentError(`latency must be finite and >= 0, got ${latencyMs}`);
    const at = (this.head + this.size) % this.windowCount;
    this.times[at] = this.clock.now();
    this.latencies[at] = latencyMs;
    if (this.size < this.windowCount) this.size++;
    else this.head = (this.head + 1) % this.windowCount;
  }

  /** The tracked percentile over the recent window, or NaN when nothing finished recently. */
  recentTail(): number {
    const since = this.clock.now() - this.windowMs;
    const xs: number[] = [];
    for (let k = 0; k < this.size; k++) {
      const at = (this.head + k) % this.windowCount;
      if (this.times[at]! >= since) xs.push(this.latencies[at]!);
    }
    xs.sort((a, b) => a - b);
    return quantileSorted(xs, this.quantile);
  }

  /** One decision (or none) given the instances serving now. */
  tick(instances: readonly InstanceView[]): ScaleDecision | null {
    const now = this.clock.now();
    const tail = this.recentTail();
    const count = instances.length;
    if (Number.isFinite(tail) && tail >= this.outAt * this.sloMs && count < this.maxInstances && now - this.lastOut >= this.cooldownMs) {
      this.lastOut = now;
      return { action: 'out', runtime: this.longestRuntime, reason: `p${Math.round(this.quantile * 100)} ${tail.toFixed(1)} ms >= ${this.outAt} x SLO ${this.sloMs} ms` };
    }
    if (now - this.lastInCheck < this.scaleInEveryMs) return null;
    this.lastInCheck = now;
    if (!(Number.isFinite(tail) && tail < this.inAt * this.sloMs) || count <= this.minInstances) return null;
    const victim = leastBusy(instances);
    if (victim === undefined || lastOfLongest(victim, instances, this.longestRuntime)) return null;
    return { action: 'in', instanceId: victim.id, reason: `p${Math.round(this.quantile * 100)} ${tail.toFixed(1)} ms < ${this.inAt} x SLO ${this.sloMs} ms` };
  }
}

/**
 * Whether `victim` is the only one of `instances` on the longest runtime. A scale-in never releases it: that runtime
 * is the one every request can fall back to (the allocation keeps N_I >= 1 for the same reason), and the least busy
 * instance at light load is often that idle long one. A full-size Fig. 8 simulation once released it and stranded
 * every long request.
 */
function lastOfLongest(victim: InstanceView, instances: readonly InstanceView[], longestRuntime: number): boolean {
  return victim.runtime === longestRuntime && !instances.some((v) => v !== victim && v.runtime === longestRuntime);
}

/** The instance with the lowest congestion (outstanding / capacity); ties to the first given. */
export function leastBusy(instances: readonly InstanceView[]): InstanceView | undefined {
  let best: InstanceView | undefined;
  for (const inst of instances) if (best === undefined || inst.outstanding / inst.capacity < best.outstanding / best.capacity) best = inst;
  return best;
}

export interface HeadroomOptions {
  /** Index of the runtime new instances load (the longest; ST and DT have only one). */
  longestRuntime: number;
  clock?: Clock;
  /** Scale out when utilisation > 1 − headroom (default headroom 0.2). */
  headroom?: number;
  /** Scale in when utilisation stays below this (default 0.4) … */
  scaleInBelow?: number;
  /** … for this long (default 60 000 ms). */
  holdMs?: number;
  cooldownMs?: number;
  minInstances?: number;
  maxInstances?: number;
}

/** INFaaS-style headroom scaling for the baselines (thresholds are our choice; the paper gives none). */
export class HeadroomScaler {
  private readonly clock: Clock;
  private readonly longestRuntime: number;
  private readonly headroom: number;
  private readonly scaleInBelow: number;
  private readonly holdMs: number;
  private readonly cooldownMs: number;
  private readonly minInstances: number;
  private readonly maxInstances: number;
  private lowSince: number | null = null;
  private lastAction = -Infinity;

  constructor(options: HeadroomOptions) {
    this.clock = options.clock ?? systemClock;
    this.longestRuntime = options.longestRuntime;
    this.headroom = options.headroom ?? 0.2;
    this.scaleInBelow = options.scaleInBelow ?? 0.4;
    this.holdMs = options.holdMs ?? 60_000;
    this.cooldownMs = options.cooldownMs ?? 5000;
    this.minInstances = options.minInstances ?? 1;
    this.maxInstances = options.maxInstances ?? Infinity;
    if (!(this.headroom > 0 && this.headroom < 1)) throw new LengthSchedulerArgumentError(`headroom must be in (0, 1), got ${this.headroom}`);
  }

  /** `utilization`: busy fraction of the instances over the last interval, in [0, 1]. */
  tick(utilization: number, instances: readonly InstanceView[]): ScaleDecision | null {
    const now = this.clock.now();
    if (utilization < this.scaleInBelow) this.lowSince ??= now;
    else this.lowSince = null;
    if (now - this.lastAction < this.cooldownMs) return null;
    if (utilization > 1 - this.headroom && instances.length < this.maxInstances) {
      this.lastAction = now;
      return { action: 'out', runtime: this.longestRuntime, reason: `utilisation ${utilization.toFixed(2)} > ${1 - this.headroom}` };
    }
    if (this.lowSince !== null && now - this.lowSince >= this.holdMs && instances.length > this.minInstances) {
      const victim = leastBusy(instances);
      if (victim === undefined) return null;
      this.lastAction = now;
      this.lowSince = now;
      if (lastOfLongest(victim, instances, this.longestRuntime)) return null;
      return { action: 'in', instanceId: victim.id, reason: `utilisation below ${this.scaleInBelow} for ${this.holdMs} ms` };
    }
    return null;
  }
}

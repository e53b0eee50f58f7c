/**
 * S-LoRA's Virtual Token Counter (VTC, "Fairness in Serving Large Language Models", Sheng et al., OSDI '24): each
 * tenant has a counter of the service it received, in weighted tokens (input tokens at admission, output tokens as
 * they are generated); admission serves the backlogged tenant with the smallest counter. A tenant that comes back
 * after being idle is lifted to the smallest counter among the active tenants, so idleness banks no credit. The
 * counters of backlogged tenants stay within about one request's weighted tokens of each other (the paper's
 * bound), so one tenant's flood cannot starve another: a light tenant waits behind a few requests, not the flood.
 */
import { InvalidArgumentError } from '@tessera/core';

export type FairnessPolicy = 'fcfs' | 'vtc';
export const FAIRNESS_POLICIES: readonly FairnessPolicy[] = ['fcfs', 'vtc'];

/** Service weights per token (S-LoRA's defaults: an output token costs twice an input token). */
export interface VtcWeights {
  input: number;
  output: number;
}

export const DEFAULT_VTC_WEIGHTS: Readonly<VtcWeights> = { input: 1, output: 2 };

export class VirtualTokenCounter {
  readonly weights: Readonly<VtcWeights>;
  private readonly counters = new Map<string, number>();
  /** Queued + running requests per tenant: a tenant with none is idle. */
  private readonly active = new Map<string, number>();

  constructor(weights: Partial<VtcWeights> = {}) {
    const w = { ...DEFAULT_VTC_WEIGHTS, ...weights };
    for (const [name, value] of Object.entries(w)) {
      if (!Number.isFinite(value) || value < 0) throw new InvalidArgumentError(`VirtualTokenCounter: weight ${name} must be a finite number >= 0, got ${value}`);
    }
    this.weights = w;
  }

  /** The tenant's counter (0 for a tenant never seen). */
  counter(tenant: string): number {
    return this.counters.get(tenant) ?? 0;
  }

  /** A request of the tenant entered the system; an idle tenant is lifted to the smallest active counter. */
  arrive(tenant: string): void {
    const n = this.active.get(tenant) ?? 0;
    if (n === 0) {
      let floor = Infinity;
      for (const [t, count] of this.active) if (count > 0 && t !== tenant) floor = Math.min(floor, this.counter(t));
      if (floor !== Infinity && floor > this.counter(tenant)) this.counters.set(tenant, floor);
    }
    this.active.set(tenant, n + 1);
  }

  /** A request of the tenant left (finished, cancelled, failed, evicted). */
  leave(tenant: string): void {
    const n = this.active.get(tenant) ?? 0;
    if (n <= 1) this.active.delete(tenant);
    else this.active.set(tenant, n - 1);
  }

  /** Input tokens served at an admission. */
  chargeInput(tenant: string, tokens: number): void {
    this.counters.set(tenant, this.counter(tenant) + this.weights.input * tokens);
  }

  /** Output tokens generated. */
  chargeOutput(tenant: string, tokens: number): void {
    this.counters.set(tenant, this.counter(tenant) + this.weights.output * tokens);
  }
}

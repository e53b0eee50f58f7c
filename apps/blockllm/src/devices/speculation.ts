/**
 * Speculative execution across devices (design note §4.5, algorithm 5.8), the server's side: which instances
 * speculate, their surrogates, and the ledger of open speculations. The policy is the serving core's:
 * block-zoo's `selectSpeculation` picks the top fraction of block instances by drain time (never a block that ends
 * a chain, never two adjacent ones, only blocks with a surrogate in the zoo), and its `SpeculationLedger` opens a
 * tag per speculated (sequence, step, position), records the tentative steps after it and verifies the tag at the
 * cosine threshold. The step (DeviceChainExecutor) does the running: the surrogate on X's device before X, the
 * successor's device on the prediction while X runs, and a repair of the rejected rows on X's real output.
 *
 * A surrogate with attention keeps its own K/V, so it runs on every row of its block's batch from a sequence's first
 * step on (`tracks`); sequences that were running before it was deployed are not speculated on (their K/V is not
 * in it). A KV-free surrogate (an FFN block's) can predict for any sequence.
 */
import { attentionLayersOf } from '@tessera/block-zoo/chain';
import { type BlockManifest, type BlockZoo, selectSpeculation, type SpeculationCandidate, SpeculationLedger, type SpeculationStats } from '@tessera/block-zoo';

/** The key a surrogate deployed beside `target` has on its device. */
export function surrogateKey(target: string): string {
  return `${target}~surrogate`;
}

/** Steps between two selections (the design note's "periodic"; the drain times move with the routed sequences). */
export const SPEC_REFRESH_STEPS = 16;

export interface SpeculationOptions {
  /** Cosine of the prediction against the real output at or above which a speculation is accepted (0.95). */
  acceptCosine?: number;
  /** Fraction of block instances that speculate (0.1; at least one instance when any may). */
  fraction?: number;
}

/** A surrogate deployed beside an instance that speculates. */
export interface DeployedSurrogate {
  /** The instance it stands in for, and its own key on the same device. */
  target: string;
  key: string;
  device: string;
  manifest: BlockManifest;
  /** Whether it holds attention (its own K/V), so it must see a sequence from its first step. */
  kv: boolean;
  /** Sequences whose every step so far ran through it (all may be predicted when `kv` is false). */
  tracked: Set<string>;
  /** Its held-out cosine in the zoo (what the selection reports). */
  cosine: number;
}

/** What the set's instances look like to the selection. */
export interface SpeculationView {
  instances: readonly { instance: string; block: string; device: string; pool: string }[];
  /** Σ profiled compute of the queued work of an instance: per-token time × the sequences routed through it. */
  drainMs(instance: string): number;
  /** The chains served (block ids in order), for the adjacency and last-block rules. */
  chains: readonly (readonly string[])[];
}

export class SpeculationControl {
  readonly ledger: SpeculationLedger;
  readonly fraction: number;
  /** By the instance they stand in for. */
  private readonly deployed = new Map<string, DeployedSurrogate>();
  /** Instances whose surrogate did not fit their device: not tried again until the next selection changes. */
  private readonly refused = new Set<string>();
  private lastRefresh = -Infinity;
  /** Rows re-run on the real output after a rejected speculation. */
  repairedRows = 0;

  constructor(
    readonly zoo: BlockZoo,
    options: SpeculationOptions = {},
  ) {
    this.ledger = new SpeculationLedger(options.acceptCosine === undefined ? {} : { acceptCosine: options.acceptCosine });
    this.fraction = options.fraction ?? 0.1;
  }

  /** The surrogate standing in for `instance`, if it speculates. */
  surrogateOf(instance: string): DeployedSurrogate | undefined {
    return this.deployed.get(instance);
  }

  surrogates(): DeployedSurrogate[] {
    return [...this.deployed.values()];
  }

  stats(): SpeculationStats & { repairedRows: number; surrogates: number } {
    return { ...this.ledger.stats(), repairedRows: this.repairedRows, surrogates: this.deployed.size };
  }

  /** Whether the selection is due at this step (every SPEC_REFRESH_STEPS steps, and at the first). */
  due(step: number): boolean {
    return step - this.lastRefresh >= SPEC_REFRESH_STEPS;
  }

  /**
   * The instances that should speculate now (selectSpeculation over the set's instances with a surrogate in the
   * zoo), and the surrogate each would run: the zoo's best by held-out cosine.
   */
  plan(step: number, view: SpeculationView): { instance: string; device: string; surrogate: BlockManifest; cosine: number }[] {
    this.lastRefresh = step;
    const withSurrogate = new Set(view.instances.map((i) => i.block).filter((b) => this.zoo.surrogatesOf(b).length > 0));
    const candidates: SpeculationCandidate[] = view.instances.filter((i) => i.pool === 'shared').map((i) => ({ instance: i.instance, block: i.block, drainMs: view.drainMs(i.instance) }));
    const chosen = selectSpeculation(candidates, view.chains, withSurrogate, this.fraction);
    return chosen.map((c) => {
      const best = this.zoo.surrogatesOf(c.block).sort((a, b) => b.cosine - a.cosine)[0]!;
      return { instance: c.instance, device: view.instances.find((i) => i.instance === c.instance)!.device, surrogate: this.zoo.block(best.surrogate), cosine: best.cosine };
    });
  }

  /** Whether a deploy of `instance`'s surrogate was refused (no room) since the last change. */
  wasRefused(instance: string): boolean {
    return this.refused.has(instance);
  }

  refuse(instance: string): void {
    this.refused.add(instance);
  }

  attach(target: string, device: string, manifest: BlockManifest, cosine: number): DeployedSurrogate {
    const s: DeployedSurrogate = { target, key: surrogateKey(target), device, manifest, kv: attentionLayersOf(manifest.stages ?? []) !== null, tracked: new Set(), cosine };
    this.deployed.set(target, s);
    this.refused.delete(target);
    return s;
  }

  /** Forgets the surrogate of `target` (evicted with it, or no longer chosen); returns it when there was one. */
  detach(target: string): DeployedSurrogate | undefined {
    const s = this.deployed.get(target);
    this.deployed.delete(target);
    this.refused.delete(target);
    return s;
  }

  /** A finished sequence is forgotten by every surrogate. */
  release(id: string): void {
    for (const s of this.deployed.values()) s.tracked.delete(id);
  }

  /**
   * The rows the surrogate runs on in a group of its block: every sequence it tracks, plus those whose first step
   * this is (it sees them from their start). `first`: the sequences starting in this step.
   */
  runsOn(s: DeployedSurrogate, ids: readonly string[], first: ReadonlySet<string>): string[] {
    const out: string[] = [];
    for (const id of ids) {
      if (!s.kv || s.tracked.has(id) || first.has(id)) {
        s.tracked.add(id);
        out.push(id);
      }
    }
    return out;
  }
}

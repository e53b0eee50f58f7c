/**
 * A small real AdapterResidency for tests: it loads PEFT directories with the engine's async reader
 * (loadLoraAdapterAsync) into a map a LoraDelta reads, counts pins, and can hold a load until the test lets it
 * finish, so the order "the load completes between step k and step k + 1" is deterministic.
 */
import { type DecoderConfig, type LoraAdapter, loadLoraAdapterAsync } from '@tessera/engine';
import type { AdapterResidency } from '@tessera/batcher';

export class GatedLoraResidency implements AdapterResidency {
  /** Resident adapters by name: hand this map to a LoraDelta. */
  readonly resident = new Map<string, LoraAdapter>();
  /** Every ensureResident call, in order (a resident adapter's calls included). */
  readonly ensureCalls: string[] = [];
  private readonly dirs: Map<string, string>;
  private readonly base: DecoderConfig;
  private readonly pins = new Map<string, number>();
  private readonly gates = new Map<string, { opened: Promise<void>; open: () => void }>();
  private readonly inFlight = new Map<string, Promise<LoraAdapter>>();

  constructor(base: DecoderConfig, dirs: ReadonlyMap<string, string>) {
    this.base = base;
    this.dirs = new Map(dirs);
  }

  /** Loads of `name` (started now or later) wait until release(name). */
  hold(name: string): void {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    this.gates.set(name, { opened, open });
  }

  release(name: string): void {
    this.gates.get(name)?.open();
    this.gates.delete(name);
  }

  /** Settles when the load of `name` in flight has settled (either way). */
  async settled(name: string): Promise<void> {
    await this.inFlight.get(name)?.then(
      () => undefined,
      () => undefined,
    );
  }

  isResident(name: string): boolean {
    return this.resident.has(name);
  }

  ensureResident(name: string): Promise<LoraAdapter> {
    this.ensureCalls.push(name);
    const have = this.resident.get(name);
    if (have) return Promise.resolve(have);
    let load = this.inFlight.get(name);
    if (!load) {
      load = this.load(name).finally(() => this.inFlight.delete(name));
      this.inFlight.set(name, load);
    }
    return load;
  }

  private async load(name: string): Promise<LoraAdapter> {
    const dir = this.dirs.get(name);
    if (dir === undefined) throw new RangeError(`GatedLoraResidency: no adapter named ${JSON.stringify(name)} is registered`);
    await this.gates.get(name)?.opened;
    const adapter = await loadLoraAdapterAsync(dir, { base: this.base, name });
    this.resident.set(name, adapter);
    return adapter;
  }

  pin(name: string): void {
    if (!this.resident.has(name)) throw new RangeError(`GatedLoraResidency: pin(${name}): not resident`);
    this.pins.set(name, (this.pins.get(name) ?? 0) + 1);
  }

  unpin(name: string): void {
    const n = this.pins.get(name) ?? 0;
    if (n === 0) throw new RangeError(`GatedLoraResidency: unpin(${name}) without a pin`);
    this.pins.set(name, n - 1);
  }

  pinCount(name: string): number {
    return this.pins.get(name) ?? 0;
  }

  /** Drops an adapter from the device; refuses while a request has it pinned. */
  evict(name: string): void {
    if (this.pinCount(name) > 0) throw new RangeError(`GatedLoraResidency: ${name} is pinned`);
    this.resident.get(name)?.dispose();
    this.resident.delete(name);
  }

  dispose(): void {
    for (const a of this.resident.values()) a.dispose();
    this.resident.clear();
  }
}

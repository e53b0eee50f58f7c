/** The shapes every bench shares: what a bench is, what it gets, what it returns, what lands in results/. */
import type { Isa } from '@tessera/native';
import type { Row, TableSpec } from './table.js';

/** Machine limits measured by the roofline bench (or a quick probe of it). Bandwidths in GB/s (1e9 bytes). */
export interface RooflineSummary {
  /** STREAM triad a = b + s*c, counted as 12 bytes per element, all kernel threads / one thread. */
  triadGBs: number;
  triadGBs1t: number;
  /** Read-only streaming (a sum over one large array), 4 bytes per element. */
  readGBs: number;
  readGBs1t: number;
  /** Peak f32 FMA throughput of the best ISA (an FMA counts 2 flops). */
  peakGflops: number;
  peakGflops1t: number;
  isa: Isa;
  threads: number;
  /** Size of each of the three triad arrays. */
  arrayMiB: number;
  measuredAt: string;
  /** Where these numbers come from: the roofline bench's saved result, a quick probe now, or this very run. */
  source: 'roofline.json' | 'quick probe' | 'this run';
}

export interface MachineInfo {
  cpuModel: string;
  /** Logical CPUs the OS reports. */
  cores: number;
  /** Kernel threads the bench ran with. */
  threads: number;
  isa: Isa | null;
  bestIsa: Isa | null;
  features: Record<string, boolean>;
  totalMemoryGiB: number;
  /** Size of the largest CPU cache (Linux sysfs), or null where unknown: data under it is not a DRAM stream. */
  lastLevelCacheMiB: number | null;
  node: string;
  os: string;
  date: string;
  roofline: RooflineSummary | null;
}

/** The JSON written to results/<name>.json. */
export interface BenchResult {
  name: string;
  machine: MachineInfo;
  params: Record<string, unknown>;
  rows: Row[];
  /** Headline numbers (names say what is divided by what); what CI or a README quotes. */
  ratios: Record<string, number>;
}

/** What a bench's run() returns; the CLI adds the machine block, prints and saves. */
export interface BenchOutput {
  params: Record<string, unknown>;
  rows: Row[];
  ratios: Record<string, number>;
  table: TableSpec;
  /** A standalone SVG document (see svg.ts). */
  svg: string;
  /** Benches with several figures: more tables, printed after `table`. */
  moreTables?: TableSpec[];
  /** More charts, written as results/<name>-<key>.svg. */
  moreSvgs?: Record<string, string>;
  /** Set by the roofline bench: its own measurement becomes machine.roofline. */
  roofline?: RooflineSummary;
}

export interface BenchContext {
  quick: boolean;
  /** Kernel threads in use (the ORT comparison uses the same count). */
  threads: number;
  /** Progress lines (stderr, so --json output stays clean). */
  log(message: string): void;
  /** The machine limits: a recent results/roofline.json of this machine, else a quick probe (cached). */
  roofline(): Promise<RooflineSummary>;
}

/** A bench module's export; its name and one-line summary are listed in registry.ts. */
export interface Bench {
  name: string;
  run(ctx: BenchContext): Promise<BenchOutput>;
}

/**
 * The layers of ARCHITECTURE.md as data. A package may depend at run time only on packages of a lower rank;
 * policy packages depend on nothing but @tessera/core and each other, so the same objects run under the real
 * clock in the servers and under simulated time in `@tessera/sim`, and they never touch a tensor.
 */

/** Rank of each package in the stack (lower = further down). Packages not listed (bench, docs, test-utils, tooling) sit outside it. */
export const LAYER_RANK: Readonly<Record<string, number>> = {
  '@tessera/core': 0,
  '@tessera/native': 1,
  '@tessera/engine': 2,
  '@tessera/sgmv-kernel': 3,
  '@tessera/pet-ops': 3,
  // Policies and stores: pure TS on core.
  '@tessera/batcher': 4,
  '@tessera/adapter-swap': 4,
  '@tessera/length-scheduler': 4,
  '@tessera/plot-store': 4,
  '@tessera/block-zoo': 4,
  '@tessera/cluster': 5,
  // Beside the stack: drives cluster's scheduler and the batchers under a virtual clock.
  '@tessera/sim': 6,
  '@tessera/server-kit': 7,
  '@tessera/punica': 8,
  '@tessera/pets': 8,
  '@tessera/hmi': 8,
  '@tessera/arlo': 8,
  '@tessera/blockllm': 8,
  // The `tessera` command: runs the servers (by their package, loaded on demand), the generator and the trainer.
  '@tessera/cli': 9,
};

/** Ranks whose packages are siblings and may use each other: the multi-tenant operators, and the policies. */
export const SIBLING_RANKS: ReadonlySet<number> = new Set([3, 4]);

/** What no policy may reach at run time. */
export const COMPUTE_PACKAGES: ReadonlySet<string> = new Set(['@tessera/native', '@tessera/engine']);

export interface PolicyEntry {
  /** The package the policy belongs to. */
  package: string;
  /** Source files (relative to the package directory) whose run-time import graph must not reach the compute packages. */
  entries: readonly string[];
  /** True when the whole package is a policy (its manifest may not list a compute package as a dependency). */
  wholePackage: boolean;
}

/**
 * The policy packages and entry points of the rule. Packages not yet in the repository (the coming
 * length-scheduler, plot-store, block-zoo) are checked as soon as they exist.
 */
export const POLICIES: readonly PolicyEntry[] = [
  { package: '@tessera/core', entries: ['src/index.ts'], wholePackage: true },
  { package: '@tessera/batcher', entries: ['src/index.ts'], wholePackage: true },
  { package: '@tessera/adapter-swap', entries: ['src/index.ts'], wholePackage: true },
  { package: '@tessera/sim', entries: ['src/index.ts'], wholePackage: true },
  // The whole host layer: the engine loop takes its runner by injection, so cluster needs no engine at run time.
  { package: '@tessera/cluster', entries: ['src/index.ts'], wholePackage: true },
  { package: '@tessera/length-scheduler', entries: ['src/index.ts'], wholePackage: true },
  { package: '@tessera/plot-store', entries: ['src/index.ts', 'src/file/index.ts'], wholePackage: false },
  { package: '@tessera/block-zoo', entries: ['src/planner/index.ts'], wholePackage: false },
];

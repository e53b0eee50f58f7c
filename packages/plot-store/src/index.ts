/**
 * @tessera/plot-store: HMI's precomputed lookup table (PLOT). This entry is the pure-TypeScript policy half
 * (`./policy/`: keys, the index and value-store interfaces, α-coverage, the version tree). The native lookup
 * (`NativePlotIndex`, the fused lookup → gather → aggregate call) is the `./native` entry, the value file the
 * `./file` entry and the window-mode builder the `./build` entry (it runs the engine).
 */
export * from './policy/index.js';
// A seeded synthetic domain corpus (Zipfian streams with domain phrases) for tests, demos and benches.
export { type ZipfCorpusOptions, zipfCorpus } from './corpus/zipf.js';

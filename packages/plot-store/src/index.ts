/**
 * @tessera/plot-store: HMI's precomputed lookup table (PLOT). This entry holds the pure-TypeScript policy half
 * (`./policy/`: keys, the index and value-store interfaces, α-coverage, the version tree) and the native lookup
 * (`./native/`: `NativePlotIndex` and the fused lookup → gather → aggregate call). The value file is the `./file`
 * entry and the window-mode builder the `./build` entry (it runs the engine).
 */
export * from './policy/index.js';
export * from './native/index.js';

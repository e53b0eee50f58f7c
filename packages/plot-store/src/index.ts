/**
 * @tessera/plot-store: HMI's precomputed lookup table (PLOT). Today the whole surface is the pure-TypeScript policy
 * half (`./policy/`); the window-mode builder, the mmap-able value file and the native fused lookup come later and
 * implement the same `PlotIndex` / `PlotValueStore` interfaces.
 */
export * from './policy/index.js';
export * from './native/index.js';

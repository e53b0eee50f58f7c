// One module per kernel group; each validates shapes and dtypes before calling the addon.
export * from './gemm.js';
export * from './elementwise.js';
export * from './norm.js';
export * from './gather.js';
export * from './rope.js';
export * from './attention.js';
export * from './sgmv.js';
export * from './pet.js';
export * from './backward.js';
export * from './optim.js';
export * from './probe.js';
export * from './q8.js';
export * from './plot.js';

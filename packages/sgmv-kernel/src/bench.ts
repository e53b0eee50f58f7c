/**
 * `@tessera/sgmv-kernel/bench`: the material of Punica's operator benchmarks (§9.2–9.4), kept off the main entry so
 * a server that imports the kernels does not carry it: the Loop / Gather-BMM / BMM baselines, the popularity
 * generators (Distinct, Uniform, Zipf-1.5, Identical, Skewed) and the roofline cost of each operator.
 */
export {
  type BmmOptions,
  type GatheredLoraWeights,
  type LoopOptions,
  type LoraWeightTable,
  bmm,
  gatherBmm,
  gatherLoraWeights,
  loraLoop,
  stackLoraWeights,
  tableViews,
} from './baselines.js';
export {
  DEFAULT_ZIPF_ALPHA,
  PAPER_POPULARITIES,
  type PopularityName,
  assignAdapters,
  distinct,
  identical,
  indptrFromSizes,
  popularity,
  skewed,
  uniform,
  zipf,
} from './workloads.js';
export { type KernelCost, type SgmvCostInput, addLoraCost, gatherBmmCost, gatherBmmExtraElements, rooflineBound, sgmvCost } from './roofline.js';

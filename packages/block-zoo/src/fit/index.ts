/**
 * @tessera/block-zoo/fit — the zoo's numerical fits on host float64 weights: the logit-lens equivalence score
 * (design note §3.3 / 5.2) with the §8.1 peaky-fixture and negative-control rules, ridge-regression stitches
 * (§3.4 / 5.3), and surrogates by structured pruning with least-squares recovery (§3.5). Weights come from HF
 * Llama directories through @tessera/engine's formats.
 */
export { type Mat, choleskySolve, cosine, mat, matmul, matmulT, meanRowCosine, ridge, transpose, vstack } from './linalg.js';
export {
  attentionContext,
  embed,
  ffnActivations,
  headLogits,
  hiddenStates,
  type LayerTrace,
  layerTrace,
  llamaLayerNames,
  type LlamaWeights,
  loadLlamaWeights,
  logitLens,
  rmsNorm,
  runLayers,
  softmaxRows,
  weight,
} from './llama.js';
export { type CalibrationData, calibrationHash, checkNegativeControl, groupScores, layerScores, logitStd, vocabCosine } from './equivalence.js';
export { applyStitch, type FittedStitch, fitStitch, positionFeature, type StitchPoint, stitchedCosine, stitchTensor } from './stitch.js';
export {
  buildComponentSurrogate,
  buildSurrogate,
  runAttentionHalf,
  runComponentSurrogate,
  runFfnHalf,
  runSurrogate,
  type Surrogate,
  type SurrogateComponent,
  type SurrogateOptions,
} from './surrogate.js';

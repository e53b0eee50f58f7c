/**
 * @tessera/sgmv-kernel: Punica's SGMV for Tessera. Many LoRA adapters served in one batch: rows grouped into
 * segments by adapter, each projection's LoRA add-on done by two kernel launches (shrink, expand) for the whole
 * batch, on the native kernels of @tessera/native.
 *
 *   ops.ts        sgmvShrinkSegments / sgmvExpandSegments / bgmvShrinkRows / bgmvExpandRows over a SegmentLayout,
 *                 a host indptr or a tensor; addLora
 *   delta.ts      SgmvLoraDelta: the engine ModelDelta that applies LoRA at every hook site with SGMV
 *   weights.ts    PEFT adapter → SGMV layout (A [L, r, in], B [L, r, out] with the scale folded in), upload
 *   source.ts     loraAdapterSource: the disk → host → device source for an adapter cache
 *   reference.ts  float64 reference of shrink, expand, addLora and BGMV (the test oracle)
 *   bench.ts      the `@tessera/sgmv-kernel/bench` entry: what benchmarks need and servers do not —
 *     baselines.ts  Loop, Gather-BMM, Gather and BMM: the paper's operator baselines
 *     workloads.ts  the popularity generators (distinct, uniform, zipf, identical, skewed) and request assignment
 *     roofline.ts   FLOP / bytes / arithmetic intensity of SGMV, the LoRA add-on and Gather-BMM
 *   errors.ts     UnknownAdapterError, UnsupportedAdapterError
 */
export { UnknownAdapterError, UnsupportedAdapterError } from './errors.js';
export {
  type AddLoraOptions,
  type ExpandOptions,
  type RowIndex,
  type Segments,
  addLora,
  addLoraBgmv,
  bgmvExpandRows,
  bgmvShrinkRows,
  hostIndptr,
  rowIndexFromSegments,
  sgmvExpandSegments,
  sgmvShrinkSegments,
  zeroFill,
} from './ops.js';
export { SgmvLoraDelta, type SgmvLoraDeltaOptions } from './delta.js';
export {
  type HostLoraProjection,
  type HostLoraWeights,
  type LoraProjectionTensors,
  type LoraSite,
  LoraWeightSet,
  loraSites,
  packLoraForSgmv,
  readLoraForSgmv,
} from './weights.js';
export { type AdapterSourceLike, loraAdapterSource } from './source.js';
export {
  type HostMatrix,
  type HostWeightStack,
  type WritableArray,
  referenceAddLora,
  referenceBgmvExpand,
  referenceBgmvShrink,
  referenceExpand,
  referenceShrink,
} from './reference.js';

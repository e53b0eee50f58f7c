/** The seven PET operators and the pieces they share. */
export { AdapterOperator, ADAPTER_ACTIVATIONS, adapterModules, adapterTensorNames } from './adapter.js';
export { BitFitOperator } from './bitfit.js';
export { DiffOperator, diffTensorNames } from './diff.js';
export { MaskBertOperator, maskTensorName, maskedOutCsr } from './maskbert.js';
export { DEFAULT_PET_LORA_TARGETS, LoraOperator, loraModules, loraScale, loraTargets, loraTensorNames } from './lora.js';
export { PrefixOperator, prefixTensorNames } from './prefix.js';
export { StandardOperator } from './standard.js';
export {
  ALLOCATION_GRANULE,
  BasePetOperator,
  type ConfigValidatingOperator,
  type DeviceAdapter,
  type DeviceCsr,
  type DeviceLayerNorm,
  DeviceTensors,
  type LinearModuleOps,
  LoadedPetTask,
  type PetBody,
  allocationBytes,
  headSpecs,
  isConfigValidating,
  taskNormSpecs,
} from './base.js';
export { type OpCost, adapterCost, biasCost, csrCost, layerNormCost, loraCost, prefixCost } from './cost.js';
export { LINEAR_SLICES, type LinearModuleInfo, type LinearSlice, type NormModuleInfo, headTensorNames, linearModules, normModules, selfAttentionModule, siteOfSlice } from './modules.js';
export { checkCsr, maskBit, maskRowBytes } from './validate.js';

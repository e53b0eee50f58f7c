/**
 * @tessera/block-zoo/chain — chains of blocks executed on the staged engine (design note §4.1–4.2): each block runs
 * `embed` / `layers(a, b)` / the half-layer `attention(l)` and `ffn(l)` / `head` of @tessera/engine's decoder over
 * its own tensors from the DevicePool (shared tensors once) with a KV cache of its own; a fine-tune's delta runs on
 * the block that holds it (LoRA as the engine's LoraDelta or merged, BitFit, bottleneck adapters, prefix K/V);
 * sequences of several applications run through a block they share in one batch.
 */
export { attentionLayersOf, blockKvCache, BlockRuntime, type BlockRuntimeOptions, type LoraMode, variantSignature } from './block.js';
export {
  type BlockRun,
  ChainExecutor,
  type ChainExecutorOptions,
  type ChainGenerateRequest,
  type ChainGenerateResult,
  type ChainSequence,
  type ChainStepOptions,
} from './executor.js';
export {
  AdapterDelta,
  BitFitDelta,
  type BottleneckAdapter,
  type LayerPrefix,
  loraConfigOf,
  loraScale,
  loraWeightsOf,
  prefixViews,
  writePrefixKv,
} from './pe-deltas.js';

/**
 * The contracts of @tessera/pet-ops: PET types, their parameter files, the shared model, loaded tasks and the
 * operator interface every PET type implements (pets.md §2.6: input-side, output-side, epilogue and attention hooks,
 * a parameter layout and analytic cost).
 */
import type { AttentionPrefix, EncoderConfig, EncoderLinearSite, EncoderModel, EncoderNormSite, SiteOutput, TextTokenizer } from '@tessera/engine';
import type { Backend, PetOp, PetRows, Tensor } from '@tessera/native';
import type { LoraWeightSet } from '@tessera/sgmv-kernel';

/**
 * The PET types. The paper's four (Adapter, MaskBert, Diff-Pruning, BitFit), STANDARD (the plain shared model with a
 * task head), and two extensions the paper names (§8): LoRA (run with sgmv-kernel) and prefix-tuning (attention hook).
 */
export type PetType = 'adapter' | 'maskbert' | 'diff' | 'bitfit' | 'lora' | 'prefix' | 'standard';
export const PET_TYPES: readonly PetType[] = ['adapter', 'maskbert', 'diff', 'bitfit', 'lora', 'prefix', 'standard'];

/** A host tensor of a PET parameter file. */
export interface HostTensor {
  readonly dtype: 'f32' | 'i32' | 'u8';
  readonly shape: readonly number[];
  readonly data: Float32Array | Int32Array | Uint8Array;
}

/**
 * A task's hyperparameters. Stored as JSON in the parameter file's `__metadata__` (key `pet_config`), next to
 * `format: "tessera-pet"`, `format_version` and `pet_type`.
 */
export interface PetConfig {
  /** The task's labels; their count is the head's output size. */
  readonly labels: readonly string[];
  /** Adapter: bottleneck width d_m (paper: 64 at hidden 768, i.e. hidden / 12). */
  readonly bottleneck?: number;
  /** Adapter: activation of the bottleneck (default 'gelu', the erf form). */
  readonly activation?: 'gelu' | 'gelu_tanh';
  /** LoRA: rank and alpha (scale = alpha / rank) and the HF module names adapted ('query', 'value', …). */
  readonly rank?: number;
  readonly alpha?: number;
  readonly targetModules?: readonly string[];
  /** Prefix-tuning: prefix length p per layer. */
  readonly prefixLength?: number;
}

/** One task's parameters in host memory: exactly what its parameter file holds. */
export interface PetParams {
  readonly type: PetType;
  readonly config: PetConfig;
  /** Tensors by name, in the type's documented layout (see each operator's `layout`). */
  readonly tensors: ReadonlyMap<string, HostTensor>;
}

/** One entry of a PET type's documented tensor layout. */
export interface PetTensorSpec {
  /** Full tensor name, e.g. `bert.encoder.layer.0.attention.self.query.delta.values`. */
  readonly name: string;
  readonly dtype: HostTensor['dtype'];
  /** The shape; -1 marks a data-dependent dimension (a CSR matrix's nnz). */
  readonly shape: readonly number[];
  /** Optional tensors may be absent (e.g. a task LayerNorm); absent means "use the shared one". */
  readonly optional?: boolean;
  readonly description: string;
}

/** The shared pre-trained encoder every task of one tag derives from. Loaded once, whatever the task count. */
export interface SharedModel {
  readonly tag: string;
  readonly config: EncoderConfig;
  readonly model: EncoderModel;
  readonly tokenizer: TextTokenizer | null;
  /** Device bytes of the shared weights (counted once against the budget). */
  readonly bytes: number;
  /** A host f32 copy of one shared weight by HF name, read from the device once and cached (MaskBert's S = W ⊙ M̄). */
  hostWeight(name: string): Float32Array;
}

/** Where a PET type hooks into the encoder. */
export interface PetHooks {
  /** Linear sites whose input x feeds a task term added into the output (SpMM, LoRA). */
  readonly input: readonly EncoderLinearSite[];
  /** Linear sites whose output y a task op rewrites (Adapter at attn_out and ffn_out). */
  readonly output: readonly EncoderLinearSite[];
  /** Sites whose bias (linear) or LayerNorm (norm) the task overrides (BitFit, Diff-Pruning's bias, task LayerNorms). */
  readonly epilogue: readonly (EncoderLinearSite | EncoderNormSite)[];
  /** Adds keys/values to attention (prefix-tuning). */
  readonly attention: boolean;
}

/** A linear site as one mini-batch of a task sees it: the site's tensors and the mini-batch's rows. */
export interface LinearSiteContext {
  readonly layer: number;
  readonly site: EncoderLinearSite;
  /** f32 [rows, in]: the site's input (read only). */
  readonly x: Tensor;
  /** The site's output slices (query/key/value for qkv), each f32 [rows, out], shared GEMM + shared bias done. */
  readonly outputs: readonly SiteOutput[];
  readonly rows: PetRows;
}

/** A LayerNorm site (post-LN: after attention, after the FFN) as one mini-batch sees it. */
export interface NormSiteContext {
  readonly layer: number;
  readonly site: EncoderNormSite;
  /** f32 [rows, hidden]: residual + sublayer output, the norm's input (read only). */
  readonly x: Tensor;
  /** f32 [rows, hidden]: the shared LayerNorm's output; a task LayerNorm rewrites its rows. */
  readonly y: Tensor;
  readonly rows: PetRows;
}

/** A task's parameters resident on the device, ready to run. */
export interface LoadedPet {
  readonly type: PetType;
  readonly config: PetConfig;
  /** Device bytes of its tensors: the PET bytes counted against the budget, per task. */
  readonly bytes: number;
  /**
   * The native ops one mini-batch runs at a linear site, in the fixed epilogue order of pets.md §3.9: input-side
   * term (SpMM), bias override, output-side op (adapter). Empty when the type does nothing at this site.
   */
  linearOps(ctx: LinearSiteContext): PetOp[];
  /** The task LayerNorm op at a norm site, or empty (shared LayerNorm). */
  normOps(ctx: NormSiteContext): PetOp[];
  /** LoRA only: the weights in SGMV layout; the engine runs all LoRA segments of a site in one SGMV pair. */
  readonly lora: LoraWeightSet | null;
  /** Prefix-tuning only: the layer's prefix keys/values. */
  attentionPrefix(layer: number): AttentionPrefix | null;
  /** The task's classification head over the pooled [CLS] output: weight f32 [numLabels, hidden], bias f32 [numLabels]. */
  readonly head: { readonly weight: Tensor; readonly bias: Tensor };
  /** Analytic FLOPs and bytes of all this task's PET work over the whole model for `tokens` rows (Algorithm 2). */
  cost(tokens: number): { flops: number; bytes: number };
  dispose(): void;
}

/** One PET type in the registry (pets.md §2.5: a type, its parameter layout, its loader, its operator). */
export interface PetOperator {
  readonly type: PetType;
  readonly hooks: PetHooks;
  /** The documented tensor layout of a task of this type for a shared model. */
  layout(config: EncoderConfig, pet: PetConfig): PetTensorSpec[];
  /** Checks the parameters against the shared model; throws PetShapeError naming the offending tensor. */
  validate(shared: SharedModel, params: PetParams): void;
  /** Uploads the parameters, deriving what runs (MaskBert: S = W ⊙ M̄ as CSR; Diff-Pruning: b + b_t). */
  load(shared: SharedModel, params: PetParams, backend: Backend): LoadedPet;
  /** Bytes the parameter file's tensors take (compressed storage: bit-packed masks, CSR). */
  storedBytes(params: PetParams): number;
}

/**
 * PEFT LoRA adapters: `adapter_config.json` + `adapter_model.safetensors` (tensor names from models/names.ts).
 */

/** Our view of a PEFT LoraConfig (adapter_config.json). */
export interface LoraAdapterConfig {
  /** r: the default rank. */
  r: number;
  /** lora_alpha: the default alpha; scale = alpha / r (alpha / sqrt(r) with useRslora). */
  loraAlpha: number;
  /** target_modules: module-name suffixes (a list) or one regex that must match the full module name (a string). */
  targetModules: string[] | string;
  /** fan_in_fan_out: the base layer stores its weight [in, out] (GPT-2 Conv1D). PEFT resets it to false for nn.Linear. */
  fanInFanOut: boolean;
  /** bias: which biases the adapter trained and saved ('none' | 'all' | 'lora_only'). */
  bias: 'none' | 'all' | 'lora_only';
  /** rank_pattern: module-name pattern → rank, overriding r. */
  rankPattern: Record<string, number>;
  /** alpha_pattern: module-name pattern → alpha, overriding lora_alpha. */
  alphaPattern: Record<string, number>;
  /** use_rslora */
  useRslora: boolean;
  /** base_model_name_or_path */
  baseModelNameOrPath: string | null;
  /** task_type, e.g. 'CAUSAL_LM' or 'SEQ_CLS'. */
  taskType: string | null;
  /** modules_to_save (e.g. a classifier head saved in full). */
  modulesToSave: string[] | null;
}

/** The adapter_config.json object PEFT writes for this config. */
export function toPeftConfigJson(c: LoraAdapterConfig): Record<string, unknown> {
  return {
    peft_type: 'LORA',
    auto_mapping: null,
    base_model_name_or_path: c.baseModelNameOrPath,
    revision: null,
    task_type: c.taskType,
    inference_mode: true,
    r: c.r,
    target_modules: c.targetModules,
    lora_alpha: c.loraAlpha,
    lora_dropout: 0.0,
    fan_in_fan_out: c.fanInFanOut,
    bias: c.bias,
    use_rslora: c.useRslora,
    modules_to_save: c.modulesToSave,
    init_lora_weights: true,
    layers_to_transform: null,
    layers_pattern: null,
    rank_pattern: c.rankPattern,
    alpha_pattern: c.alphaPattern,
    megatron_config: null,
    megatron_core: 'megatron.core',
    loftq_config: {},
    use_dora: false,
    layer_replication: null,
  };
}

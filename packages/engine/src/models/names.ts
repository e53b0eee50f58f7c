/**
 * Hugging Face tensor and module names for both families, in one place: the loader, the generator, the PEFT
 * adapter code and the ONNX exporter all spell them from here.
 */
import type { DecoderConfig, EncoderConfig } from '../config.js';

/** Prefix of the BERT body: 'bert.' in BertForSequenceClassification, '' in a bare BertModel. */
export function encoderPrefix(config: Pick<EncoderConfig, 'architecture'>): string {
  return config.architecture === 'BertForSequenceClassification' ? 'bert.' : '';
}

/** Module (not tensor) names of the encoder's linears in layer i, by hook site and slice. */
export function encoderLinearModules(config: Pick<EncoderConfig, 'architecture'>, i: number) {
  const l = `${encoderPrefix(config)}encoder.layer.${i}`;
  return {
    query: `${l}.attention.self.query`,
    key: `${l}.attention.self.key`,
    value: `${l}.attention.self.value`,
    attn_out: `${l}.attention.output.dense`,
    ffn_in: `${l}.intermediate.dense`,
    ffn_out: `${l}.output.dense`,
  } as const;
}

/** Module names of the encoder's LayerNorms in layer i (weight/bias are `${name}.weight` / `${name}.bias`). */
export function encoderNormModules(config: Pick<EncoderConfig, 'architecture'>, i: number) {
  const l = `${encoderPrefix(config)}encoder.layer.${i}`;
  return { attn_ln: `${l}.attention.output.LayerNorm`, ffn_ln: `${l}.output.LayerNorm` } as const;
}

/** The encoder's non-layer modules. */
export function encoderTopModules(config: Pick<EncoderConfig, 'architecture'>) {
  const p = encoderPrefix(config);
  return {
    wordEmbeddings: `${p}embeddings.word_embeddings`,
    positionEmbeddings: `${p}embeddings.position_embeddings`,
    tokenTypeEmbeddings: `${p}embeddings.token_type_embeddings`,
    embeddingsNorm: `${p}embeddings.LayerNorm`,
    pooler: `${p}pooler.dense`,
    classifier: 'classifier',
  } as const;
}

/** Every tensor a checkpoint of this encoder holds, with its shape ([out, in] for Linear weights). */
export function encoderTensorShapes(config: EncoderConfig): Map<string, number[]> {
  const h = config.hiddenSize;
  const shapes = new Map<string, number[]>();
  const top = encoderTopModules(config);
  shapes.set(`${top.wordEmbeddings}.weight`, [config.vocabSize, h]);
  shapes.set(`${top.positionEmbeddings}.weight`, [config.maxPositions, h]);
  shapes.set(`${top.tokenTypeEmbeddings}.weight`, [config.typeVocabSize, h]);
  shapes.set(`${top.embeddingsNorm}.weight`, [h]);
  shapes.set(`${top.embeddingsNorm}.bias`, [h]);
  for (let i = 0; i < config.numLayers; i++) {
    const lin = encoderLinearModules(config, i);
    for (const name of [lin.query, lin.key, lin.value, lin.attn_out]) {
      shapes.set(`${name}.weight`, [h, h]);
      shapes.set(`${name}.bias`, [h]);
    }
    shapes.set(`${lin.ffn_in}.weight`, [config.intermediateSize, h]);
    shapes.set(`${lin.ffn_in}.bias`, [config.intermediateSize]);
    shapes.set(`${lin.ffn_out}.weight`, [h, config.intermediateSize]);
    shapes.set(`${lin.ffn_out}.bias`, [h]);
    const ln = encoderNormModules(config, i);
    for (const name of [ln.attn_ln, ln.ffn_ln]) {
      shapes.set(`${name}.weight`, [h]);
      shapes.set(`${name}.bias`, [h]);
    }
  }
  if (config.architecture === 'BertForSequenceClassification') {
    shapes.set(`${top.pooler}.weight`, [h, h]);
    shapes.set(`${top.pooler}.bias`, [h]);
    shapes.set(`${top.classifier}.weight`, [config.numLabels, h]);
    shapes.set(`${top.classifier}.bias`, [config.numLabels]);
  }
  return shapes;
}

/** Module names of the decoder's linears in layer i, by hook site. */
export function decoderLinearModules(i: number) {
  const l = `model.layers.${i}`;
  return {
    q: `${l}.self_attn.q_proj`,
    k: `${l}.self_attn.k_proj`,
    v: `${l}.self_attn.v_proj`,
    o: `${l}.self_attn.o_proj`,
    gate: `${l}.mlp.gate_proj`,
    up: `${l}.mlp.up_proj`,
    down: `${l}.mlp.down_proj`,
  } as const;
}

/** Module names of the decoder's RMSNorms in layer i. */
export function decoderNormModules(i: number) {
  const l = `model.layers.${i}`;
  return { input_norm: `${l}.input_layernorm`, post_attn_norm: `${l}.post_attention_layernorm` } as const;
}

export const decoderTopModules = {
  embedTokens: 'model.embed_tokens',
  finalNorm: 'model.norm',
  lmHead: 'lm_head',
} as const;

/** Every tensor a checkpoint of this decoder holds, with its shape. No biases (Llama has none). */
export function decoderTensorShapes(config: DecoderConfig): Map<string, number[]> {
  const { hiddenSize: h, headDim: d, numHeads, numKvHeads, intermediateSize: f } = config;
  const shapes = new Map<string, number[]>();
  shapes.set(`${decoderTopModules.embedTokens}.weight`, [config.vocabSize, h]);
  for (let i = 0; i < config.numLayers; i++) {
    const lin = decoderLinearModules(i);
    shapes.set(`${lin.q}.weight`, [numHeads * d, h]);
    shapes.set(`${lin.k}.weight`, [numKvHeads * d, h]);
    shapes.set(`${lin.v}.weight`, [numKvHeads * d, h]);
    shapes.set(`${lin.o}.weight`, [h, numHeads * d]);
    shapes.set(`${lin.gate}.weight`, [f, h]);
    shapes.set(`${lin.up}.weight`, [f, h]);
    shapes.set(`${lin.down}.weight`, [h, f]);
    const norm = decoderNormModules(i);
    shapes.set(`${norm.input_norm}.weight`, [h]);
    shapes.set(`${norm.post_attn_norm}.weight`, [h]);
  }
  shapes.set(`${decoderTopModules.finalNorm}.weight`, [h]);
  if (!config.tieWordEmbeddings) shapes.set(`${decoderTopModules.lmHead}.weight`, [config.vocabSize, h]);
  return shapes;
}

/** PEFT saves LoRA tensors as `base_model.model.<module>.lora_A.weight` (adapter name stripped). */
export const PEFT_PREFIX = 'base_model.model.';
export function peftLoraTensorNames(module: string): { a: string; b: string } {
  return { a: `${PEFT_PREFIX}${module}.lora_A.weight`, b: `${PEFT_PREFIX}${module}.lora_B.weight` };
}

/** Where a module sits in a model's hook sites, read from its name alone (either family). */
export interface ModuleHookSite {
  family: 'encoder' | 'decoder';
  layer: number;
  /** 'linear': a per-layer Linear with a hook site; 'norm': a per-layer LayerNorm / RMSNorm with a norm site. */
  kind: 'linear' | 'norm';
}

// Built from the spellings above (layer index as a capture), so the two cannot drift apart.
const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function moduleRegex(names: (i: number) => Record<string, string>, prefixes: readonly string[]): RegExp {
  const marker = 987654321;
  const alternatives = Object.values(names(marker)).map((n) => escape(n).replace(String(marker), '(\\d+)'));
  const prefix = prefixes.length > 0 ? `(?:${prefixes.map(escape).join('|')})?` : '';
  return new RegExp(`^${prefix}(?:${alternatives.join('|')})$`);
}
const HOOK_SITE_PATTERNS: readonly { family: 'encoder' | 'decoder'; kind: 'linear' | 'norm'; re: RegExp }[] = [
  { family: 'encoder', kind: 'linear', re: moduleRegex((i) => encoderLinearModules({ architecture: 'BertModel' }, i), ['bert.']) },
  { family: 'encoder', kind: 'norm', re: moduleRegex((i) => encoderNormModules({ architecture: 'BertModel' }, i), ['bert.']) },
  { family: 'decoder', kind: 'linear', re: moduleRegex(decoderLinearModules, []) },
  { family: 'decoder', kind: 'norm', re: moduleRegex(decoderNormModules, []) },
];

/**
 * The hook site of a module, or null for a module no delta can reach at a hook site (embeddings, the pooler, the
 * LM head, a classifier): an adapter that changes such a module must be merged, or refused by name.
 */
export function hookSiteOfModule(module: string): ModuleHookSite | null {
  for (const { family, kind, re } of HOOK_SITE_PATTERNS) {
    const m = re.exec(module);
    if (!m) continue;
    const index = m.slice(1).find((g) => g !== undefined);
    return { family, kind, layer: Number(index) };
  }
  return null;
}

/**
 * The shared encoder's modules as the PET layouts name them: every name comes from the engine's names.ts helpers
 * (encoderLinearModules, encoderNormModules, encoderTopModules, encoderTensorShapes), never spelled by hand.
 */
import { type EncoderConfig, type EncoderLinearSite, type EncoderNormSite, encoderLinearModules, encoderNormModules, encoderTensorShapes, encoderTopModules } from '@tessera/engine';

/** The six Linear modules of a layer, by the slice name the engine's SiteOutput gives them. */
export type LinearSlice = 'query' | 'key' | 'value' | 'attn_out' | 'ffn_in' | 'ffn_out';
export const LINEAR_SLICES: readonly LinearSlice[] = ['query', 'key', 'value', 'attn_out', 'ffn_in', 'ffn_out'];

/** The hook site a slice belongs to: query/key/value are the three outputs of the fused qkv site. */
export function siteOfSlice(slice: LinearSlice): EncoderLinearSite {
  return slice === 'query' || slice === 'key' || slice === 'value' ? 'qkv' : slice;
}

export interface LinearModuleInfo {
  readonly layer: number;
  readonly slice: LinearSlice;
  readonly site: EncoderLinearSite;
  /** HF module name, e.g. 'bert.encoder.layer.0.attention.self.query'. */
  readonly module: string;
  readonly inFeatures: number;
  readonly outFeatures: number;
}

export interface NormModuleInfo {
  readonly layer: number;
  readonly site: EncoderNormSite;
  /** HF module name, e.g. 'bert.encoder.layer.0.output.LayerNorm'. */
  readonly module: string;
  readonly features: number;
}

/** Every Linear module of the encoder, layer by layer in slice order, with its [out, in] shape. */
export function linearModules(config: EncoderConfig): LinearModuleInfo[] {
  const shapes = encoderTensorShapes(config);
  const out: LinearModuleInfo[] = [];
  for (let layer = 0; layer < config.numLayers; layer++) {
    const names = encoderLinearModules(config, layer);
    for (const slice of LINEAR_SLICES) {
      const module = names[slice];
      const shape = shapes.get(`${module}.weight`)!;
      out.push({ layer, slice, site: siteOfSlice(slice), module, outFeatures: shape[0]!, inFeatures: shape[1]! });
    }
  }
  return out;
}

/** Both LayerNorms of every layer (post-LN: after attention, after the FFN). */
export function normModules(config: EncoderConfig): NormModuleInfo[] {
  const out: NormModuleInfo[] = [];
  for (let layer = 0; layer < config.numLayers; layer++) {
    const names = encoderNormModules(config, layer);
    for (const site of ['attn_ln', 'ffn_ln'] as const) out.push({ layer, site, module: names[site], features: config.hiddenSize });
  }
  return out;
}

/** The task head's tensor names: the classifier of BertForSequenceClassification. */
export function headTensorNames(config: EncoderConfig): { weight: string; bias: string } {
  const classifier = encoderTopModules(config).classifier;
  return { weight: `${classifier}.weight`, bias: `${classifier}.bias` };
}

/**
 * The module prefix-tuning attaches to in a layer: the self-attention module that owns query/key/value
 * ('bert.encoder.layer.l.attention.self'), derived from the query module's name.
 */
export function selfAttentionModule(config: EncoderConfig, layer: number): string {
  const query = encoderLinearModules(config, layer).query;
  return query.slice(0, query.lastIndexOf('.'));
}

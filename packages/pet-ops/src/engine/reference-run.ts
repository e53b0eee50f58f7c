/**
 * One task as a whole model in onnxruntime: the task merged into a copy of the shared weights
 * (mergePetIntoWeights), adapters and prefixes baked into the graph through exportEncoderOnnx's extensions. This
 * is the engine's independent numerics oracle (equivalence tests: PIE's mixed batches vs each task's own model)
 * and a SeqS-style baseline (one full model per task).
 */
import { type EncoderConfig, type OnnxExportShape, OrtModel, encoderTensorShapes, exportEncoderOnnx, runEncoderOrt } from '@tessera/engine';
import { InvalidArgumentError } from '@tessera/native';
import { adapterKey, mergePetIntoWeights } from '../reference/merge.js';
import type { PetParams, SharedModel } from '../types.js';

/** Every tensor of the shared model as host f32 by HF name (read from the device once; cached by the model). */
export function sharedHostWeights(shared: SharedModel): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const name of encoderTensorShapes(shared.config).keys()) out.set(name, shared.hostWeight(name));
  return out;
}

/** ONNX bytes of the task's whole model: merged weights, the task head, adapters and prefixes as graph extensions. */
export function exportPetTaskOnnx(sharedHost: ReadonlyMap<string, Float32Array>, config: EncoderConfig, params: PetParams, shape: OnnxExportShape = {}): Uint8Array {
  const merged = mergePetIntoWeights(sharedHost, config, params);
  const { adapters, prefixes } = merged.extensions;
  const weights = (name: string): Float32Array => {
    const w = merged.weights.get(name);
    if (w === undefined) throw new InvalidArgumentError(`exportPetTaskOnnx: the merged model has no tensor ${name}`);
    return w;
  };
  return exportEncoderOnnx(merged.config, weights, shape, {
    ...(adapters ? { adapters: (layer: number, site: 'attn_out' | 'ffn_out') => adapters.get(adapterKey(layer, site)) ?? null } : {}),
    ...(prefixes ? { prefixes: (layer: number) => prefixes.get(layer) ?? null } : {}),
    numLabels: merged.config.numLabels,
  });
}

/** A task's merged model in an onnxruntime session. */
export class PetTaskOnnxModel {
  private constructor(
    private readonly ort: OrtModel,
    readonly config: EncoderConfig,
  ) {}

  static async create(
    sharedHost: ReadonlyMap<string, Float32Array>,
    config: EncoderConfig,
    params: PetParams,
    options: { threads?: number } = {},
  ): Promise<PetTaskOnnxModel> {
    const bytes = exportPetTaskOnnx(sharedHost, config, params);
    const ort = await OrtModel.create(bytes, options.threads === undefined ? {} : { threads: options.threads });
    return new PetTaskOnnxModel(ort, { ...config, numLabels: params.config.labels.length, labels: [...params.config.labels] });
  }

  /** Logits [numLabels] of each query (padded to a common length inside, padding masked). */
  async logits(queries: readonly { readonly ids: ArrayLike<number>; readonly tokenTypes?: ArrayLike<number> }[]): Promise<Float32Array[]> {
    if (queries.length === 0) return [];
    const ids = queries.map((q) => Array.from(q.ids));
    const types = queries.some((q) => q.tokenTypes !== undefined) ? queries.map((q, i) => (q.tokenTypes ? Array.from(q.tokenTypes) : ids[i]!.map(() => 0))) : undefined;
    const out = await runEncoderOrt(this.ort, ids, types, { padTokenId: this.config.padTokenId });
    return out.logits!;
  }

  release(): Promise<void> {
    return this.ort.release();
  }
}

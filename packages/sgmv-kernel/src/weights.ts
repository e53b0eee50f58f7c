/**
 * LoRA weights in SGMV layout (punica.md §11.2 "LoraWeight", §12.2): per projection (hook-site slice), one
 * contiguous stack over all layers, so a kernel reaches layer ℓ at a fixed offset and every row it reads is
 * contiguous:
 *   A: f32 [L, r, in]   PEFT's lora_A [r, in] per layer, as stored (the shrink reads x · Aᵀ row by row)
 *   B: f32 [L, r, out]  PEFT's lora_B [out, r] transposed, times the module's scale (alpha / r, or alpha / √r)
 * r is the projection's largest rank over layers; smaller ranks and layers the adapter does not target are zero
 * (zero rows contribute nothing). Folding the scale into B keeps the expand kernel scale-free, as in Punica.
 */
import { join } from 'node:path';
import { type LoraAdapter, type LoraModule, type ModelConfig, TensorShapeError, decoderLinearModules, decoderTensorShapes, encoderLinearModules, encoderTensorShapes, loadLoraAdapterAsync, peftLoraTensorNames } from '@tessera/engine';
import { type Backend, InvalidArgumentError, Tensor, getBackend, getCpuBackend } from '@tessera/native';
import { UnsupportedAdapterError } from './errors.js';

/** One projection on the host: A [numLayers, r, inFeatures], B [numLayers, r, outFeatures] (scale folded in). */
export interface HostLoraProjection {
  a: Float32Array;
  b: Float32Array;
  r: number;
  inFeatures: number;
  outFeatures: number;
}

/** One adapter in SGMV layout on the host, keyed by hook-site slice ('q', …, 'down' or 'query', …, 'ffn_out'). */
export interface HostLoraWeights {
  name: string;
  /** The largest projection rank. */
  rank: number;
  numLayers: number;
  projections: Map<string, HostLoraProjection>;
  /** Bytes of every A and B array. */
  nbytes: number;
}

/** Where a Linear module sits: its layer, the SiteOutput slice name the engine gives it, and its shape. */
export interface LoraSite {
  layer: number;
  slice: string;
  inFeatures: number;
  outFeatures: number;
}

/**
 * Every Linear of the model that carries a hook site, by HF module name. The slice names are the engine's
 * `SiteOutput.slice`: the decoder's site names; the encoder's 'query' | 'key' | 'value' (the three slices of its
 * fused qkv site) and 'attn_out' | 'ffn_in' | 'ffn_out'.
 */
export function loraSites(config: ModelConfig): Map<string, LoraSite> {
  const sites = new Map<string, LoraSite>();
  const shapes = config.family === 'encoder' ? encoderTensorShapes(config) : decoderTensorShapes(config);
  for (let layer = 0; layer < config.numLayers; layer++) {
    const modules: Record<string, string> = config.family === 'encoder' ? encoderLinearModules(config, layer) : decoderLinearModules(layer);
    for (const [slice, module] of Object.entries(modules)) {
      const shape = shapes.get(`${module}.weight`);
      if (shape?.length !== 2) throw new InvalidArgumentError(`loraSites: the ${config.family} has no 2-D weight for ${module}`);
      sites.set(module, { layer, slice, outFeatures: shape[0]!, inFeatures: shape[1]! });
    }
  }
  return sites;
}

const shapeString = (shape: readonly number[]) => `[${shape.join(', ')}]`;

/**
 * Packs a loaded PEFT adapter (`loadLoraAdapter`) into SGMV layout for `config`'s model. Every module must be a
 * hook-site Linear of that model with A [r, in] and B [out, r] of the model's in/out features; anything else
 * throws naming the tensor (TensorShapeError) or the module (UnsupportedAdapterError). Adapters with trained
 * biases or modules_to_save are refused: SGMV applies only the low-rank product.
 */
export function packLoraForSgmv(adapter: LoraAdapter, config: ModelConfig): HostLoraWeights {
  const file = join(adapter.dir, 'adapter_model.safetensors');
  if (adapter.biases.size > 0) {
    throw new UnsupportedAdapterError(
      adapter.dir,
      `${adapter.dir}: adapter ${adapter.name} trained biases (${[...adapter.biases.keys()].join(', ')}); SGMV applies only LoRA A/B, ` +
        "serve it with the engine's LoraDelta (given the base weights) or merge it (mergeLoraIntoWeights)",
    );
  }
  if (adapter.savedModules.size > 0) {
    throw new UnsupportedAdapterError(
      adapter.dir,
      `${adapter.dir}: adapter ${adapter.name} replaces whole modules (modules_to_save: ${[...adapter.savedModules.keys()].join(', ')}); ` +
        'hook sites cannot apply them, merge the adapter into a copy of the base instead (mergeLoraIntoWeights)',
    );
  }
  const sites = loraSites(config);
  // slice → per-layer modules, validated first so nothing is packed from a bad adapter.
  const bySlice = new Map<string, { site: LoraSite; module: LoraModule }[]>();
  for (const [name, module] of adapter.modules) {
    const tensors = peftLoraTensorNames(name);
    const site = sites.get(name);
    if (!site) {
      throw new UnsupportedAdapterError(
        adapter.dir,
        `${file}: ${tensors.a} adapts ${name}, which is not a per-layer hook site of this ${config.family} (SGMV adapts ` +
          `${config.family === 'decoder' ? 'q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj' : 'query, key, value, attention.output.dense, intermediate.dense, output.dense'})`,
      );
    }
    const wantA = [module.r, site.inFeatures];
    const wantB = [site.outFeatures, module.r];
    if (module.a.dtype !== 'f32' || module.a.shape.join() !== wantA.join()) {
      throw new TensorShapeError(file, `${file}: ${tensors.a} is ${module.a.dtype} ${shapeString(module.a.shape)}, but ${name} needs f32 [r, in] = ${shapeString(wantA)}`);
    }
    if (module.b.dtype !== 'f32' || module.b.shape.join() !== wantB.join()) {
      throw new TensorShapeError(file, `${file}: ${tensors.b} is ${module.b.dtype} ${shapeString(module.b.shape)}, but ${name} needs f32 [out, r] = ${shapeString(wantB)}`);
    }
    if (!Number.isFinite(module.scale)) throw new InvalidArgumentError(`${file}: ${name} has a non-finite scale ${module.scale}`);
    let list = bySlice.get(site.slice);
    if (!list) bySlice.set(site.slice, (list = []));
    list.push({ site, module });
  }

  const L = config.numLayers;
  const projections = new Map<string, HostLoraProjection>();
  let nbytes = 0;
  let rank = 0;
  for (const [slice, list] of bySlice) {
    const { inFeatures, outFeatures } = list[0]!.site;
    const r = Math.max(...list.map((m) => m.module.r));
    const a = new Float32Array(L * r * inFeatures);
    const b = new Float32Array(L * r * outFeatures);
    for (const { site, module } of list) {
      const ra = module.r;
      const srcA = module.a.toArray() as Float32Array; // [ra, in]
      const srcB = module.b.toArray() as Float32Array; // [out, ra]
      a.set(srcA, site.layer * r * inFeatures);
      const bo = site.layer * r * outFeatures;
      for (let j = 0; j < ra; j++) {
        for (let o = 0; o < outFeatures; o++) b[bo + j * outFeatures + o] = srcB[o * ra + j]! * module.scale;
      }
    }
    projections.set(slice, { a, b, r, inFeatures, outFeatures });
    nbytes += a.byteLength + b.byteLength;
    rank = Math.max(rank, r);
  }
  return { name: adapter.name, rank, numLayers: L, projections, nbytes };
}

/**
 * Reads a PEFT adapter directory (asynchronously: file reads off the main thread, validated against `config`
 * before any tensor is read) and packs it for SGMV. The loaded tensors are host temporaries and are freed
 * before this returns, also when packing fails.
 */
export async function readLoraForSgmv(dir: string, config: ModelConfig, options: { name?: string } = {}): Promise<HostLoraWeights> {
  const adapter = await loadLoraAdapterAsync(dir, { base: config, backend: getCpuBackend(), ...(options.name === undefined ? {} : { name: options.name }) });
  try {
    return packLoraForSgmv(adapter, config);
  } finally {
    adapter.dispose();
  }
}

/** One projection on a backend: A f32 [L, r, in], B f32 [L, r, out]. */
export interface LoraProjectionTensors {
  readonly a: Tensor;
  readonly b: Tensor;
  readonly r: number;
}

/** One adapter's SGMV weights resident on a backend (charged to its byte budget). */
export class LoraWeightSet {
  readonly name: string;
  readonly rank: number;
  readonly numLayers: number;
  /** Native bytes of every tensor. */
  readonly nbytes: number;
  readonly projections: ReadonlyMap<string, LoraProjectionTensors>;
  private isDisposed = false;

  private constructor(host: HostLoraWeights, projections: Map<string, LoraProjectionTensors>) {
    this.name = host.name;
    this.rank = host.rank;
    this.numLayers = host.numLayers;
    this.projections = projections;
    let nbytes = 0;
    for (const p of projections.values()) nbytes += p.a.nbytes + p.b.nbytes;
    this.nbytes = nbytes;
  }

  private static shapes(host: HostLoraWeights, slice: string, p: HostLoraProjection): { a: number[]; b: number[] } {
    const a = [host.numLayers, p.r, p.inFeatures];
    const b = [host.numLayers, p.r, p.outFeatures];
    if (p.a.length !== a[0]! * a[1]! * a[2]! || p.b.length !== b[0]! * b[1]! * b[2]!) {
      throw new InvalidArgumentError(`LoraWeightSet: ${host.name}.${slice} holds ${p.a.length} / ${p.b.length} values, not A ${shapeString(a)} / B ${shapeString(b)}`);
    }
    return { a, b };
  }

  /**
   * Copies every projection to `backend` (default: the process backend). If the byte budget runs out midway,
   * what was copied is freed and the BudgetExceededError propagates.
   */
  static upload(host: HostLoraWeights, backend: Backend = getBackend()): LoraWeightSet {
    const projections = new Map<string, LoraProjectionTensors>();
    const allocated: Tensor[] = [];
    const put = (data: Float32Array, shape: number[]) => {
      const t = Tensor.from(data, shape, { backend });
      allocated.push(t);
      return t;
    };
    try {
      for (const [slice, p] of host.projections) {
        const shapes = LoraWeightSet.shapes(host, slice, p);
        projections.set(slice, { a: put(p.a, shapes.a), b: put(p.b, shapes.b), r: p.r });
      }
    } catch (err) {
      for (const t of allocated) t.dispose();
      throw err;
    }
    return new LoraWeightSet(host, projections);
  }

  /** {@link upload} with the copies on a background thread (on-demand loading while the engine steps). */
  static async uploadAsync(host: HostLoraWeights, backend: Backend = getBackend()): Promise<LoraWeightSet> {
    const projections = new Map<string, LoraProjectionTensors>();
    const allocated: Tensor[] = [];
    const put = async (data: Float32Array, shape: number[]) => {
      const t = await Tensor.fromAsync(data, shape, { backend });
      allocated.push(t);
      return t;
    };
    try {
      for (const [slice, p] of host.projections) {
        const shapes = LoraWeightSet.shapes(host, slice, p);
        projections.set(slice, { a: await put(p.a, shapes.a), b: await put(p.b, shapes.b), r: p.r });
      }
    } catch (err) {
      for (const t of allocated) t.dispose();
      throw err;
    }
    return new LoraWeightSet(host, projections);
  }

  get disposed(): boolean {
    return this.isDisposed;
  }

  /** Frees every tensor. Idempotent. */
  dispose(): void {
    this.isDisposed = true;
    for (const p of this.projections.values()) {
      p.a.dispose();
      p.b.dispose();
    }
  }
}

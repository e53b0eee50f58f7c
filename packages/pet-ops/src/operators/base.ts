/**
 * What the seven PET operators share: the task head, optional task LayerNorms, the device upload (all-or-nothing),
 * the loaded task that turns its device tensors into native PetOps per site, and validation against the layout.
 */
import { type AttentionPrefix, type EncoderConfig, encoderNormModules } from '@tessera/engine';
import { type Backend, type PetOp, Tensor } from '@tessera/native';
import type { LoraWeightSet } from '@tessera/sgmv-kernel';
import { PetConfigError, TaskStateError } from '../errors.js';
import type { LinearSiteContext, LoadedPet, NormSiteContext, PetConfig, PetHooks, PetOperator, PetParams, PetTensorSpec, PetType, SharedModel } from '../types.js';
import { type OpCost, layerNormCost } from './cost.js';
import { headTensorNames, normModules } from './modules.js';
import { checkFinite, checkLabels, checkLayout, checkNormPairs, checkSharedConfig, hostF32 } from './validate.js';

/** The native allocator charges every allocation in multiples of 64 bytes (AllocatorStats.inUse); so do we. */
export const ALLOCATION_GRANULE = 64;

export function allocationBytes(nbytes: number): number {
  return Math.ceil(nbytes / ALLOCATION_GRANULE) * ALLOCATION_GRANULE;
}

/** Device tensors of one task, freed together (also when an upload fails midway). */
export class DeviceTensors {
  readonly backend: Backend;
  private readonly list: Tensor[] = [];

  constructor(backend: Backend) {
    this.backend = backend;
  }

  put(data: Float32Array | Int32Array | Uint8Array, shape: readonly number[]): Tensor {
    const t = Tensor.from(data, shape, { backend: this.backend });
    this.list.push(t);
    return t;
  }

  /** Bytes the allocator charges for these tensors. */
  get bytes(): number {
    let n = 0;
    for (const t of this.list) n += allocationBytes(t.nbytes);
    return n;
  }

  dispose(): void {
    for (const t of this.list) t.dispose();
    this.list.length = 0;
  }
}

/** Bytes the allocator charges for a LoRA weight set's tensors. */
export function loraDeviceBytes(lora: LoraWeightSet): number {
  let n = 0;
  for (const p of lora.projections.values()) n += allocationBytes(p.a.nbytes) + allocationBytes(p.b.nbytes);
  return n;
}

/** A CSR matrix [out, in] on the device, applied as y += scale · x · matrixᵀ. */
export interface DeviceCsr {
  readonly indptr: Tensor;
  readonly indices: Tensor;
  readonly values: Tensor;
  readonly nnz: number;
  readonly scale?: number;
}

export interface DeviceAdapter {
  readonly down: Tensor;
  readonly downBias: Tensor;
  readonly up: Tensor;
  readonly upBias: Tensor;
  readonly act: 'gelu' | 'gelu_tanh';
}

/** A task's work at one Linear module, in the fixed order of pets.md §3.9: input term, bias, output op. */
export interface LinearModuleOps {
  csr?: DeviceCsr;
  bias?: Tensor;
  adapter?: DeviceAdapter;
}

export interface DeviceLayerNorm {
  readonly gamma: Tensor;
  readonly beta: Tensor;
}

/** What a PET type's loader builds besides the head. */
export interface PetBody {
  /** By HF module name (SiteOutput.module). */
  linear: Map<string, LinearModuleOps>;
  /** By HF LayerNorm module name. */
  norms: Map<string, DeviceLayerNorm>;
  lora: LoraWeightSet | null;
  prefixes: Map<number, AttentionPrefix> | null;
  /** Analytic cost terms over the whole model, each for `tokens` rows. */
  cost: ((tokens: number) => OpCost)[];
}

export function emptyBody(): PetBody {
  return { linear: new Map(), norms: new Map(), lora: null, prefixes: null, cost: [] };
}

/** A task's parameters resident on the device. */
export class LoadedPetTask implements LoadedPet {
  readonly type: PetType;
  readonly config: PetConfig;
  readonly bytes: number;
  readonly head: { readonly weight: Tensor; readonly bias: Tensor };
  readonly lora: LoraWeightSet | null;
  private readonly encoder: EncoderConfig;
  private readonly device: DeviceTensors;
  private readonly body: PetBody;
  private disposed = false;

  constructor(type: PetType, config: PetConfig, encoder: EncoderConfig, device: DeviceTensors, head: { weight: Tensor; bias: Tensor }, body: PetBody) {
    this.type = type;
    this.config = config;
    this.encoder = encoder;
    this.device = device;
    this.head = head;
    this.body = body;
    this.lora = body.lora;
    this.bytes = device.bytes + (body.lora ? loraDeviceBytes(body.lora) : 0);
  }

  private live(what: string): void {
    if (this.disposed) throw new TaskStateError(`${what}: this ${this.type} task's parameters were unloaded (LoadedPet disposed)`);
  }

  linearOps(ctx: LinearSiteContext): PetOp[] {
    this.live('linearOps');
    const ops: PetOp[] = [];
    for (const out of ctx.outputs) {
      const m = this.body.linear.get(out.module);
      if (!m) continue;
      if (m.csr) {
        const { indptr, indices, values, scale } = m.csr;
        ops.push(scale === undefined
          ? { kind: 'csr', rows: ctx.rows, x: ctx.x, y: out.y, indptr, indices, values }
          : { kind: 'csr', rows: ctx.rows, x: ctx.x, y: out.y, indptr, indices, values, scale });
      }
      if (m.bias) ops.push({ kind: 'bias', rows: ctx.rows, y: out.y, bias: m.bias });
      if (m.adapter) {
        const a = m.adapter;
        ops.push({ kind: 'adapter', rows: ctx.rows, y: out.y, down: a.down, downBias: a.downBias, up: a.up, upBias: a.upBias, act: a.act });
      }
    }
    return ops;
  }

  normOps(ctx: NormSiteContext): PetOp[] {
    this.live('normOps');
    const ln = this.body.norms.get(encoderNormModules(this.encoder, ctx.layer)[ctx.site]);
    if (!ln) return [];
    return [{ kind: 'layernorm', rows: ctx.rows, x: ctx.x, y: ctx.y, gamma: ln.gamma, beta: ln.beta, eps: this.encoder.layerNormEps }];
  }

  attentionPrefix(layer: number): AttentionPrefix | null {
    this.live('attentionPrefix');
    return this.body.prefixes?.get(layer) ?? null;
  }

  cost(tokens: number): { flops: number; bytes: number } {
    let flops = 0;
    let bytes = 0;
    for (const term of this.body.cost) {
      const c = term(tokens);
      flops += c.flops;
      bytes += c.bytes;
    }
    return { flops, bytes };
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  /** Frees every device tensor. Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.device.dispose();
    this.body.lora?.dispose();
  }
}

/** An operator whose validation needs only the shared model's config (registration before the model loads). */
export interface ConfigValidatingOperator extends PetOperator {
  validateForConfig(config: EncoderConfig, params: PetParams): void;
}

export function isConfigValidating(op: PetOperator): op is ConfigValidatingOperator {
  return typeof (op as Partial<ConfigValidatingOperator>).validateForConfig === 'function';
}

/** The head every type stores: classifier.weight f32 [numLabels, hidden], classifier.bias f32 [numLabels]. */
export function headSpecs(config: EncoderConfig, pet: PetConfig): PetTensorSpec[] {
  const names = headTensorNames(config);
  const n = pet.labels.length;
  return [
    { name: names.weight, dtype: 'f32', shape: [n, config.hiddenSize], description: "the task's classifier over the pooled [CLS] output (one row per label)" },
    { name: names.bias, dtype: 'f32', shape: [n], description: "the task's classifier bias" },
  ];
}

/** Task LayerNorms after attention and after the FFN of every layer: `<module>.weight` / `.bias` f32 [hidden]. */
export function taskNormSpecs(config: EncoderConfig, optional: boolean): PetTensorSpec[] {
  return normModules(config).flatMap((n) => [
    { name: `${n.module}.weight`, dtype: 'f32', shape: [n.features], optional, description: `task LayerNorm gain at ${n.site} of layer ${n.layer} (replaces the shared one)` },
    { name: `${n.module}.bias`, dtype: 'f32', shape: [n.features], optional, description: `task LayerNorm bias at ${n.site} of layer ${n.layer} (replaces the shared one)` },
  ]);
}

/** Uploads the task LayerNorms present in the file (a LayerNorm absent from the file stays shared). */
export function loadTaskNorms(config: EncoderConfig, params: PetParams, device: DeviceTensors, body: PetBody): void {
  for (const n of normModules(config)) {
    if (!params.tensors.has(`${n.module}.weight`)) continue;
    body.norms.set(n.module, {
      gamma: device.put(hostF32(params, `${n.module}.weight`), [n.features]),
      beta: device.put(hostF32(params, `${n.module}.bias`), [n.features]),
    });
    body.cost.push((tokens) => layerNormCost(tokens, n.features));
  }
}

/**
 * The common skeleton of every PET type: validation (config → layout → contents) and an all-or-nothing load of
 * the head plus the type's body.
 */
export abstract class BasePetOperator implements ConfigValidatingOperator {
  abstract readonly type: PetType;
  abstract readonly hooks: PetHooks;

  /** The type's tensors besides the head. Throws PetConfigError when the config lacks what the layout depends on. */
  protected abstract bodyLayout(config: EncoderConfig, pet: PetConfig): PetTensorSpec[];

  /** Uploads the type's tensors (and derives what runs) into `device` / the returned body. */
  protected abstract build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody;

  /** Type-specific config checks (rank, bottleneck, …). */
  protected checkConfig(_config: EncoderConfig, _pet: PetConfig): void {}

  /** Type-specific content checks once the layout matched (CSR structure, mask padding, LayerNorm pairs). */
  protected checkContents(_config: EncoderConfig, _params: PetParams): void {}

  layout(config: EncoderConfig, pet: PetConfig): PetTensorSpec[] {
    checkLabels(this.type, pet);
    this.checkConfig(config, pet);
    return [...headSpecs(config, pet), ...this.bodyLayout(config, pet)];
  }

  validateForConfig(config: EncoderConfig, params: PetParams): void {
    if (params.type !== this.type) throw new PetConfigError(`the parameters are of type ${params.type}, not ${this.type}`);
    checkSharedConfig(config);
    checkLayout(this.type, this.layout(config, params.config), params);
    for (const [name, t] of params.tensors) if (t.dtype === 'f32') checkFinite(name, t.data as Float32Array);
    this.checkContents(config, params);
  }

  validate(shared: SharedModel, params: PetParams): void {
    this.validateForConfig(shared.config, params);
  }

  load(shared: SharedModel, params: PetParams, backend: Backend): LoadedPet {
    this.validateForConfig(shared.config, params);
    const device = new DeviceTensors(backend);
    let body: PetBody | null = null;
    try {
      const names = headTensorNames(shared.config);
      const n = params.config.labels.length;
      const head = { weight: device.put(hostF32(params, names.weight), [n, shared.config.hiddenSize]), bias: device.put(hostF32(params, names.bias), [n]) };
      body = this.build(shared, params, device);
      return new LoadedPetTask(this.type, params.config, shared.config, device, head, body);
    } catch (err) {
      device.dispose();
      body?.lora?.dispose();
      throw err;
    }
  }

  storedBytes(params: PetParams): number {
    let n = 0;
    for (const t of params.tensors.values()) n += t.data.byteLength;
    return n;
  }
}

/** LayerNorm pairs of every layer, for checkNormPairs. */
export function normModuleNames(config: EncoderConfig): string[] {
  return normModules(config).map((n) => n.module);
}

export { checkNormPairs };

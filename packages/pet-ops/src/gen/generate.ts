/**
 * Seeded synthetic PET tasks for a shared encoder (pets.md §10 recipe, artifact generator): MaskBert masks with
 * 5% zeros, Diff-Pruning with 0.5% non-zeros (unstructured, uniformly placed), adapters with bottleneck ≈ hidden/12,
 * LoRA rank 8 on query/value, prefix length 8, BitFit biases around the shared ones. Values are small random
 * numbers, scaled so that every PET measurably changes a task's logits (the equivalence tests rely on that).
 * The same (type, config, options) gives the same parameters on every machine.
 */
import type { EncoderConfig } from '@tessera/engine';
import { PetConfigError } from '../errors.js';
import { adapterModules, adapterTensorNames } from '../operators/adapter.js';
import { diffTensorNames } from '../operators/diff.js';
import { DEFAULT_PET_LORA_TARGETS, loraModules, loraTensorNames } from '../operators/lora.js';
import { maskTensorName } from '../operators/maskbert.js';
import { headTensorNames, linearModules, normModules } from '../operators/modules.js';
import { prefixTensorNames } from '../operators/prefix.js';
import { maskRowBytes } from '../operators/validate.js';
import { type HostTensor, PET_TYPES, type PetConfig, type PetParams, type PetType } from '../types.js';
import { PetRng, checkSeed, samplePositions, uniformValues } from './rng.js';

/** The paper's four PET types (Table 4): the default mix for capacity and throughput experiments. */
export const PAPER_PET_TYPES: readonly PetType[] = ['adapter', 'maskbert', 'diff', 'bitfit'];

/** MaskBert: fraction of weights the mask removes (95% of S = W ⊙ M̄ is zero). */
export const DEFAULT_MASK_ZEROS = 0.05;
/** Diff-Pruning: fraction of non-zeros of δ (the paper's 99.5% sparsity; the artifact used 1%). */
export const DEFAULT_DIFF_DENSITY = 0.005;
export const DEFAULT_LORA_RANK = 8;
export const DEFAULT_PREFIX_LENGTH = 8;

/** Standard deviations of the generated values. */
const HEAD_STD = 0.1;
const BIAS_NOISE_STD = 0.05;
const NORM_NOISE_STD = 0.05;
const ADAPTER_STD = 0.05;
const ADAPTER_BIAS_STD = 0.02;
const LORA_STD = 0.08;
const PREFIX_STD = 0.2;
/**
 * δ's non-zeros hold about this fraction of a dense 0.02-std matrix's energy whatever the density (value std =
 * 0.02·√(fraction / density)), so a sparser δ has larger values, as trained diffs do.
 */
const DIFF_ENERGY_FRACTION = 0.1;
const SHARED_INIT_STD = 0.02;

export interface GeneratePetOptions {
  /** Unsigned 32-bit seed. */
  seed: number;
  /** The task's labels (default: the shared config's labels, or LABEL_0 / LABEL_1). */
  labels?: readonly string[];
  /** Diff-Pruning: fraction of non-zeros of δ (default 0.005). */
  density?: number;
  /** MaskBert: fraction of weights masked out (default 0.05). */
  maskZeros?: number;
  /** Adapter: bottleneck (default max(1, round(hidden / 12)), the paper's 64 at 768). */
  bottleneck?: number;
  /** Adapter: activation (default 'gelu'). */
  activation?: 'gelu' | 'gelu_tanh';
  /** LoRA: rank (default 8), alpha (default 2·rank) and target modules (default query, value). */
  rank?: number;
  alpha?: number;
  targetModules?: readonly string[];
  /** Prefix-tuning: prefix length (default 8). */
  prefixLength?: number;
  /** Diff / BitFit / Adapter: include task LayerNorms (default true; other types have none). */
  taskLayerNorm?: boolean;
  /**
   * The shared model's weights by HF name: BitFit biases and task LayerNorms are then the shared ones plus noise
   * (as a fine-tuned task's are). Without it they are noise around 0 (biases) and 1 (LayerNorm gains).
   */
  shared?: (name: string) => Float32Array;
}

function defaultLabels(config: EncoderConfig): string[] {
  return config.labels.length > 0 ? [...config.labels] : ['LABEL_0', 'LABEL_1'];
}

function fraction(value: number, what: string): number {
  if (!(value >= 0 && value <= 1)) throw new PetConfigError(`generatePetParams: ${what} must be in [0, 1], got ${value}`);
  return value;
}

/** CSR structure (by output row) of a [rows, cols] matrix whose non-zeros sit at the sorted flat `positions`. */
function csrFromPositions(positions: Int32Array, rows: number, cols: number): { indptr: Int32Array; indices: Int32Array } {
  const indptr = new Int32Array(rows + 1);
  const indices = new Int32Array(positions.length);
  for (let e = 0; e < positions.length; e++) {
    indptr[Math.floor(positions[e]! / cols) + 1]!++;
    indices[e] = positions[e]! % cols;
  }
  for (let r = 0; r < rows; r++) indptr[r + 1]! += indptr[r]!;
  return { indptr, indices };
}

/** Seeded parameters of one task of `type` for a shared model with `config`. */
export function generatePetParams(type: PetType, config: EncoderConfig, options: GeneratePetOptions): PetParams {
  const seed = checkSeed(options.seed);
  if (!PET_TYPES.includes(type)) throw new PetConfigError(`generatePetParams: unknown PET type ${JSON.stringify(type)} (known: ${PET_TYPES.join(', ')})`);
  const labels = [...(options.labels ?? defaultLabels(config))];
  const h = config.hiddenSize;
  const tensors = new Map<string, HostTensor>();
  const stream = (name: string) => `${type}/${name}`;
  const f32 = (name: string, shape: number[], data: Float32Array) => tensors.set(name, { dtype: 'f32', shape, data });
  const random = (name: string, shape: number[], std: number) => f32(name, shape, uniformValues(shape.reduce((a, b) => a * b, 1), seed, stream(name), std));
  /** The shared tensor (or `fallback`) plus uniform noise. */
  const aroundShared = (name: string, n: number, fallback: number, std: number) => {
    const base = options.shared?.(name);
    if (base && base.length !== n) throw new PetConfigError(`generatePetParams: shared ${name} has ${base.length} values, expected ${n}`);
    const noise = uniformValues(n, seed, stream(name), std);
    for (let i = 0; i < n; i++) noise[i]! += base ? base[i]! : fallback;
    return noise;
  };

  const head = headTensorNames(config);
  random(head.weight, [labels.length, h], HEAD_STD);
  random(head.bias, [labels.length], HEAD_STD);

  const withNorms = (options.taskLayerNorm ?? true) && (type === 'diff' || type === 'bitfit' || type === 'adapter');
  if (withNorms) {
    for (const n of normModules(config)) {
      f32(`${n.module}.weight`, [n.features], aroundShared(`${n.module}.weight`, n.features, 1, NORM_NOISE_STD));
      f32(`${n.module}.bias`, [n.features], aroundShared(`${n.module}.bias`, n.features, 0, NORM_NOISE_STD));
    }
  }

  const pet: { -readonly [K in keyof PetConfig]: PetConfig[K] } = { labels };
  switch (type) {
    case 'standard':
      break;
    case 'diff': {
      const density = fraction(options.density ?? DEFAULT_DIFF_DENSITY, 'density');
      const std = density > 0 ? SHARED_INIT_STD * Math.sqrt(DIFF_ENERGY_FRACTION / density) : 0;
      for (const m of linearModules(config)) {
        const n = diffTensorNames(m.module);
        const total = m.outFeatures * m.inFeatures;
        const positions = samplePositions(total, Math.round(density * total), seed, stream(`${m.module}.delta.positions`));
        const values = uniformValues(positions.length, seed, stream(n.values), std);
        const { indptr, indices } = csrFromPositions(positions, m.outFeatures, m.inFeatures);
        tensors.set(n.indptr, { dtype: 'i32', shape: [m.outFeatures + 1], data: indptr });
        tensors.set(n.indices, { dtype: 'i32', shape: [indices.length], data: indices });
        f32(n.values, [values.length], values);
        random(n.biasDiff, [m.outFeatures], BIAS_NOISE_STD);
      }
      break;
    }
    case 'maskbert': {
      const zeros = fraction(options.maskZeros ?? DEFAULT_MASK_ZEROS, 'maskZeros');
      for (const m of linearModules(config)) {
        const rowBytes = maskRowBytes(m.inFeatures);
        const mask = new Uint8Array(m.outFeatures * rowBytes);
        // Start from "keep everything" (padding bits stay 0), then clear the sampled positions.
        for (let o = 0; o < m.outFeatures; o++) for (let i = 0; i < m.inFeatures; i++) mask[o * rowBytes + (i >> 3)]! |= 1 << (i & 7);
        const total = m.outFeatures * m.inFeatures;
        for (const p of samplePositions(total, Math.round(zeros * total), seed, stream(`${m.module}.mask.zeros`))) {
          const o = Math.floor(p / m.inFeatures);
          const i = p % m.inFeatures;
          mask[o * rowBytes + (i >> 3)]! &= ~(1 << (i & 7));
        }
        tensors.set(maskTensorName(m.module), { dtype: 'u8', shape: [m.outFeatures, rowBytes], data: mask });
      }
      break;
    }
    case 'bitfit':
      for (const m of linearModules(config)) f32(`${m.module}.bias`, [m.outFeatures], aroundShared(`${m.module}.bias`, m.outFeatures, 0, BIAS_NOISE_STD));
      break;
    case 'adapter': {
      const m = options.bottleneck ?? Math.max(1, Math.round(h / 12));
      pet.bottleneck = m;
      if (options.activation !== undefined) pet.activation = options.activation;
      for (const mod of adapterModules(config)) {
        const n = adapterTensorNames(mod.module);
        random(n.down, [m, h], ADAPTER_STD);
        random(n.downBias, [m], ADAPTER_BIAS_STD);
        random(n.up, [h, m], ADAPTER_STD);
        random(n.upBias, [h], ADAPTER_BIAS_STD);
      }
      break;
    }
    case 'lora': {
      const r = options.rank ?? DEFAULT_LORA_RANK;
      pet.rank = r;
      pet.alpha = options.alpha ?? 2 * r;
      pet.targetModules = [...(options.targetModules ?? DEFAULT_PET_LORA_TARGETS)];
      for (const mod of loraModules(config, pet as PetConfig)) {
        const n = loraTensorNames(mod.module);
        random(n.a, [r, mod.inFeatures], LORA_STD);
        random(n.b, [mod.outFeatures, r], LORA_STD);
      }
      break;
    }
    case 'prefix': {
      const p = options.prefixLength ?? DEFAULT_PREFIX_LENGTH;
      pet.prefixLength = p;
      for (let l = 0; l < config.numLayers; l++) {
        const n = prefixTensorNames(config, l);
        random(n.key, [p, h], PREFIX_STD);
        random(n.value, [p, h], PREFIX_STD);
      }
      break;
    }
  }
  return { type, config: pet, tensors };
}

export interface GeneratedPetTask {
  readonly type: PetType;
  /** The seed the task's parameters were generated with. */
  readonly seed: number;
  readonly params: PetParams;
}

/**
 * `count` tasks with types drawn uniformly from `types` (default the paper's four; the artifact's randint over
 * the four types with a fixed seed), each generated with its own seed derived from `seed`.
 */
export function generatePetTasks(
  config: EncoderConfig,
  options: { count: number; types?: readonly PetType[]; seed: number } & Omit<GeneratePetOptions, 'seed'>,
): GeneratedPetTask[] {
  const { count, types = PAPER_PET_TYPES, seed, ...rest } = options;
  checkSeed(seed);
  if (!Number.isInteger(count) || count < 0) throw new RangeError(`generatePetTasks: count must be a non-negative integer, got ${count}`);
  if (types.length === 0) throw new RangeError('generatePetTasks: types must name at least one PET type');
  const typeRng = new PetRng(seed, 'task-types');
  const seedRng = new PetRng(seed, 'task-seeds');
  const tasks: GeneratedPetTask[] = [];
  for (let i = 0; i < count; i++) {
    const type = types[typeRng.nextInt(types.length)]!;
    const taskSeed = seedRng.nextUint32();
    tasks.push({ type, seed: taskSeed, params: generatePetParams(type, config, { ...rest, seed: taskSeed }) });
  }
  return tasks;
}

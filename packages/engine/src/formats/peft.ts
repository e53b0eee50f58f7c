/**
 * PEFT LoRA adapters: `adapter_config.json` + `adapter_model.safetensors` (tensor names from models/names.ts).
 * Module targeting, rank/alpha patterns and scaling follow PEFT (≥ 0.14) exactly, so an adapter trained with
 * PEFT computes the same delta here. Loading validates every header against the config (and the base model,
 * when given) before reading a byte of tensor data, and frees what it read if a later read fails.
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import type { Backend, Tensor } from '@tessera/native';
import type { ModelConfig } from '../config.js';
import { ConfigError, MissingTensorError, TensorShapeError, UnknownDtypeError } from '../errors.js';
import {
  PEFT_PREFIX,
  decoderLinearModules,
  decoderTensorShapes,
  encoderLinearModules,
  encoderTensorShapes,
  encoderTopModules,
  decoderTopModules,
  peftLoraTensorNames,
} from '../models/names.js';
import { resolveInside } from './model-dir.js';
import { SafetensorsFile, type SafetensorsReadOptions } from './safetensors.js';

export const PEFT_ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const PEFT_ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';

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

// ─── adapter_config.json ───────────────────────────────────────────────────────────────────────────────────

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Reads `dir/adapter_config.json`. */
export function readLoraAdapterConfig(dir: string): LoraAdapterConfig {
  const path = resolveInside(dir, PEFT_ADAPTER_CONFIG_FILE);
  if (!existsSync(path)) throw new ConfigError(path, `${path}: not found (a PEFT adapter directory needs ${PEFT_ADAPTER_CONFIG_FILE})`);
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (cause) {
    throw new ConfigError(path, `${path}: not readable JSON (${(cause as Error).message})`, { cause });
  }
  return parseLoraAdapterConfig(json, path);
}

/**
 * Validates a parsed adapter_config.json (`path` only names it in messages). Defaults are PEFT's LoraConfig
 * defaults. Features that change the math and that this engine does not implement are rejected, not ignored.
 */
export function parseLoraAdapterConfig(json: unknown, path: string): LoraAdapterConfig {
  const fail = (key: string, message: string): never => {
    throw new ConfigError(path, `${path}: ${key} ${message}`);
  };
  if (!isPlainObject(json)) return fail('adapter config', 'must be a JSON object');
  const get = (key: string): unknown => (Object.hasOwn(json, key) ? json[key] : undefined);
  const unset = (v: unknown) => v === undefined || v === null;

  const peftType = get('peft_type');
  if (peftType !== 'LORA') fail('peft_type', `is ${JSON.stringify(peftType)}, but only "LORA" adapters are supported`);

  const r = unset(get('r')) ? 8 : get('r');
  if (typeof r !== 'number' || !Number.isSafeInteger(r) || r <= 0) fail('r', `must be a positive integer, got ${JSON.stringify(r)}`);
  const loraAlpha = unset(get('lora_alpha')) ? 8 : get('lora_alpha');
  if (typeof loraAlpha !== 'number' || !Number.isFinite(loraAlpha)) fail('lora_alpha', `must be a number, got ${JSON.stringify(loraAlpha)}`);

  const target = get('target_modules');
  let targetModules: string[] | string;
  if (typeof target === 'string') {
    try {
      pythonRegex(target, 'full');
    } catch (cause) {
      return fail('target_modules', `is not a valid regular expression (${(cause as Error).message})`);
    }
    targetModules = target;
  } else if (Array.isArray(target) && target.length > 0 && target.every((t) => typeof t === 'string')) {
    targetModules = [...(target as string[])];
  } else {
    return fail('target_modules', `must be a non-empty list of module names or a regex string, got ${JSON.stringify(target)} (PEFT writes the resolved list when it saves)`);
  }

  const bool = (key: string): boolean => {
    const v = get(key);
    if (unset(v)) return false;
    if (typeof v !== 'boolean') fail(key, `must be true or false, got ${JSON.stringify(v)}`);
    return v as boolean;
  };
  const fanInFanOut = bool('fan_in_fan_out');
  const useRslora = bool('use_rslora');
  if (bool('use_dora')) fail('use_dora', 'is true, but DoRA adapters are not supported');
  if (bool('lora_bias')) fail('lora_bias', 'is true, but a bias on lora_B is not supported');

  const bias = unset(get('bias')) ? 'none' : get('bias');
  if (bias !== 'none' && bias !== 'all' && bias !== 'lora_only') fail('bias', `must be "none", "all" or "lora_only", got ${JSON.stringify(bias)}`);

  const pattern = (key: string, isValid: (v: unknown) => boolean, what: string): Record<string, number> => {
    const v = get(key);
    if (unset(v)) return {};
    if (!isPlainObject(v)) return fail(key, 'must be an object mapping module-name patterns to values');
    const out: Record<string, number> = {};
    for (const [k, value] of Object.entries(v)) {
      if (!isValid(value)) fail(`${key}.${k}`, `must be ${what}, got ${JSON.stringify(value)}`);
      try {
        patternRegex(k);
      } catch (cause) {
        fail(`${key}.${k}`, `is not a valid regular expression (${(cause as Error).message})`);
      }
      out[k] = value as number;
    }
    return out;
  };
  const rankPattern = pattern('rank_pattern', (v) => typeof v === 'number' && Number.isSafeInteger(v) && v > 0, 'a positive integer');
  const alphaPattern = pattern('alpha_pattern', (v) => typeof v === 'number' && Number.isFinite(v), 'a number');

  // Options that select other modules or add parameters this loader does not read: only their "off" values.
  for (const key of ['layers_to_transform', 'layer_replication', 'trainable_token_indices', 'alora_invocation_tokens']) {
    if (!unset(get(key))) fail(key, `is ${JSON.stringify(get(key))}, but only null is supported`);
  }
  for (const key of ['exclude_modules', 'target_parameters']) {
    const v = get(key);
    if (!unset(v) && !(Array.isArray(v) && v.length === 0)) fail(key, `is ${JSON.stringify(v)}, but only null or an empty list is supported`);
  }

  const stringOrNull = (key: string): string | null => {
    const v = get(key);
    if (unset(v)) return null;
    if (typeof v !== 'string') fail(key, `must be a string or null, got ${JSON.stringify(v)}`);
    return v as string;
  };
  const saved = get('modules_to_save');
  if (!unset(saved) && !(Array.isArray(saved) && saved.every((m) => typeof m === 'string'))) {
    fail('modules_to_save', `must be a list of module names or null, got ${JSON.stringify(saved)}`);
  }
  return {
    r: r as number,
    loraAlpha: loraAlpha as number,
    targetModules,
    fanInFanOut,
    bias: bias as LoraAdapterConfig['bias'],
    rankPattern,
    alphaPattern,
    useRslora,
    baseModelNameOrPath: stringOrNull('base_model_name_or_path'),
    taskType: stringOrNull('task_type'),
    modulesToSave: unset(saved) ? null : [...(saved as string[])],
  };
}

// ─── PEFT's matching rules ─────────────────────────────────────────────────────────────────────────────────

/**
 * A Python `re` pattern as a JS RegExp: `(?P<n>…)` / `(?P=n)` named groups and the `\A` / `\Z` anchors are
 * rewritten; everything else module-name patterns use is the same in both dialects. 'full' anchors like
 * `re.fullmatch`, 'start' like `re.match`.
 */
function pythonRegex(pattern: string, anchoring: 'full' | 'start'): RegExp {
  let out = '';
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\') {
      const next = pattern[i + 1] ?? '';
      if (!inClass && next === 'A') out += '^';
      else if (!inClass && next === 'Z') out += '$';
      else out += c + next;
      i++;
    } else if (inClass) {
      if (c === ']') inClass = false;
      out += c;
    } else if (c === '[') {
      inClass = true;
      out += c;
    } else if (pattern.startsWith('(?P<', i)) {
      out += '(?<';
      i += 3;
    } else if (pattern.startsWith('(?P=', i)) {
      const end = pattern.indexOf(')', i);
      if (end < 0) throw new SyntaxError(`unterminated (?P= at ${i}`);
      out += `\\k<${pattern.slice(i + 4, end)}>`;
      i = end;
    } else {
      out += c;
    }
  }
  return new RegExp(anchoring === 'full' ? `^(?:${out})$` : `^(?:${out})`);
}

const regexCache = new Map<string, RegExp>();
function cached(key: string, build: () => RegExp): RegExp {
  let re = regexCache.get(key);
  if (!re) {
    re = build();
    regexCache.set(key, re);
  }
  return re;
}

/** PEFT ≥ 0.14 `get_pattern_key`: `re.match(rf"(^|.*\.){key}$", module)`, the key spliced in as written. */
function patternRegex(key: string): RegExp {
  return cached(`pattern\0${key}`, () => pythonRegex(`(^|.*\\.)${key}$`, 'start'));
}

/**
 * PEFT's `check_target_module_exists`: a string is a regex that must match the whole module name
 * (`re.fullmatch`); a list matches a module named exactly like an entry or ending in `.` + entry.
 */
export function matchesTargetModules(config: Pick<LoraAdapterConfig, 'targetModules'>, moduleName: string): boolean {
  const target = config.targetModules;
  if (typeof target === 'string') return cached(`full\0${target}`, () => pythonRegex(target, 'full')).test(moduleName);
  return target.some((t) => moduleName === t || moduleName.endsWith(`.${t}`));
}

/**
 * Rank, alpha and scale of one module, as PEFT ≥ 0.14 resolves them: the first key of rank_pattern (resp.
 * alpha_pattern) whose pattern `(^|.*\.)key$` matches the module name overrides r (resp. lora_alpha);
 * scale = alpha / r, or alpha / √r with use_rslora.
 */
export function resolveLoraParams(
  config: Pick<LoraAdapterConfig, 'r' | 'loraAlpha' | 'rankPattern' | 'alphaPattern' | 'useRslora'>,
  moduleName: string,
): { r: number; alpha: number; scale: number } {
  const first = (patterns: Record<string, number>): number | undefined => {
    for (const [key, value] of Object.entries(patterns)) if (patternRegex(key).test(moduleName)) return value;
    return undefined;
  };
  const r = first(config.rankPattern) ?? config.r;
  const alpha = first(config.alphaPattern) ?? config.loraAlpha;
  return { r, alpha, scale: config.useRslora ? alpha / Math.sqrt(r) : alpha / r };
}

// ─── Loading ───────────────────────────────────────────────────────────────────────────────────────────────

/** One LoRA-adapted Linear: Δy = scale · (x Aᵀ) Bᵀ. */
export interface LoraModule {
  /** HF module name, e.g. 'model.layers.0.self_attn.q_proj'. */
  module: string;
  r: number;
  alpha: number;
  scale: number;
  /** f32 [r, in] */
  a: Tensor;
  /** f32 [out, r] */
  b: Tensor;
}

export interface LoraAdapter {
  name: string;
  /** The adapter directory (absolute). */
  dir: string;
  config: LoraAdapterConfig;
  /**
   * Always false: PEFT warns and resets fan_in_fan_out to false when the base layer is an nn.Linear, which every
   * adapted module of both our families is; `config.fanInFanOut` keeps the value as written.
   */
  effectiveFanInFanOut: false;
  /** By module name. */
  modules: Map<string, LoraModule>;
  /** f32 bias tensors the adapter trained (bias 'all' / 'lora_only'), keyed by HF tensor name, e.g. 'bert.pooler.dense.bias'. */
  biases: Map<string, Tensor>;
  /**
   * f32 full replacements for the base tensors of `modules_to_save` (e.g. a sequence-classification head),
   * keyed by HF tensor name, e.g. 'classifier.weight'.
   */
  savedModules: Map<string, Tensor>;
  /** Native bytes held by every tensor above. */
  nbytes: number;
  /** Frees every tensor. Idempotent. */
  dispose(): void;
}

export interface LoadLoraAdapterOptions {
  /** Default: the directory's base name. */
  name?: string;
  backend?: Backend;
  /** Validate every tensor against this base model's modules and shapes. */
  base?: ModelConfig;
}

/** The Linear modules of a base model and their weight shapes [out, in]. */
function baseLinearShapes(base: ModelConfig): Map<string, number[]> {
  const modules: string[] = [];
  let tensorShapes: Map<string, number[]>;
  if (base.family === 'encoder') {
    tensorShapes = encoderTensorShapes(base);
    for (let i = 0; i < base.numLayers; i++) modules.push(...Object.values(encoderLinearModules(base, i)));
    if (base.architecture === 'BertForSequenceClassification') {
      const top = encoderTopModules(base);
      modules.push(top.pooler, top.classifier);
    }
  } else {
    tensorShapes = decoderTensorShapes(base);
    for (let i = 0; i < base.numLayers; i++) modules.push(...Object.values(decoderLinearModules(i)));
    // lm_head is an nn.Linear even when its weight is tied to the embeddings (and then absent from the file).
    tensorShapes.set(`${decoderTopModules.lmHead}.weight`, [base.vocabSize, base.hiddenSize]);
    modules.push(decoderTopModules.lmHead);
  }
  return new Map(modules.map((m) => [m, tensorShapes.get(`${m}.weight`)!]));
}

function baseTensorShapes(base: ModelConfig): Map<string, number[]> {
  return base.family === 'encoder' ? encoderTensorShapes(base) : decoderTensorShapes(base);
}

const shapeString = (shape: readonly number[]) => `[${shape.join(', ')}]`;
const sameShape = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((d, i) => d === b[i]);

interface LoadPlan {
  modules: { module: string; r: number; alpha: number; scale: number; a: string; b: string }[];
  /** [key without the PEFT prefix, tensor name in the file] */
  biases: [string, string][];
  savedModules: [string, string][];
}

const LORA_A_SUFFIX = '.lora_A.weight';
const LORA_B_SUFFIX = '.lora_B.weight';

/** Checks every tensor's name, dtype and shape from the header alone and lists what to read. */
function planAdapter(file: SafetensorsFile, config: LoraAdapterConfig, base: ModelConfig | undefined): LoadPlan {
  const path = file.path;
  const linear = base ? baseLinearShapes(base) : undefined;
  const baseShapes = base ? baseTensorShapes(base) : undefined;
  const savedModuleNames = config.modulesToSave ?? [];
  const isSavedModule = (module: string) => savedModuleNames.some((m) => module === m || module.endsWith(`.${m}`));
  const loraModules = new Set<string>();
  const plan: LoadPlan = { modules: [], biases: [], savedModules: [] };

  for (const name of file.names()) {
    const { dtype, shape } = file.info(name);
    if (dtype !== 'f32' && dtype !== 'f16' && dtype !== 'bf16') {
      throw new UnknownDtypeError(path, `${path}: tensor ${name} is ${dtype}; adapter tensors must be f32, f16 or bf16`);
    }
    if (!name.startsWith(PEFT_PREFIX)) {
      throw new ConfigError(path, `${path}: tensor ${name} does not start with ${PEFT_PREFIX} (not a PEFT adapter file?)`);
    }
    const key = name.slice(PEFT_PREFIX.length);
    if (key.endsWith(LORA_A_SUFFIX) || key.endsWith(LORA_B_SUFFIX)) {
      loraModules.add(key.slice(0, -LORA_A_SUFFIX.length));
      continue;
    }
    if (key.includes('.lora_')) {
      throw new ConfigError(path, `${path}: tensor ${name} is not a LoRA A/B weight of a Linear (LoRA on embeddings, DoRA magnitudes and lora_B biases are not supported)`);
    }
    const module = key.slice(0, Math.max(0, key.lastIndexOf('.')));
    const isBias = key.endsWith('.bias');
    let target: [string, string][];
    if (isSavedModule(module)) target = plan.savedModules;
    else if (isBias && config.bias !== 'none') target = plan.biases;
    else {
      throw new ConfigError(
        path,
        `${path}: tensor ${name} is neither a LoRA weight, a trained bias (bias is "${config.bias}") nor part of modules_to_save (${JSON.stringify(config.modulesToSave)})`,
      );
    }
    if (baseShapes) {
      const want = baseShapes.get(key);
      if (!want) throw new ConfigError(path, `${path}: tensor ${name} replaces ${key}, which the base model does not have`);
      if (!sameShape(shape, want)) throw new TensorShapeError(path, `${path}: tensor ${name} has shape ${shapeString(shape)} but the base model's ${key} is ${shapeString(want)}`);
    }
    target.push([key, name]);
  }

  for (const module of [...loraModules].sort()) {
    const names = peftLoraTensorNames(module);
    for (const [have, missing] of [[names.a, names.b], [names.b, names.a]] as const) {
      if (!file.has(missing)) throw new MissingTensorError(path, `${path}: ${have} has no partner ${missing}`);
    }
    if (!matchesTargetModules(config, module)) {
      throw new ConfigError(path, `${path}: module ${module} has LoRA weights but target_modules ${JSON.stringify(config.targetModules)} does not select it`);
    }
    const params = resolveLoraParams(config, module);
    const aShape = file.info(names.a).shape;
    const bShape = file.info(names.b).shape;
    let inFeatures = aShape[1];
    let outFeatures = bShape[0];
    if (linear) {
      const weight = linear.get(module);
      if (!weight) throw new ConfigError(path, `${path}: module ${module} has LoRA weights but is not a Linear layer of the base model (no ${module}.weight)`);
      [outFeatures, inFeatures] = weight;
    }
    const wantA = [params.r, inFeatures ?? -1];
    const wantB = [outFeatures ?? -1, params.r];
    if (aShape.length !== 2 || !sameShape(aShape, wantA)) {
      throw new TensorShapeError(path, `${path}: tensor ${names.a} has shape ${shapeString(aShape)} but should be [r, in] = ${shapeString(wantA)} (r = ${params.r})`);
    }
    if (bShape.length !== 2 || !sameShape(bShape, wantB)) {
      throw new TensorShapeError(path, `${path}: tensor ${names.b} has shape ${shapeString(bShape)} but should be [out, r] = ${shapeString(wantB)} (r = ${params.r})`);
    }
    plan.modules.push({ module, ...params, a: names.a, b: names.b });
  }
  if (plan.modules.length === 0) throw new MissingTensorError(path, `${path}: holds no LoRA weights (no ${PEFT_PREFIX}<module>${LORA_A_SUFFIX} tensors)`);
  return plan;
}

function openAdapter(dir: string, options: LoadLoraAdapterOptions): { root: string; config: LoraAdapterConfig; file: SafetensorsFile; plan: LoadPlan } {
  const root = resolve(dir);
  const config = readLoraAdapterConfig(root);
  const weightsPath = resolveInside(root, PEFT_ADAPTER_WEIGHTS_FILE);
  if (!existsSync(weightsPath)) {
    const legacy = existsSync(resolveInside(root, 'adapter_model.bin')) ? ' (found adapter_model.bin: PyTorch pickles are not read; save with safe_serialization=True)' : '';
    throw new MissingTensorError(weightsPath, `${weightsPath}: not found; a PEFT adapter directory needs ${PEFT_ADAPTER_WEIGHTS_FILE}${legacy}`);
  }
  const file = SafetensorsFile.open(weightsPath);
  try {
    return { root, config, file, plan: planAdapter(file, config, options.base) };
  } catch (err) {
    file.close();
    throw err;
  }
}

function assemble(
  root: string,
  config: LoraAdapterConfig,
  options: LoadLoraAdapterOptions,
  plan: LoadPlan,
  tensors: Map<string, Tensor>,
): LoraAdapter {
  const get = (n: string) => tensors.get(n)!;
  const modules = new Map(plan.modules.map((m) => [m.module, { module: m.module, r: m.r, alpha: m.alpha, scale: m.scale, a: get(m.a), b: get(m.b) }]));
  let nbytes = 0;
  for (const t of tensors.values()) nbytes += t.nbytes;
  return {
    name: options.name ?? basename(root),
    dir: root,
    config,
    effectiveFanInFanOut: false,
    modules,
    biases: new Map(plan.biases.map(([key, n]) => [key, get(n)])),
    savedModules: new Map(plan.savedModules.map(([key, n]) => [key, get(n)])),
    nbytes,
    dispose() {
      for (const t of tensors.values()) t.dispose();
    },
  };
}

function tensorsToRead(plan: LoadPlan): string[] {
  return [...plan.modules.flatMap((m) => [m.a, m.b]), ...plan.biases.map(([, n]) => n), ...plan.savedModules.map(([, n]) => n)];
}

/**
 * Loads a PEFT LoRA adapter directory: every tensor becomes an f32 native tensor. All names, dtypes and shapes
 * are checked (against `options.base` too, when given) before anything is read; if a read fails, whatever was
 * read is freed before the error propagates.
 */
export function loadLoraAdapter(dir: string, options: LoadLoraAdapterOptions = {}): LoraAdapter {
  const { root, config, file, plan } = openAdapter(dir, options);
  const readOptions: SafetensorsReadOptions = options.backend ? { dtype: 'f32', backend: options.backend } : { dtype: 'f32' };
  const tensors = new Map<string, Tensor>();
  try {
    for (const name of tensorsToRead(plan)) tensors.set(name, file.read(name, readOptions));
    return assemble(root, config, options, plan, tensors);
  } catch (err) {
    for (const t of tensors.values()) t.dispose();
    throw err;
  } finally {
    file.close();
  }
}

/** {@link loadLoraAdapter} with file reads and host-to-device copies off the main thread (one tensor at a time). */
export async function loadLoraAdapterAsync(dir: string, options: LoadLoraAdapterOptions = {}): Promise<LoraAdapter> {
  const { root, config, file, plan } = openAdapter(dir, options);
  const readOptions: SafetensorsReadOptions = options.backend ? { dtype: 'f32', backend: options.backend } : { dtype: 'f32' };
  const tensors = new Map<string, Tensor>();
  try {
    for (const name of tensorsToRead(plan)) tensors.set(name, await file.readAsync(name, readOptions));
    return assemble(root, config, options, plan, tensors);
  } catch (err) {
    for (const t of tensors.values()) t.dispose();
    throw err;
  } finally {
    file.close();
  }
}

/**
 * The gen and train commands of the `tessera` command line (the `tessera` bin of @tessera/cli runs them through
 * this module, exported as `@tessera/engine/cli`):
 *   tessera gen model <dir> --family encoder|decoder [--size tiny|mini] [--seed N] [--dtype f32|f16|bf16] [--sharpen X]
 *   tessera gen adapter <dir> --base <modelDir> [--rank R] [--alpha A] [--targets a,b] [--seed N] [--b-std S]
 *   tessera train lora|adapter|full|classifier --model <dir> --data <file.jsonl> [--out <dir>] [options]
 *   tessera --help | tessera gen --help | tessera train --help
 * Results on stdout, progress (mini models, training steps) and errors on stderr. Exit codes: 0 ok, 1 the command
 * failed (including bad training data, named by file and line), 2 a usage error (unknown command or flag, bad value).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import type { ModelConfig } from './config.js';
import type { TrainableSpec } from './train/params.js';
import { TesseraError } from '@tessera/core';

import { ConfigError } from './errors.js';
import { parseHfConfig } from './formats/hf-config.js';

export interface CliIo {
  /** One line (or block) of results; a newline is added when missing. */
  stdout(text: string): void;
  /** One line (or block) of progress or error; a newline is added when missing. */
  stderr(text: string): void;
  /**
   * A progress bar for long work (training steps, a mini model's tensors), drawn by the caller (the `tessera` CLI
   * of @tessera/cli draws it with cli-progress on a terminal). Without it, progress is plain lines on stderr.
   */
  progressBar?(total: number, label: string): ProgressBar;
}

/** One bar: `update` moves it to `done` of its total with a detail text; `stop` ends it (before anything else prints). */
export interface ProgressBar {
  update(done: number, detail: string): void;
  stop(): void;
}

const processIo: CliIo = {
  stdout: (t) => process.stdout.write(t.endsWith('\n') ? t : `${t}\n`),
  stderr: (t) => process.stderr.write(t.endsWith('\n') ? t : `${t}\n`),
};

/** A bad command line: printed with the usage text, exit code 2. */
class UsageError extends Error {}

export function usage(): string {
  return [
    'usage: tessera <command> [options]',
    '',
    'commands:',
    '  gen model <dir>     write a seeded Hugging Face model directory (config.json, model.safetensors, tokenizer)',
    '  gen adapter <dir>   write a seeded PEFT LoRA adapter for a model directory',
    '  train lora          train a LoRA on a model directory; writes a PEFT adapter directory',
    '  train adapter       train Houlsby bottleneck adapters on an encoder (PetS layout pet.safetensors)',
    '  train full          train every weight; writes a model directory',
    '  train classifier    sequence classification on an encoder ({"text", "label"} records)',
    '',
    'Run `tessera gen --help` or `tessera train --help` for the options.',
  ].join('\n');
}

export function genUsage(): string {
  return [
    'usage: tessera gen model <dir> --family encoder|decoder [--size tiny|mini] [--seed N] [--dtype f32|f16|bf16] [--sharpen X]',
    '       tessera gen adapter <dir> --base <modelDir> [--rank R] [--alpha A] [--targets t1,t2] [--seed N] [--b-std S]',
    '',
    'gen model:',
    '  --family F     encoder (BertForSequenceClassification, WordPiece) or decoder (LlamaForCausalLM, byte-level BPE)',
    '  --size S       tiny (tests, < 1 MB) or mini (benchmarks, 120 MB encoder / 176 MB decoder in f32); default tiny',
    '  --seed N       unsigned 32-bit seed; default 0. Same seed, same bytes on every machine',
    '  --dtype D      weight dtype: f32 (default), f16 or bf16',
    '  --sharpen X    multiply the final logits by X > 0 so a random model is not near-uniform; default 1',
    '',
    'gen adapter:',
    '  --base DIR     the model directory the adapter is for (its config.json)',
    '  --rank R       LoRA rank r; default 8',
    '  --alpha A      lora_alpha; default 16',
    '  --targets T    comma-separated module-name suffixes; default query,value (encoder) / q_proj,v_proj (decoder)',
    '  --seed N       unsigned 32-bit seed; default 0',
    '  --b-std S      standard deviation of lora_B (PEFT starts it at 0, a no-op); default 0.05',
    '',
    '  --help, -h     this text',
  ].join('\n');
}

export async function main(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const [command, sub, ...rest] = argv;
  try {
    if (command === undefined) throw new UsageError('name a command');
    if (command === '--help' || command === '-h' || command === 'help') {
      io.stdout(usage());
      return 0;
    }
    if (command === 'train') {
      if (sub === undefined) throw new UsageError('train: name what to train (lora, adapter, full or classifier)');
      if (sub === '--help' || sub === '-h') {
        io.stdout(trainUsage());
        return 0;
      }
      if (!(TRAIN_KINDS as readonly string[]).includes(sub)) throw new UsageError(`unknown train kind "${sub}" (expected ${TRAIN_KINDS.join(', ')})`);
      return await trainCommand(sub as TrainKind, rest, io);
    }
    if (command !== 'gen') throw new UsageError(`unknown command "${command}"`);
    if (sub === undefined) throw new UsageError('gen: name what to generate (model or adapter)');
    if (sub === '--help' || sub === '-h') {
      io.stdout(genUsage());
      return 0;
    }
    if (sub === 'model') return await genModel(rest, io);
    if (sub === 'adapter') return await genAdapter(rest, io);
    throw new UsageError(`unknown gen target "${sub}" (expected model or adapter)`);
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr(`tessera: ${err.message}\n\n${command === 'gen' ? genUsage() : command === 'train' ? trainUsage() : usage()}`);
      return 2;
    }
    // Options the training module judges against the model (targets that match nothing, --seq-len beyond the
    // positions, …) are bad values too; bad data (TrainDataError, naming file and line) is a failed run.
    if (err instanceof TesseraError && err.code === 'TESSERA_TRAIN_CONFIG') {
      io.stderr(`tessera: ${err.message}`);
      return 2;
    }
    if (err instanceof TesseraError) {
      io.stderr(`tessera: ${err.message}`);
      return 1;
    }
    // Bad values that only the generator can judge (e.g. targets that match no module) are usage errors too.
    if (err instanceof RangeError) {
      io.stderr(`tessera: ${err.message}`);
      return 2;
    }
    const e = err as Error;
    io.stderr(`tessera: ${e.stack ?? e.message}`);
    return 1;
  }
}

/**
 * parseArgs with string-valued flags `names`, boolean flags `flags`, plus --help / -h; strict, so unknown flags are
 * usage errors. Boolean flags come back as the string 'true'.
 */
function parse(
  args: string[],
  names: readonly string[],
  flags: readonly string[] = [],
): { values: Partial<Record<string, string>>; help: boolean; positionals: string[] } {
  const options: NonNullable<Parameters<typeof parseArgs>[0]>['options'] = { help: { type: 'boolean', short: 'h' } };
  for (const name of names) options[name] = { type: 'string' };
  for (const name of flags) options[name] = { type: 'boolean' };
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const { help, ...values } = parsed.values as Record<string, string | boolean | undefined>;
  const strings: Partial<Record<string, string>> = {};
  for (const [k, v] of Object.entries(values)) if (v !== undefined && v !== false) strings[k] = v === true ? 'true' : v;
  return { values: strings, help: help === true, positionals: parsed.positionals };
}

function oneDir(positionals: string[], what: string): string {
  if (positionals.length !== 1) {
    throw new UsageError(positionals.length === 0 ? `gen ${what}: name the output directory` : `gen ${what}: expected one directory, got ${positionals.join(' ')}`);
  }
  return positionals[0]!;
}

function choice<T extends string>(flag: string, value: string | undefined, allowed: readonly T[], fallback?: T): T {
  if (value === undefined) {
    if (fallback === undefined) throw new UsageError(`${flag} is required (${allowed.join(' or ')})`);
    return fallback;
  }
  if (!(allowed as readonly string[]).includes(value)) throw new UsageError(`${flag} must be ${allowed.join(' or ')}, got "${value}"`);
  return value as T;
}

function integerFlag(flag: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${flag} must be an integer in [${min}, ${max}], got "${value}"`);
  return n;
}

function numberFlag(flag: string, value: string | undefined, fallback: number, allowZero: boolean): number {
  if (value === undefined) return fallback;
  const n = value.trim() === '' ? Number.NaN : Number(value);
  if (!Number.isFinite(n) || n < 0 || (!allowZero && n === 0)) throw new UsageError(`${flag} must be a finite number ${allowZero ? '>=' : '>'} 0, got "${value}"`);
  return n;
}

function formatBytes(bytes: number): string {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

async function genModel(args: string[], io: CliIo): Promise<number> {
  const { values, help, positionals } = parse(args, ['family', 'size', 'seed', 'dtype', 'sharpen']);
  if (help) {
    io.stdout(genUsage());
    return 0;
  }
  const dir = oneDir(positionals, 'model');
  const family = choice('--family', values.family, ['encoder', 'decoder'] as const);
  const size = choice('--size', values.size, ['tiny', 'mini'] as const, 'tiny');
  const dtype = choice('--dtype', values.dtype, ['f32', 'f16', 'bf16'] as const, 'f32');
  const seed = integerFlag('--seed', values.seed, 0, 0, 0xffffffff);
  const sharpen = numberFlag('--sharpen', values.sharpen, 1, false);

  // Loaded here, not at the top: --help and usage errors must not need the native addon.
  const { generateModel } = await import('./gen/generate-model.js');
  const started = performance.now();
  const log = (m: string) => io.stderr(`[${((performance.now() - started) / 1000).toFixed(1)}s] ${m}`);
  if (size === 'mini') log(`generating ${family} ${size} (${dtype}, seed ${seed}) in ${dir}`);
  // A mini model takes seconds per tensor on a small machine: a bar when the caller draws one, else a line each.
  let bar: ProgressBar | undefined;
  let model;
  try {
    model = generateModel(dir, {
      family,
      size,
      seed,
      dtype,
      sharpen,
      ...(size === 'mini'
        ? {
            onProgress: ({ tensor, done, total }: { tensor: string; done: number; total: number }) => {
              const detail = `${String(done).padStart(String(total).length)}/${total} ${tensor}`;
              if (io.progressBar) {
                bar ??= io.progressBar(total, 'tensors');
                bar.update(done, detail);
                if (done === total) {
                  bar.stop();
                  bar = undefined;
                }
              } else log(detail);
              if (done === total) log('writing model.safetensors');
            },
          }
        : {}),
    });
  } finally {
    bar?.stop();
  }
  const { parameterCount } = await import('./gen/presets.js');
  io.stdout(
    `wrote ${model.dir}: ${family} ${size} ${model.config.architecture}, ${parameterCount(model.config).toLocaleString('en-US')} parameters, ` +
      `${dtype}, vocab ${model.config.vocabSize}, seed ${seed}${sharpen !== 1 ? `, sharpen ${sharpen}` : ''}; model.safetensors ${formatBytes(model.bytes)}`,
  );
  io.stdout(`files: ${model.files.join(', ')}`);
  return 0;
}

async function genAdapter(args: string[], io: CliIo): Promise<number> {
  const { values, help, positionals } = parse(args, ['base', 'rank', 'alpha', 'targets', 'seed', 'b-std']);
  if (help) {
    io.stdout(genUsage());
    return 0;
  }
  const dir = oneDir(positionals, 'adapter');
  if (values.base === undefined) throw new UsageError('--base <modelDir> is required');
  const rank = integerFlag('--rank', values.rank, 8, 1, 65536);
  const alpha = numberFlag('--alpha', values.alpha, 16, false);
  const seed = integerFlag('--seed', values.seed, 0, 0, 0xffffffff);
  let targets: string[] | undefined;
  if (values.targets !== undefined) {
    targets = values.targets.split(',').map((t) => t.trim());
    if (targets.some((t) => t === '')) throw new UsageError(`--targets must be a comma-separated list of module names, got "${values.targets}"`);
  }
  const { DEFAULT_LORA_B_STD, generateLoraAdapter } = await import('./gen/generate-adapter.js');
  const bStd = numberFlag('--b-std', values['b-std'], DEFAULT_LORA_B_STD, true);

  const baseDir = resolve(values.base);
  const base = readBaseConfig(join(baseDir, 'config.json'));
  const adapter = generateLoraAdapter(dir, {
    base,
    rank,
    alpha,
    seed,
    bStd,
    baseModelNameOrPath: baseDir,
    ...(targets ? { targets } : {}),
  });
  io.stdout(
    `wrote ${adapter.dir}: LoRA r=${rank} alpha=${alpha} on ${adapter.modules.length} modules (${JSON.stringify(adapter.config.targetModules)}), ` +
      `seed ${seed}; adapter_model.safetensors ${formatBytes(adapter.bytes)}`,
  );
  return 0;
}

// ---------------------------------------------------------------------------------------------------- train

const TRAIN_KINDS = ['lora', 'adapter', 'full', 'classifier'] as const;
type TrainKind = (typeof TRAIN_KINDS)[number];
const CLASSIFIER_SETS = ['full', 'head', 'bitfit', 'lora', 'adapter'] as const;

export function trainUsage(): string {
  return [
    'usage: tessera train lora|adapter|full|classifier --model <dir> --data <file.jsonl> [--out <dir>] [options]',
    '',
    'what trains (the model directory\'s config.json says encoder or decoder; the data\'s records say the task):',
    '  lora         LoRA factors beside the frozen Linears. decoder: causal LM; encoder: classification ({"text",',
    '               "label"} records) or masked LM ({"text"} records). Writes a PEFT adapter directory',
    '               (adapter_config.json + adapter_model.safetensors) that PEFT loads and the Punica server hot-loads',
    '  adapter      encoder only: Houlsby bottleneck adapters + the task\'s head, classification; writes pet.safetensors',
    '  full         every weight: decoder causal LM, encoder classification or masked LM; writes a model directory',
    '  classifier   encoder sequence classification with --trainable full (default), head, bitfit, lora or adapter',
    '',
    'data (JSONL, one object a line, checked before any step; a bad line exits 1 naming file and line):',
    '  {"prompt": …, "completion": …}   causal LM, loss on the completion (+ EOS)',
    '  {"text": …}                      causal LM (packed into --seq-len blocks), or masked LM on an encoder',
    '  {"text": …, "label": …}          classification; label a name of the config\'s id2label or an index',
    '',
    'options:',
    '  --model DIR            the model directory (config.json, model.safetensors, tokenizer.json); required',
    '  --data FILE            training data (JSONL); required',
    '  --out DIR              where the result is written (default: nothing is written)',
    '  --eval-data FILE       evaluation data (JSONL, same kind); the final eval line reports its loss',
    '  --steps N              optimiser steps; default 100',
    '  --lr X                 peak learning rate; default 1e-3 (lora) / 1e-4 (others)',
    '  --batch N              examples per micro-batch; default 8',
    '  --grad-accum N         micro-batches per step; default 1',
    '  --seq-len N            longest example / packed block in tokens; default the model\'s positions',
    '  --warmup N             linear warm-up steps; default 0',
    '  --schedule S           cosine (default), linear or constant after the warm-up',
    '  --min-lr-ratio X       the schedule\'s floor as a share of --lr; default 0',
    '  --weight-decay X       AdamW decoupled weight decay on matrices; default 0',
    '  --max-grad-norm X      clip the global gradient norm (default 1; "none": no clipping)',
    '  --seed N               shuffling, LoRA init, dropout and masks; default 0',
    '  --eval-every N         evaluate every N steps (and after the last); default 0: only after the last',
    '  --no-pack              do not pack {"text"} records (each must then fit --seq-len)',
    '  --rank R               LoRA rank; default 8',
    '  --alpha A              lora_alpha; default 16',
    '  --targets T            comma-separated module names (PEFT target_modules); default every Linear (decoder),',
    '                         query,value (encoder)',
    '  --dropout X            lora_dropout; default 0',
    '  --rslora               rank-stabilised LoRA (scale alpha / sqrt(r))',
    '  --bottleneck M         adapter bottleneck; default hidden / 12',
    '  --trainable S          classifier: full, head, bitfit, lora or adapter; default full',
    '  --mlm-probability X    masked LM: share of tokens masked; default 0.15',
    '  --checkpoint-every N   write a checkpoint every N steps into --checkpoint-dir',
    '  --checkpoint-dir DIR   where checkpoints go (checkpoint-<step>.safetensors)',
    '  --resume FILE          continue from a checkpoint (same model, kind, data and seed)',
    '  --log-every N          plain progress: a line every N steps; default steps / 10',
    '  --json                 print the result as one JSON object on stdout instead of the summary lines',
    '',
    'Progress (stderr): on a terminal a bar redrawn in place; otherwise (or with NO_COLOR) plain lines, each with',
    'step, loss, learning rate, tokens/s and ETA. Results (stdout): a summary, a final eval line, what was written.',
    '  --help, -h             this text',
  ].join('\n');
}

const TRAIN_STRING_FLAGS = [
  'model', 'data', 'out', 'eval-data', 'steps', 'lr', 'batch', 'grad-accum', 'seq-len', 'warmup', 'schedule', 'min-lr-ratio',
  'weight-decay', 'max-grad-norm', 'seed', 'eval-every', 'rank', 'alpha', 'targets', 'dropout', 'bottleneck', 'trainable',
  'mlm-probability', 'checkpoint-every', 'checkpoint-dir', 'resume', 'log-every',
] as const;
const TRAIN_BOOLEAN_FLAGS = ['no-pack', 'rslora', 'json'] as const;

/** A flag that only some kinds use, given to another: a usage error rather than silently ignored. */
function refuse(values: Partial<Record<string, string>>, flags: readonly string[], why: string): void {
  for (const f of flags) if (values[f] !== undefined) throw new UsageError(`--${f} ${why}`);
}

function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

function formatRate(x: number): string {
  return Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '?';
}

interface ProgressLike {
  step: number;
  steps: number;
  loss: number;
  lr: number;
  inputTokens: number;
  elapsedMs: number;
  evalLoss?: number;
}

/**
 * Progress on stderr: through the io's progress bar when it has one (one bar for the run, its detail the line
 * below, the last evaluation kept); otherwise a plain line every `every` steps, after the first step, after every
 * evaluation and after the last step.
 */
export class TrainProgressReporter {
  private tokens = 0;
  private lastEval: number | undefined;
  private bar: ProgressBar | undefined;
  constructor(private readonly io: CliIo, private readonly every: number) {}

  /** The line's fields (shared by both styles). */
  static describe(p: ProgressLike, tokens: number, evalLoss: number | undefined): string {
    const secs = p.elapsedMs / 1000;
    const tps = secs > 0 ? tokens / secs : Number.NaN;
    const eta = p.step > 0 ? (p.elapsedMs / p.step) * (p.steps - p.step) : Number.NaN;
    return (
      `step ${String(p.step).padStart(String(p.steps).length)}/${p.steps}  loss ${p.loss.toFixed(4)}  lr ${p.lr.toExponential(2)}  ` +
      `${formatRate(tps)} tokens/s  ETA ${formatDuration(eta)}${evalLoss !== undefined ? `  eval ${evalLoss.toFixed(4)}` : ''}`
    );
  }

  update(p: ProgressLike): void {
    this.tokens += p.inputTokens;
    if (p.evalLoss !== undefined) this.lastEval = p.evalLoss;
    if (this.io.progressBar) {
      this.bar ??= this.io.progressBar(p.steps, 'training');
      this.bar.update(p.step, TrainProgressReporter.describe(p, this.tokens, this.lastEval));
      if (p.step === p.steps) this.finish();
      return;
    }
    if (p.step === 1 || p.step === p.steps || p.step % this.every === 0 || p.evalLoss !== undefined) {
      this.io.stderr(TrainProgressReporter.describe(p, this.tokens, p.evalLoss));
    }
  }

  /** Ends the bar (before anything else is printed); idempotent. */
  finish(): void {
    this.bar?.stop();
    this.bar = undefined;
  }

  get totalTokens(): number {
    return this.tokens;
  }
}

async function trainCommand(kind: TrainKind, args: string[], io: CliIo): Promise<number> {
  const { values, help, positionals } = parse(args, TRAIN_STRING_FLAGS, TRAIN_BOOLEAN_FLAGS);
  if (help) {
    io.stdout(trainUsage());
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`train ${kind}: unexpected argument ${positionals.join(' ')} (the model, data and output are --model, --data and --out)`);
  if (values.model === undefined) throw new UsageError('--model <dir> is required');
  if (values.data === undefined) throw new UsageError('--data <file.jsonl> is required');
  const config = readModelConfig(join(resolve(values.model), 'config.json'));

  const steps = integerFlag('--steps', values.steps, 100, 1, 1e9);
  const batch = integerFlag('--batch', values.batch, 8, 1, 1e6);
  const gradAccum = integerFlag('--grad-accum', values['grad-accum'], 1, 1, 1e6);
  const seqLen = values['seq-len'] === undefined ? undefined : integerFlag('--seq-len', values['seq-len'], 0, 2, config.maxPositions);
  const warmup = integerFlag('--warmup', values.warmup, 0, 0, steps);
  const schedule = choice('--schedule', values.schedule, ['cosine', 'linear', 'constant'] as const, 'cosine');
  const minLrRatio = numberFlag('--min-lr-ratio', values['min-lr-ratio'], 0, true);
  if (minLrRatio > 1) throw new UsageError(`--min-lr-ratio must be in [0, 1], got "${values['min-lr-ratio']}"`);
  const weightDecay = numberFlag('--weight-decay', values['weight-decay'], 0, true);
  const maxGradNorm = values['max-grad-norm'] === 'none' ? null : numberFlag('--max-grad-norm', values['max-grad-norm'], 1, false);
  const seed = integerFlag('--seed', values.seed, 0, 0, 0xffffffff);
  const evalEvery = integerFlag('--eval-every', values['eval-every'], 0, 0, 1e9);
  const checkpointEvery = integerFlag('--checkpoint-every', values['checkpoint-every'], 0, 0, 1e9);
  if (checkpointEvery > 0 && values['checkpoint-dir'] === undefined) throw new UsageError('--checkpoint-every needs --checkpoint-dir');
  const logEvery = integerFlag('--log-every', values['log-every'], Math.max(1, Math.floor(steps / 10)), 1, 1e9);
  const lr = values.lr === undefined ? undefined : numberFlag('--lr', values.lr, 0, false);

  // What trains, from the kind (and, for the encoder, the data's records: classification or masked LM).
  const trainableSet = kind === 'classifier' ? choice('--trainable', values.trainable, CLASSIFIER_SETS, 'full') : kind;
  if (kind !== 'classifier') refuse(values, ['trainable'], 'is for train classifier');
  const isLora = trainableSet === 'lora';
  const isAdapter = trainableSet === 'adapter';
  if (!isLora) refuse(values, ['rank', 'alpha', 'targets', 'dropout', 'rslora'], `is a LoRA option (train ${kind}${kind === 'classifier' ? ` --trainable ${trainableSet}` : ''} trains no LoRA)`);
  if (!isAdapter) refuse(values, ['bottleneck'], 'is an adapter option');
  if (config.family === 'decoder' && (kind === 'adapter' || kind === 'classifier' || isAdapter)) {
    throw new UsageError(`train ${kind}: ${values.model} is a decoder (${config.architecture}); adapters and classifiers train an encoder`);
  }
  let task: 'causal-lm' | 'classification' | 'masked-lm';
  const { readJsonl } = await import('./train/data.js');
  if (config.family === 'decoder') task = 'causal-lm';
  else if (kind === 'classifier' || kind === 'adapter') task = 'classification';
  else task = readJsonl(values.data).kind === 'labeled' ? 'classification' : 'masked-lm';
  if (task === 'classification' && config.family === 'encoder' && config.labels.length === 0) {
    throw new UsageError(`train ${kind}: ${values.model} is a ${config.architecture} without a classifier (no id2label); classification needs BertForSequenceClassification`);
  }
  if (task !== 'causal-lm') refuse(values, ['no-pack'], 'is for causal LM on a decoder');
  if (task !== 'masked-lm') refuse(values, ['mlm-probability'], 'is for masked LM ({"text"} records on an encoder)');

  let trainable: TrainableSpec;
  if (isLora) {
    const targets = values.targets?.split(',').map((t) => t.trim());
    if (targets?.some((t) => t === '')) throw new UsageError(`--targets must be a comma-separated list of module names, got "${values.targets}"`);
    const dropout = numberFlag('--dropout', values.dropout, 0, true);
    if (dropout >= 1) throw new UsageError(`--dropout must be in [0, 1), got "${values.dropout}"`);
    trainable = {
      kind: 'lora',
      r: integerFlag('--rank', values.rank, 8, 1, 65536),
      alpha: numberFlag('--alpha', values.alpha, 16, false),
      dropout,
      useRslora: values.rslora === 'true',
      ...(targets ? { targetModules: targets } : {}),
    };
  } else if (isAdapter) {
    trainable = { kind: 'adapter', ...(values.bottleneck !== undefined ? { bottleneck: integerFlag('--bottleneck', values.bottleneck, 0, 1, 1e6) } : {}) };
  } else {
    trainable = { kind: trainableSet as 'full' | 'head' | 'bitfit' };
  }
  const mlmProbability = values['mlm-probability'] === undefined ? undefined : numberFlag('--mlm-probability', values['mlm-probability'], 0, false);
  if (mlmProbability !== undefined && mlmProbability >= 1) throw new UsageError(`--mlm-probability must be in (0, 1), got "${values['mlm-probability']}"`);

  const reporter = new TrainProgressReporter(io, logEvery);
  const options = {
    model: values.model,
    data: values.data,
    ...(values['eval-data'] !== undefined ? { evalData: values['eval-data'] } : {}),
    ...(values.out !== undefined ? { out: values.out } : {}),
    trainable,
    steps,
    batchSize: batch,
    gradAccum,
    ...(lr !== undefined ? { lr } : {}),
    warmupSteps: warmup,
    schedule,
    minLrRatio,
    weightDecay,
    maxGradNorm,
    seed,
    evalEvery,
    ...(seqLen !== undefined ? { maxLength: seqLen } : {}),
    ...(task === 'causal-lm' ? { pack: values['no-pack'] !== 'true' } : {}),
    ...(checkpointEvery > 0 ? { checkpointEvery, checkpointDir: values['checkpoint-dir']! } : {}),
    ...(values.resume !== undefined ? { resumeFrom: values.resume } : {}),
    onProgress: (p: ProgressLike) => reporter.update(p),
  };
  const what = `${kind}${kind === 'classifier' ? ` (${trainableSet})` : ''}, ${task} on the ${config.family} ${values.model}`;
  io.stderr(`training ${what}: ${steps} steps of ${batch}${gradAccum > 1 ? ` x ${gradAccum}` : ''} examples`);

  const { train, trainClassifier, trainMaskedLm } = await import('./train/trainer.js');
  const started = performance.now();
  let run;
  try {
    if (task === 'causal-lm') run = train(options);
    else if (task === 'classification') run = trainClassifier(options);
    else run = trainMaskedLm({ ...options, ...(mlmProbability !== undefined ? { mlmProbability } : {}) });
  } finally {
    reporter.finish();
  }
  try {
    // Training time: the trainer's clock (from its construction: after the model and data were loaded).
    const last = run.history[run.history.length - 1];
    const ms = last?.elapsedMs ?? performance.now() - started;
    const first = run.history[0];
    const result = {
      kind,
      trainable: trainable.kind,
      task,
      family: config.family,
      steps: run.steps,
      firstLoss: first?.loss ?? null,
      loss: run.loss,
      evalLoss: run.evalLoss ?? null,
      tokens: reporter.totalTokens,
      seconds: ms / 1000,
      tokensPerSecond: reporter.totalTokens / (ms / 1000),
      trainableParameters: run.trainable.params.reduce((n, p) => n + p.value.numel, 0),
      out: run.written?.dir ?? null,
      files: run.written?.files ?? [],
    };
    if (values.json === 'true') {
      io.stdout(JSON.stringify(result));
      return 0;
    }
    io.stdout(
      `trained ${what}: ${result.steps} steps, ${result.trainableParameters.toLocaleString('en-US')} trainable parameters, ` +
        `${result.tokens.toLocaleString('en-US')} tokens in ${result.seconds.toFixed(1)} s (${formatRate(result.tokensPerSecond)} tokens/s); ` +
        `loss ${first ? `${first.loss.toFixed(4)} -> ` : ''}${run.loss.toFixed(4)}`,
    );
    const unit = task === 'classification' ? 'sequence' : 'token';
    io.stdout(
      run.evalLoss !== undefined
        ? `eval: loss ${run.evalLoss.toFixed(4)} per ${unit}${task === 'classification' ? '' : `, perplexity ${Math.exp(run.evalLoss).toFixed(3)}`} (${values['eval-data']})`
        : `eval: no --eval-data; last training loss ${run.loss.toFixed(4)} per ${unit}`,
    );
    io.stdout(run.written ? `wrote ${run.written.dir}: ${run.written.files.join(', ')}` : 'wrote nothing (no --out)');
    return 0;
  } finally {
    run.dispose();
  }
}

/** A model directory's config.json, for train: problems are a bad --model value. */
function readModelConfig(path: string): ModelConfig {
  try {
    return readBaseConfig(path);
  } catch (err) {
    if (err instanceof UsageError) throw new UsageError(err.message.replace(/^--base/, '--model'));
    throw err;
  }
}

/** The base model's config.json; any problem is a bad --base value (a UsageError naming the file and the key). */
export function readBaseConfig(path: string): ModelConfig {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new UsageError(`--base: cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    return parseHfConfig(json, path);
  } catch (err) {
    if (err instanceof ConfigError) throw new UsageError(`--base: ${err.message}`);
    throw err;
  }
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href;
if (invokedDirectly) {
  process.exitCode = await main(process.argv.slice(2));
}

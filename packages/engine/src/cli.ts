/**
 * The `tessera` command line:
 *   tessera gen model <dir> --family encoder|decoder [--size tiny|mini] [--seed N] [--dtype f32|f16|bf16] [--sharpen X]
 *   tessera gen adapter <dir> --base <modelDir> [--rank R] [--alpha A] [--targets a,b] [--seed N] [--b-std S]
 *   tessera --help | tessera gen --help
 * Results on stdout, progress (mini models) and errors on stderr. Exit codes: 0 ok, 1 the command failed,
 * 2 a usage error (unknown command or flag, bad value).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import type { ModelConfig } from './config.js';
import { ConfigError } from './errors.js';
import { parseHfConfig } from './formats/hf-config.js';

export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
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
    '',
    'Run `tessera gen --help` for the options.',
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
      io.stderr(`tessera: ${err.message}\n\n${command === 'gen' ? genUsage() : usage()}`);
      return 2;
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

/** parseArgs with string-valued flags `names` plus --help / -h; strict, so unknown flags are usage errors. */
function parse(args: string[], names: readonly string[]): { values: Partial<Record<string, string>>; help: boolean; positionals: string[] } {
  const options: NonNullable<Parameters<typeof parseArgs>[0]>['options'] = { help: { type: 'boolean', short: 'h' } };
  for (const name of names) options[name] = { type: 'string' };
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const { help, ...values } = parsed.values as Record<string, string | boolean | undefined>;
  return { values: values as Partial<Record<string, string>>, help: help === true, positionals: parsed.positionals };
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
  const model = generateModel(dir, {
    family,
    size,
    seed,
    dtype,
    sharpen,
    ...(size === 'mini'
      ? {
          onProgress: ({ tensor, done, total }: { tensor: string; done: number; total: number }) => {
            log(`${String(done).padStart(String(total).length)}/${total} ${tensor}`);
            if (done === total) log('writing model.safetensors');
          },
        }
      : {}),
  });
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

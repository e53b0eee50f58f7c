/**
 * `fortunes-demo build | perplexity | corpus`: the recipe's command line (scripts/build-fortunes-demo.mjs runs
 * `build` under `nice -n 10`). Exit codes: 0 ok, 1 the run failed (the corpus missing included), 2 a usage error.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { FORTUNES_DIR, MissingCorpusError, readFortunes, writeCorpus } from './corpus.js';
import { buildDemo, DEFAULT_RECIPE, DEMO_MODEL_NAME, perplexityReport, type RecipeOptions } from './recipe.js';

/** apps/fortunes-demo. */
export const DEMO_PACKAGE_DIR = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the committed model and adapters live. */
export const DEMO_OUT_DIR = join(DEMO_PACKAGE_DIR, 'model');
/** The committed perplexity report. */
export const DEMO_REPORT = join(DEMO_PACKAGE_DIR, 'PERPLEXITY.md');
/** Scratch space of the recipe (git-ignored: .tessera/ at the repository root). */
export const DEMO_WORK_DIR = join(DEMO_PACKAGE_DIR, '..', '..', '.tessera', 'fortunes-work');

export const USAGE = `usage: fortunes-demo <command> [options]

commands:
  build        run the whole recipe: corpus, tokenizer, pretraining, bf16, one LoRA per category, perplexity report
  perplexity   score every held-out split with the base model and every adapter; print the Markdown table
  corpus       only write the train / held-out JSONL of every category

options:
  --fortunes-dir <dir>      the fortune files (default ${FORTUNES_DIR})
  --out <dir>               build: where the model and adapters go (default apps/fortunes-demo/model)
  --work <dir>              scratch: corpus JSONL, f32 checkpoints (default .tessera/fortunes-work)
  --seed <n>                every seed of the recipe (default ${DEFAULT_RECIPE.seed})
  --pretrain-steps <n>      optimiser steps of pretraining (default ${DEFAULT_RECIPE.pretrainSteps})
  --lora-max-steps <n>      cap on each LoRA's steps (default ${DEFAULT_RECIPE.loraMaxSteps})
  --categories <a,b,...>    categories that get a LoRA (default ${DEFAULT_RECIPE.loraCategories.join(',')})
  --report <file>           where the perplexity table goes (default apps/fortunes-demo/PERPLEXITY.md; build: "none" skips it)
  -h, --help
`;

export class UsageError extends Error {
  readonly exitCode = 2;
}

export interface ParsedCli {
  command: 'build' | 'perplexity' | 'corpus' | 'help';
  recipe: RecipeOptions;
}

function intFlag(name: string, value: string | undefined, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw new UsageError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(value)}`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be an integer >= ${min}, got ${value}`);
  return n;
}

/** Parses the command line (no side effects). Throws UsageError for anything it cannot accept. */
export function parseCli(argv: readonly string[]): ParsedCli {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        'fortunes-dir': { type: 'string' },
        out: { type: 'string' },
        work: { type: 'string' },
        seed: { type: 'string' },
        'pretrain-steps': { type: 'string' },
        'lora-max-steps': { type: 'string' },
        categories: { type: 'string' },
        report: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const { values, positionals } = parsed;
  const command = values.help ? 'help' : positionals[0];
  if (command === undefined) throw new UsageError('missing command: build, perplexity or corpus');
  if (!['build', 'perplexity', 'corpus', 'help'].includes(command)) throw new UsageError(`unknown command ${JSON.stringify(command)}: expected build, perplexity or corpus`);
  if (positionals.length > 1) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[1])}`);
  let categories = DEFAULT_RECIPE.loraCategories;
  if (values.categories !== undefined) {
    categories = values.categories.split(',').map((c) => c.trim()).filter((c) => c !== '');
    if (categories.length === 0 || categories.some((c) => !/^[a-z0-9-]+$/.test(c))) throw new UsageError(`--categories must be a comma-separated list of category names, got ${JSON.stringify(values.categories)}`);
    if (new Set(categories).size !== categories.length) throw new UsageError(`--categories names a category twice: ${values.categories}`);
  }
  const loraMaxSteps = intFlag('lora-max-steps', values['lora-max-steps'], DEFAULT_RECIPE.loraMaxSteps, 1);
  const report = values.report === 'none' ? null : resolve(values.report ?? DEMO_REPORT);
  if (report === null && command === 'perplexity') throw new UsageError('--report none: the perplexity command exists to write the report');
  const recipe: RecipeOptions = {
    ...DEFAULT_RECIPE,
    out: resolve(values.out ?? DEMO_OUT_DIR),
    work: resolve(values.work ?? DEMO_WORK_DIR),
    fortunesDir: resolve(values['fortunes-dir'] ?? FORTUNES_DIR),
    seed: intFlag('seed', values.seed, DEFAULT_RECIPE.seed, 0),
    pretrainSteps: intFlag('pretrain-steps', values['pretrain-steps'], DEFAULT_RECIPE.pretrainSteps, 1),
    loraCategories: categories,
    loraMaxSteps,
    loraMinSteps: Math.min(DEFAULT_RECIPE.loraMinSteps, loraMaxSteps),
    report,
  };
  if (recipe.seed > 0xffffffff) throw new UsageError(`--seed must fit in 32 bits, got ${recipe.seed}`);
  return { command: command as ParsedCli['command'], recipe };
}

/** Runs a command; returns the exit code. Output goes through `out` / `err`. */
export function main(argv: readonly string[], out: (s: string) => void = (s) => process.stdout.write(s), err: (s: string) => void = (s) => process.stderr.write(s)): number {
  let cli: ParsedCli;
  try {
    cli = parseCli(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      err(`fortunes-demo: ${e.message}\n\n${USAGE}`);
      return 2;
    }
    throw e;
  }
  const r = cli.recipe;
  try {
    switch (cli.command) {
      case 'help':
        out(USAGE);
        return 0;
      case 'corpus': {
        const files = writeCorpus(join(r.work, 'corpus'), { seed: r.seed, heldOutFraction: r.heldOutFraction, fortunesDir: r.fortunesDir });
        for (const c of files.categories) out(`${c.name}: ${c.trainCount} train, ${c.heldOutCount} held out\n`);
        out(`wrote ${join(r.work, 'corpus')}\n`);
        return 0;
      }
      case 'build':
        readFortunes(r.fortunesDir); // fail before anything is written when the corpus is absent
        buildDemo(r, (line) => out(`${line}\n`));
        return 0;
      case 'perplexity': {
        readFortunes(r.fortunesDir);
        writeCorpus(join(r.work, 'corpus'), { seed: r.seed, heldOutFraction: r.heldOutFraction, fortunesDir: r.fortunesDir });
        const modelDir = join(r.out, DEMO_MODEL_NAME);
        if (!existsSync(modelDir)) throw new Error(`${modelDir} does not exist: run \`node scripts/build-fortunes-demo.mjs\` first`);
        const table = perplexityReport({ modelDir, adaptersDir: join(r.out, 'adapters'), corpusDir: join(r.work, 'corpus'), categories: r.loraCategories, log: (l) => out(`${l}\n`) });
        out(`\n${table.markdown}`);
        writeFileSync(r.report!, table.markdown);
        out(`wrote ${r.report}\n`);
        if (table.failures.length > 0) out(`note: the own adapter is not the best one for ${table.failures.join(', ')}\n`);
        return 0;
      }
    }
  } catch (e) {
    if (e instanceof MissingCorpusError) {
      err(`fortunes-demo: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  process.exitCode = main(process.argv.slice(2));
}

/**
 * The recipe: fortunes corpus → byte-level BPE tokenizer (the engine's builder, learned on the train split) → a
 * small Llama-style decoder (the engine's generator, seeded) → full pretraining on every category's train split
 * (the engine's trainer) → bf16 → one LoRA per chosen category on the bf16 base → bf16 adapters → the perplexity
 * report. Every random choice is seeded; the same options give the same files on the same machine.
 */
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { toHalfBits } from '@tessera/native';
import {
  buildByteLevelBpeTokenizer,
  generateModel,
  loadDecoder,
  loadLoraAdapter,
  SafetensorsFile,
  type SafetensorsEntry,
  TextTokenizer,
  train,
  trainLora,
  type TrainProgress,
  writeSafetensors,
  writeTokenizerFiles,
} from '@tessera/engine';

import { type CorpusFiles, FORTUNES_DIR, writeCorpus } from './corpus.js';
import { perplexityOf, readTexts, scoreTexts, type NllResult } from './perplexity.js';

export const DEMO_MODEL_NAME = 'fortunes-llama';

/** The categories that get a LoRA: eight of the largest, chosen to differ in register. */
export const DEFAULT_LORA_CATEGORIES: readonly string[] = ['computers', 'definitions', 'literature', 'people', 'politics', 'science', 'songs-poems', 'work'];

export interface RecipeOptions {
  /** Where the served files go: `<out>/fortunes-llama` and `<out>/adapters/<category>`. */
  out: string;
  /** Scratch space: the corpus JSONL, the f32 pretrained model, f32 adapters. */
  work: string;
  fortunesDir: string;
  seed: number;
  heldOutFraction: number;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  intermediateSize: number;
  maxPositions: number;
  /** Packed block length in training. */
  seqLen: number;
  batch: number;
  pretrainSteps: number;
  pretrainLr: number;
  loraCategories: readonly string[];
  loraRank: number;
  loraAlpha: number;
  loraLr: number;
  /** LoRA steps = clamp(round(loraEpochs · train tokens / (batch · seqLen)), loraMinSteps, loraMaxSteps). */
  loraEpochs: number;
  loraMinSteps: number;
  loraMaxSteps: number;
  /** Write the perplexity report (Markdown) here; null: skip the report. */
  report: string | null;
}

export const DEFAULT_RECIPE: Omit<RecipeOptions, 'out' | 'work' | 'report'> = {
  fortunesDir: FORTUNES_DIR,
  seed: 20_261_126,
  heldOutFraction: 0.1,
  vocabSize: 2048,
  hiddenSize: 128,
  numLayers: 4,
  numHeads: 4,
  intermediateSize: 384,
  maxPositions: 256,
  seqLen: 128,
  batch: 16,
  pretrainSteps: 500,
  pretrainLr: 3e-3,
  loraCategories: DEFAULT_LORA_CATEGORIES,
  loraRank: 8,
  loraAlpha: 16,
  loraLr: 2e-3,
  loraEpochs: 2,
  loraMinSteps: 15,
  loraMaxSteps: 25,
};

type Log = (line: string) => void;

function fmt(n: number): string {
  return n.toLocaleString('en-US');
}

function progressLogger(label: string, log: Log, every: number): (p: TrainProgress) => void {
  let tokens = 0;
  let first = -1; // a resumed run starts past step 1
  return (p) => {
    tokens += p.inputTokens;
    if (first < 0) first = p.step - 1;
    if (p.step % every !== 0 && p.step !== p.steps && p.step !== first + 1) return;
    const secs = p.elapsedMs / 1000;
    const rate = tokens / Math.max(secs, 1e-3);
    const eta = ((p.steps - p.step) * secs) / (p.step - first);
    log(`${label} step ${p.step}/${p.steps}  loss ${p.loss.toFixed(4)}  lr ${p.lr.toExponential(2)}  ${fmt(Math.round(rate))} tokens/s  ${secs.toFixed(0)}s  ETA ${eta.toFixed(0)}s${p.evalLoss !== undefined ? `  eval ${p.evalLoss.toFixed(4)}` : ''}`);
  };
}

/** Rewrites a safetensors file with every f32 tensor as bf16 (round to nearest even), metadata kept. */
export function convertToBf16(path: string): void {
  const file = SafetensorsFile.open(path);
  const entries: Array<[string, SafetensorsEntry]> = [];
  const metadata = { ...file.metadata };
  try {
    for (const name of file.names()) {
      const info = file.info(name);
      const data = file.readHost(name);
      if (info.dtype === 'f32') entries.push([name, { dtype: 'bf16', shape: info.shape, data: toHalfBits(data as Float32Array, 'bf16') }]);
      else entries.push([name, { dtype: info.dtype, shape: info.shape, data } as SafetensorsEntry]);
    }
  } finally {
    file.close();
  }
  writeSafetensors(path, entries, metadata);
}

export interface BuildSummary {
  corpus: CorpusFiles;
  parameters: number;
  pretrain: { steps: number; loss: number; evalLoss?: number; seconds: number; tokensPerSecond: number };
  adapters: Array<{ category: string; steps: number; loss: number; seconds: number }>;
}

/** The texts of every train split, every other quotation: what the BPE merges are learned on. */
function tokenizerCorpus(corpus: CorpusFiles): string {
  const texts: string[] = [];
  for (const c of corpus.categories) readTexts(c.train).forEach((t, i) => i % 2 === 0 && texts.push(t));
  return texts.join('\n');
}

function trainTokens(path: string, tokenizer: TextTokenizer): number {
  return readTexts(path).reduce((n, t) => n + tokenizer.encode(t).length + 1, 0);
}

/** Runs the whole recipe, printing progress through `log`. */
export function buildDemo(options: RecipeOptions, log: Log = (l) => process.stdout.write(`${l}\n`)): BuildSummary {
  const o = options;
  const t0 = Date.now();
  const stamp = () => `[${((Date.now() - t0) / 1000).toFixed(0).padStart(5)}s]`;
  const say: Log = (l) => log(`${stamp()} ${l}`);
  for (const c of o.loraCategories) if (!/^[a-z0-9-]+$/.test(c)) throw new RangeError(`bad category name ${JSON.stringify(c)}`);

  say(`corpus: reading ${o.fortunesDir}, held-out fraction ${o.heldOutFraction}, seed ${o.seed}`);
  const corpus = writeCorpus(join(o.work, 'corpus'), { seed: o.seed, heldOutFraction: o.heldOutFraction, fortunesDir: o.fortunesDir });
  const missing = o.loraCategories.filter((c) => !corpus.categories.some((x) => x.name === c));
  if (missing.length > 0) throw new RangeError(`LoRA categories not in the corpus: ${missing.join(', ')} (have: ${corpus.categories.map((c) => c.name).join(', ')})`);
  const totalTrain = corpus.categories.reduce((n, c) => n + c.trainCount, 0);
  const totalHeld = corpus.categories.reduce((n, c) => n + c.heldOutCount, 0);
  say(`corpus: ${corpus.categories.length} categories, ${fmt(totalTrain)} train / ${fmt(totalHeld)} held-out quotations`);

  say(`tokenizer: learning ${o.vocabSize - 2} byte-level BPE ids on half of the train split`);
  const bpe = buildByteLevelBpeTokenizer(o.vocabSize, { corpus: tokenizerCorpus(corpus), modelMaxLength: o.maxPositions });
  say(`tokenizer: ${bpe.merges.length} merges`);

  const f32Dir = join(o.work, 'init');
  rmSync(f32Dir, { recursive: true, force: true });
  const generated = generateModel(f32Dir, {
    family: 'decoder',
    seed: o.seed,
    overrides: {
      vocabSize: o.vocabSize, hiddenSize: o.hiddenSize, numLayers: o.numLayers, numHeads: o.numHeads, numKvHeads: o.numHeads,
      intermediateSize: o.intermediateSize, maxPositions: o.maxPositions, tieWordEmbeddings: true,
    },
  });
  writeTokenizerFiles(f32Dir, bpe);
  const parameters = generated.bytes / 4;
  say(`model: Llama-style, hidden ${o.hiddenSize}, ${o.numLayers} layers, ${o.numHeads} heads, FFN ${o.intermediateSize}, vocabulary ${o.vocabSize} (tied), ${fmt(parameters)} parameters`);

  const tokenizer = TextTokenizer.fromDir(f32Dir);
  const pretrainTokens = trainTokens(corpus.allTrain, tokenizer);
  say(`pretrain: ${o.pretrainSteps} steps × ${o.batch} blocks of ${o.seqLen} tokens (${((o.pretrainSteps * o.batch * o.seqLen) / pretrainTokens).toFixed(2)} epochs of ${fmt(pretrainTokens)} tokens), lr ${o.pretrainLr}`);
  const pretrainedDir = join(o.work, 'pretrained');
  rmSync(pretrainedDir, { recursive: true, force: true });
  // Checkpoints every 50 steps: a run that is killed (a shared machine's OOM killer) resumes where it stopped,
  // bit for bit, when it is started again with the same settings.
  const ckptDir = join(o.work, 'checkpoints');
  const { out: _o, work: _w, report: _r, loraCategories: _l, ...stampFields } = o;
  const recipeStamp = `${JSON.stringify(stampFields)}\n`;
  const stampPath = join(ckptDir, 'recipe.json');
  let resumeFrom: string | undefined;
  if (existsSync(stampPath) && readFileSync(stampPath, 'utf8') === recipeStamp) {
    const steps = readdirSync(ckptDir).map((f) => /^checkpoint-(\d+)\.safetensors$/.exec(f)?.[1]).filter((x): x is string => x !== undefined).map(Number);
    if (steps.length > 0) resumeFrom = join(ckptDir, `checkpoint-${Math.max(...steps)}.safetensors`);
  } else {
    rmSync(ckptDir, { recursive: true, force: true });
    mkdirSync(ckptDir, { recursive: true });
    writeFileSync(stampPath, recipeStamp);
  }
  if (resumeFrom) say(`pretrain: resuming from ${resumeFrom}`);
  const ptStart = Date.now();
  let ptTokens = 0;
  const ptLog = progressLogger('pretrain', say, 10);
  const pre = train({
    model: f32Dir, data: corpus.allTrain, evalData: corpus.allHeldOut, out: pretrainedDir, trainable: { kind: 'full' },
    steps: o.pretrainSteps, batchSize: o.batch, maxLength: o.seqLen, lr: o.pretrainLr, warmupSteps: Math.min(50, Math.ceil(o.pretrainSteps / 10)),
    minLrRatio: 0.1, weightDecay: 0.01, seed: o.seed, checkpointEvery: 50, checkpointDir: ckptDir, ...(resumeFrom ? { resumeFrom } : {}),
    onProgress: (p) => { ptTokens += p.inputTokens; ptLog(p); },
  });
  pre.dispose();
  const ptSeconds = (Date.now() - ptStart) / 1000;
  say(`pretrain: done in ${ptSeconds.toFixed(0)}s, loss ${pre.loss.toFixed(4)}${pre.evalLoss !== undefined ? `, held-out loss ${pre.evalLoss.toFixed(4)} (perplexity ${Math.exp(pre.evalLoss).toFixed(2)})` : ''}`);

  // The served base: bf16 weights, the config saying so.
  const staging = join(o.out, '.staging');
  rmSync(staging, { recursive: true, force: true });
  const modelDir = join(staging, DEMO_MODEL_NAME);
  cpSync(pretrainedDir, modelDir, { recursive: true });
  convertToBf16(join(modelDir, 'model.safetensors'));
  const cfgPath = join(modelDir, 'config.json');
  writeFileSync(cfgPath, `${JSON.stringify({ ...JSON.parse(readFileSync(cfgPath, 'utf8')), torch_dtype: 'bfloat16' }, null, 2)}\n`);
  say(`model: bf16 copy in ${modelDir}`);

  const adapters: BuildSummary['adapters'] = [];
  o.loraCategories.forEach((category, i) => {
    const files = corpus.categories.find((c) => c.name === category)!;
    const tokens = trainTokens(files.train, tokenizer);
    const steps = Math.min(o.loraMaxSteps, Math.max(o.loraMinSteps, Math.round((o.loraEpochs * tokens) / (o.batch * o.seqLen))));
    say(`lora ${i + 1}/${o.loraCategories.length}: ${category}, ${fmt(files.trainCount)} quotations (${fmt(tokens)} tokens), ${steps} steps, rank ${o.loraRank}`);
    const dir = join(staging, 'adapters', category);
    const start = Date.now();
    const run = trainLora({
      model: modelDir, data: files.train, out: dir, steps, batchSize: o.batch, maxLength: o.seqLen, lr: o.loraLr,
      warmupSteps: Math.ceil(steps / 10), minLrRatio: 0.1, seed: o.seed + 1 + i, lora: { r: o.loraRank, alpha: o.loraAlpha },
      onProgress: progressLogger(`lora ${category}`, say, 10),
    });
    run.dispose();
    convertToBf16(join(dir, 'adapter_model.safetensors'));
    const acfg = join(dir, 'adapter_config.json');
    writeFileSync(acfg, `${JSON.stringify({ ...JSON.parse(readFileSync(acfg, 'utf8')), base_model_name_or_path: DEMO_MODEL_NAME }, null, 2)}\n`);
    adapters.push({ category, steps, loss: run.loss, seconds: (Date.now() - start) / 1000 });
  });

  const summary: BuildSummary = {
    corpus,
    parameters,
    pretrain: { steps: o.pretrainSteps, loss: pre.loss, ...(pre.evalLoss !== undefined ? { evalLoss: pre.evalLoss } : {}), seconds: ptSeconds, tokensPerSecond: ptTokens / ptSeconds },
    adapters,
  };
  const { out: _out, work: _work, report: _report, fortunesDir: _dir, ...recipe } = o;
  writeFileSync(join(staging, 'recipe.json'), `${JSON.stringify({
    recipe,
    corpus: corpus.categories.map((c) => ({ name: c.name, train: c.trainCount, heldOut: c.heldOutCount })),
    parameters,
    pretrain: { steps: summary.pretrain.steps, loss: round(summary.pretrain.loss), evalLoss: summary.pretrain.evalLoss !== undefined ? round(summary.pretrain.evalLoss) : null },
    adapters: adapters.map((a) => ({ category: a.category, steps: a.steps, loss: round(a.loss) })),
  }, null, 2)}\n`);

  // Swap the finished files in: the old model and adapters stay until everything new is written.
  for (const name of [DEMO_MODEL_NAME, 'adapters', 'recipe.json']) {
    rmSync(join(o.out, name), { recursive: true, force: true });
    renameSync(join(staging, name), join(o.out, name));
  }
  rmSync(staging, { recursive: true, force: true });
  say(`wrote ${o.out}: ${DEMO_MODEL_NAME}/ (bf16) and adapters/${o.loraCategories.length > 0 ? `{${o.loraCategories.join(',')}}` : ''}`);

  if (o.report) {
    say('perplexity: scoring every held-out split with the base and every adapter');
    const table = perplexityReport({ modelDir: join(o.out, DEMO_MODEL_NAME), adaptersDir: join(o.out, 'adapters'), corpusDir: join(o.work, 'corpus'), categories: o.loraCategories, log: say });
    writeFileSync(o.report, table.markdown);
    say(`perplexity: wrote ${o.report}`);
  }
  return summary;
}

function round(x: number): number {
  return Math.round(x * 1e4) / 1e4;
}

export interface PerplexityTable {
  /** ppl[category][config]: config 'base' or an adapter's name. */
  ppl: Record<string, Record<string, number>>;
  tokens: Record<string, number>;
  markdown: string;
  /** Categories whose own adapter did not give the lowest perplexity among the adapters. */
  failures: string[];
}

/**
 * Held-out perplexity of each category under the base and under every adapter. The Markdown table has, per
 * category: base, own adapter, the best other adapter (and which), the mean over the other adapters.
 */
export function perplexityReport(options: { modelDir: string; adaptersDir: string; corpusDir: string; categories: readonly string[]; log?: Log }): PerplexityTable {
  const log = options.log ?? (() => {});
  const model = loadDecoder(options.modelDir);
  const tokenizer = TextTokenizer.fromDir(options.modelDir);
  const adapters = new Map(options.categories.map((c) => [c, loadLoraAdapter(join(options.adaptersDir, c), { base: model.config, name: c })]));
  const ppl: PerplexityTable['ppl'] = {};
  const tokens: PerplexityTable['tokens'] = {};
  try {
    for (const category of options.categories) {
      const path = join(options.corpusDir, `${category}.heldout.jsonl`);
      if (!existsSync(path)) throw new Error(`${path} is missing: run the recipe's corpus step first`);
      const texts = readTexts(path);
      const row: Record<string, number> = {};
      const base: NllResult = scoreTexts(model, tokenizer, texts, null);
      row.base = perplexityOf(base);
      tokens[category] = base.tokens;
      for (const [name, adapter] of adapters) row[name] = perplexityOf(scoreTexts(model, tokenizer, texts, adapter));
      ppl[category] = row;
      log(`perplexity ${category}: base ${row.base!.toFixed(2)}, own ${row[category]!.toFixed(2)} (${fmt(base.tokens)} tokens, ${texts.length} quotations)`);
    }
  } finally {
    for (const a of adapters.values()) a.dispose();
    model.dispose();
  }
  const failures: string[] = [];
  const lines = [
    '| held-out category | tokens | base | own adapter | best other adapter | mean of the other adapters | own adapter is best |',
    '|---|---:|---:|---:|---:|---:|:---:|',
  ];
  for (const category of options.categories) {
    const row = ppl[category]!;
    const others = options.categories.filter((c) => c !== category);
    const best = others.reduce((a, b) => (row[b]! < row[a]! ? b : a), others[0]!);
    const mean = others.reduce((n, c) => n + row[c]!, 0) / Math.max(others.length, 1);
    const ok = others.every((c) => row[category]! < row[c]!);
    if (!ok) failures.push(category);
    lines.push(`| ${category} | ${fmt(tokens[category]!)} | ${row.base!.toFixed(2)} | ${row[category]!.toFixed(2)} | ${others.length > 0 ? `${row[best]!.toFixed(2)} (${best})` : '–'} | ${others.length > 0 ? mean.toFixed(2) : '–'} | ${ok ? 'yes' : '**no**'} |`);
  }
  const header = ['| held-out category | base | ' + options.categories.join(' | ') + ' |', '|---|---:|' + options.categories.map(() => '---:').join('|') + '|'];
  const matrix = options.categories.map((c) => `| ${c} | ${ppl[c]!.base!.toFixed(2)} | ${options.categories.map((a) => (a === c ? `**${ppl[c]![a]!.toFixed(2)}**` : ppl[c]![a]!.toFixed(2))).join(' | ')} |`);
  const markdown = `${lines.join('\n')}\n\nEvery adapter on every held-out split (rows: the split, columns: the adapter; the own adapter in bold):\n\n${[...header, ...matrix].join('\n')}\n`;
  return { ppl, tokens, markdown, failures };
}

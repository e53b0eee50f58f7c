/**
 * Training data: JSONL records (`{"text"}`, `{"prompt", "completion"}`, `{"text", "label"}`), tokenized with the
 * model's tokenizer into examples, packed (plain text) or padded (prompt/completion) into causal-LM batches, and
 * drawn in a seeded shuffled order. Every record is checked while it is read and tokenized, so a bad line fails
 * the run with its line number before the first step.
 */
import { readFileSync } from 'node:fs';
import { SplitMix32, streamState } from '@tessera/core';
import type { TextTokenizer } from '../formats/tokenizer.js';
import type { LmBatch } from './decoder.js';
import { TrainDataError } from './errors.js';

/** Targets equal to this are not predicted (prompt tokens, padding): PyTorch's ignore_index. */
export const IGNORE_INDEX = -100;

export type TextRecord = { text: string };
export type PromptCompletionRecord = { prompt: string; completion: string };
export type LabeledRecord = { text: string; label: string | number };
export type TrainRecord = TextRecord | PromptCompletionRecord | LabeledRecord;

/** What a data set's records are: every record of a set must be the same kind. */
export type RecordKind = 'text' | 'prompt-completion' | 'labeled';

/** Records with where they came from (line numbers for errors). */
export interface TrainDataset {
  path: string;
  kind: RecordKind;
  records: TrainRecord[];
  /** 1-based source line of each record (its index + 1 for records passed in memory). */
  lines: number[];
}

export const MEMORY_PATH = '<memory>';

function kindOf(value: unknown, path: string, line: number): RecordKind {
  const fail = (why: string): never => {
    throw new TrainDataError(path, line, `${path}:${line}: ${why}`);
  };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return fail('a record must be a JSON object');
  const r = value as Record<string, unknown>;
  const str = (key: string) => {
    if (typeof r[key] !== 'string') fail(`"${key}" must be a string, got ${JSON.stringify(r[key])}`);
    if ((r[key] as string).length === 0) fail(`"${key}" is empty`);
  };
  if ('prompt' in r || 'completion' in r) {
    str('prompt');
    str('completion');
    return 'prompt-completion';
  }
  if ('text' in r) {
    str('text');
    if ('label' in r) {
      if (typeof r.label !== 'string' && !Number.isInteger(r.label)) fail(`"label" must be a string or an integer, got ${JSON.stringify(r.label)}`);
      return 'labeled';
    }
    return 'text';
  }
  return fail(`a record needs "text", "prompt" + "completion", or "text" + "label"; it has ${JSON.stringify(Object.keys(r))}`);
}

/** Checks records passed in memory (their index + 1 is their "line"). */
export function datasetFromRecords(records: readonly unknown[], path = MEMORY_PATH): TrainDataset {
  if (records.length === 0) throw new TrainDataError(path, 0, `${path}: no records`);
  let kind: RecordKind | null = null;
  records.forEach((r, i) => {
    const k = kindOf(r, path, i + 1);
    if (kind !== null && k !== kind) throw new TrainDataError(path, i + 1, `${path}:${i + 1}: a ${k} record in a ${kind} data set (every record must have the same fields)`);
    kind = k;
  });
  return { path, kind: kind!, records: records as TrainRecord[], lines: records.map((_, i) => i + 1) };
}

/** Reads a JSONL file (one JSON object per line; blank lines skipped). */
export function readJsonl(path: string): TrainDataset {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new TrainDataError(path, 0, `${path}: cannot read the data file (${(cause as Error).message})`, { cause });
  }
  const records: unknown[] = [];
  const lines: number[] = [];
  text.split('\n').forEach((raw, i) => {
    const s = raw.trim();
    if (s.length === 0) return;
    try {
      records.push(JSON.parse(s));
    } catch (cause) {
      throw new TrainDataError(path, i + 1, `${path}:${i + 1}: not valid JSON (${(cause as Error).message})`, { cause });
    }
    lines.push(i + 1);
  });
  if (records.length === 0) throw new TrainDataError(path, 0, `${path}: no records`);
  let kind: RecordKind | null = null;
  records.forEach((r, i) => {
    const k = kindOf(r, path, lines[i]!);
    if (kind !== null && k !== kind) throw new TrainDataError(path, lines[i]!, `${path}:${lines[i]}: a ${k} record in a ${kind} data set (every record must have the same fields)`);
    kind = k;
  });
  return { path, kind: kind!, records: records as TrainRecord[], lines };
}

/** One causal-LM example: token ids and which of them are predicted (loss[t] = 1: the model is trained to emit ids[t]). */
export interface LmExample {
  ids: number[];
  loss: Uint8Array;
  /** Source line (0 for packed blocks of several records). */
  line: number;
}

export interface CausalLmTokenizeOptions {
  /** Longest example (prompt/completion) or packed block (text), in tokens; default the model's positions. */
  maxLength: number;
  /** Appended to every completion and text (default: the tokenizer's EOS; null: none). */
  eosTokenId?: number | null;
  /** Pack text records into blocks of maxLength (default true); prompt/completion records are never packed. */
  pack?: boolean;
}

/**
 * Tokenizes a causal-LM data set. prompt/completion: encode(prompt) (with the tokenizer's template, e.g. BOS) then
 * encode(completion) without special tokens, then EOS; only completion tokens and EOS are predicted. text:
 * encode(text) + EOS, every token after the first predicted; with `pack`, the records' tokens are concatenated
 * and cut into blocks of maxLength (the last one shorter), as the HF run_clm script groups texts.
 */
export function tokenizeCausalLm(data: TrainDataset, tokenizer: TextTokenizer, options: CausalLmTokenizeOptions): LmExample[] {
  const { path } = data;
  const eos = options.eosTokenId === undefined ? tokenizer.specialTokenIds.eos ?? null : options.eosTokenId;
  const tail = eos === null ? [] : [eos];
  const maxLength = options.maxLength;
  if (data.kind === 'labeled') throw new TrainDataError(path, 0, `${path}: text + label records are for sequence classification, not causal LM`);
  const examples: LmExample[] = [];
  if (data.kind === 'prompt-completion') {
    data.records.forEach((rec, i) => {
      const line = data.lines[i]!;
      const r = rec as PromptCompletionRecord;
      const p = tokenizer.encode(r.prompt);
      const c = [...tokenizer.encode(r.completion, { addSpecialTokens: false }), ...tail];
      if (p.length === 0) throw new TrainDataError(path, line, `${path}:${line}: the prompt tokenizes to nothing`);
      if (c.length === tail.length) throw new TrainDataError(path, line, `${path}:${line}: the completion tokenizes to nothing`);
      const ids = [...p, ...c];
      if (ids.length > maxLength) {
        throw new TrainDataError(path, line, `${path}:${line}: prompt + completion is ${ids.length} tokens, more than the maximum length ${maxLength}`);
      }
      const loss = new Uint8Array(ids.length);
      loss.fill(1, p.length);
      examples.push({ ids, loss, line });
    });
    return examples;
  }
  const docs = data.records.map((rec, i) => {
    const ids = [...tokenizer.encode((rec as TextRecord).text), ...tail];
    if (ids.length < 2) throw new TrainDataError(path, data.lines[i]!, `${path}:${data.lines[i]}: the text tokenizes to fewer than 2 tokens (nothing to predict)`);
    return ids;
  });
  if (options.pack ?? true) {
    const all = docs.flat();
    for (let s = 0; s < all.length; s += maxLength) {
      const ids = all.slice(s, s + maxLength);
      if (ids.length < 2) break;
      examples.push({ ids, loss: new Uint8Array(ids.length).fill(1), line: 0 });
    }
    return examples;
  }
  docs.forEach((ids, i) => {
    const line = data.lines[i]!;
    if (ids.length > maxLength) throw new TrainDataError(path, line, `${path}:${line}: the text is ${ids.length} tokens, more than the maximum length ${maxLength} (pack it, or raise maxLength)`);
    examples.push({ ids, loss: new Uint8Array(ids.length).fill(1), line });
  });
  return examples;
}

/**
 * Right-pads examples into one batch: targets[t] = ids[t + 1] where that token is predicted, else IGNORE_INDEX;
 * padding positions hold `padId` with mask 0.
 */
export function causalLmBatch(examples: readonly LmExample[], padId = 0): LmBatch {
  const B = examples.length;
  const S = Math.max(...examples.map((e) => e.ids.length));
  const tokens = new Int32Array(B * S).fill(padId);
  const targets = new Int32Array(B * S).fill(IGNORE_INDEX);
  const mask = new Uint8Array(B * S);
  examples.forEach((e, b) => {
    for (let t = 0; t < e.ids.length; t++) {
      tokens[b * S + t] = e.ids[t]!;
      mask[b * S + t] = 1;
      if (t + 1 < e.ids.length && e.loss[t + 1]) targets[b * S + t] = e.ids[t + 1]!;
    }
  });
  return { batch: B, seq: S, tokens, targets, mask };
}

/** Targets a batch's loss counts (those other than IGNORE_INDEX). */
export function countTargets(batch: { targets: Int32Array }): number {
  let n = 0;
  for (const y of batch.targets) if (y !== IGNORE_INDEX) n++;
  return n;
}

/** A seeded permutation of [0, n) (Fisher–Yates on the (seed, `shuffle/<epoch>`) stream): epoch e's order. */
export function shuffledOrder(n: number, seed: number, epoch: number): Int32Array {
  const order = Int32Array.from({ length: n }, (_, i) => i);
  const rng = new SplitMix32(streamState(seed, `shuffle/${epoch}`));
  for (let i = n - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    const t = order[i]!;
    order[i] = order[j]!;
    order[j] = t;
  }
  return order;
}

/**
 * Draws batches of `batchSize` examples epoch after epoch, each epoch in its own seeded order (the last batch of
 * an epoch may be smaller). Its position (epoch, cursor) is all the state a resumed run needs.
 */
export class BatchSampler {
  readonly size: number;
  readonly batchSize: number;
  readonly seed: number;
  epoch = 0;
  cursor = 0;
  private order: Int32Array;

  constructor(size: number, batchSize: number, seed: number) {
    if (!Number.isInteger(batchSize) || batchSize < 1) throw new TrainDataError(MEMORY_PATH, 0, `batchSize must be an integer >= 1, got ${batchSize}`);
    this.size = size;
    this.batchSize = batchSize;
    this.seed = seed;
    this.order = shuffledOrder(size, seed, 0);
  }

  /** Moves to a saved position. */
  seek(epoch: number, cursor: number): void {
    this.epoch = epoch;
    this.cursor = cursor;
    this.order = shuffledOrder(this.size, this.seed, epoch);
  }

  next(): number[] {
    if (this.cursor >= this.size) this.seek(this.epoch + 1, 0);
    const end = Math.min(this.size, this.cursor + this.batchSize);
    const out = Array.from(this.order.subarray(this.cursor, end));
    this.cursor = end;
    return out;
  }
}

/** One sequence-classification example: token ids (with the tokenizer's template, e.g. [CLS] … [SEP]) and its label. */
export interface ClassificationExample {
  ids: number[];
  label: number;
  line: number;
}

/**
 * Tokenizes `{text, label}` records: the label is a name from `labels` (the config's id2label) or an integer index
 * into it. A text longer than maxLength tokens, or an unknown label, fails naming its line.
 */
export function tokenizeClassification(data: TrainDataset, tokenizer: TextTokenizer, options: { labels: readonly string[]; maxLength: number }): ClassificationExample[] {
  const { path } = data;
  if (data.kind !== 'labeled') throw new TrainDataError(path, 0, `${path}: sequence classification needs {"text", "label"} records, not ${data.kind} records`);
  const { labels, maxLength } = options;
  return data.records.map((rec, i) => {
    const line = data.lines[i]!;
    const r = rec as LabeledRecord;
    const label = typeof r.label === 'number' ? r.label : labels.indexOf(r.label);
    if (label < 0 || label >= labels.length) {
      throw new TrainDataError(path, line, `${path}:${line}: label ${JSON.stringify(r.label)} is not one of the model's labels ${JSON.stringify(labels)} (or an index below ${labels.length})`);
    }
    const ids = tokenizer.encode(r.text);
    if (ids.length === 0) throw new TrainDataError(path, line, `${path}:${line}: the text tokenizes to nothing`);
    if (ids.length > maxLength) throw new TrainDataError(path, line, `${path}:${line}: the text is ${ids.length} tokens, more than the maximum length ${maxLength}`);
    return { ids, label, line };
  });
}

/** A padded classification batch: tokens / mask [batch, seq] (right padding with `padId`), labels [batch]. */
export interface ClassificationBatch {
  batch: number;
  seq: number;
  tokens: Int32Array;
  mask: Uint8Array;
  labels: Int32Array;
}

export function classificationBatch(examples: readonly ClassificationExample[], padId: number): ClassificationBatch {
  const B = examples.length;
  const S = Math.max(...examples.map((e) => e.ids.length));
  const tokens = new Int32Array(B * S).fill(padId);
  const mask = new Uint8Array(B * S);
  examples.forEach((e, b) => {
    tokens.set(e.ids, b * S);
    mask.fill(1, b * S, b * S + e.ids.length);
  });
  return { batch: B, seq: S, tokens, mask, labels: Int32Array.from(examples, (e) => e.label) };
}

/** One masked-LM example: token ids with the tokenizer's template ([CLS] … [SEP]). */
export interface MaskedLmExample {
  ids: number[];
  line: number;
}

/** Tokenizes `{text}` records for masked LM (one example per record; longer than maxLength fails naming the line). */
export function tokenizeMaskedLm(data: TrainDataset, tokenizer: TextTokenizer, options: { maxLength: number }): MaskedLmExample[] {
  const { path } = data;
  if (data.kind !== 'text') throw new TrainDataError(path, 0, `${path}: masked LM needs {"text"} records, not ${data.kind} records`);
  return data.records.map((rec, i) => {
    const line = data.lines[i]!;
    const ids = tokenizer.encode((rec as TextRecord).text);
    if (ids.length === 0) throw new TrainDataError(path, line, `${path}:${line}: the text tokenizes to nothing`);
    if (ids.length > options.maxLength) throw new TrainDataError(path, line, `${path}:${line}: the text is ${ids.length} tokens, more than the maximum length ${options.maxLength}`);
    return { ids, line };
  });
}

/** A padded masked-LM batch: the masked input, the key mask, and targets (the original id where masked, else IGNORE_INDEX). */
export interface MaskedLmBatch {
  batch: number;
  seq: number;
  tokens: Int32Array;
  mask: Uint8Array;
  targets: Int32Array;
}

export interface MaskingOptions {
  padId: number;
  maskTokenId: number;
  specialTokenIds: readonly number[];
  vocabSize: number;
  /** Selection probability (0.15). */
  probability: number;
  rng: SplitMix32;
}

/**
 * HF DataCollatorForLanguageModeling's masking: every real, non-special token is selected with `probability`; a
 * selected token's target is its id, and its input becomes [MASK] (80 %), a uniformly random id (10 %) or stays
 * (10 %). Draws, in row-major order over real non-special tokens: one for selection, then one for the replacement
 * and one for the random id when it applies.
 */
export function maskedLmBatch(examples: readonly MaskedLmExample[], o: MaskingOptions): MaskedLmBatch {
  const B = examples.length;
  const S = Math.max(...examples.map((e) => e.ids.length));
  const tokens = new Int32Array(B * S).fill(o.padId);
  const mask = new Uint8Array(B * S);
  const targets = new Int32Array(B * S).fill(IGNORE_INDEX);
  const special = new Set(o.specialTokenIds);
  examples.forEach((e, b) => {
    e.ids.forEach((id, t) => {
      const i = b * S + t;
      tokens[i] = id;
      mask[i] = 1;
      if (special.has(id) || o.rng.nextFloat() >= o.probability) return;
      targets[i] = id;
      const r = o.rng.nextFloat();
      if (r < 0.8) tokens[i] = o.maskTokenId;
      else if (r < 0.9) tokens[i] = o.rng.nextInt(o.vocabSize);
    });
  });
  return { batch: B, seq: S, tokens, mask, targets };
}

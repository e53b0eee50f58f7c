/**
 * The corpus: Debian's `fortunes` and `fortunes-min` packages (BSD licence, see the README), read from the system
 * at recipe time and never committed. Each category file holds quotations separated by lines that are exactly
 * `%`. A category is split into train / held-out by a seeded shuffle of its distinct quotations, so the same seed
 * gives the same split on every machine and every quotation lands in exactly one split.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { SplitMix32, streamState } from '@tessera/core';

/** Where Debian installs the fortune files. */
export const FORTUNES_DIR = '/usr/share/games/fortunes';

/** The packages that provide them (the recipe's error message names this command). */
export const FORTUNES_INSTALL_HINT = 'apt-get install fortunes fortunes-min';

/** Categories left out: pictures drawn in ASCII are not English text. */
export const SKIPPED_CATEGORIES: readonly string[] = ['ascii-art'];

/** The subdirectory Debian's fortunes-off package installs its offensive sets into; never read. */
export const OFFENSIVE_SUBDIR = 'off';

export class MissingCorpusError extends Error {
  readonly code = 'TESSERA_MISSING_CORPUS';
  constructor(readonly dir: string, detail: string) {
    super(`the fortunes corpus is missing: ${detail} (install it with \`${FORTUNES_INSTALL_HINT}\`, or point --fortunes-dir at the fortune files)`);
    this.name = 'MissingCorpusError';
  }
}

/**
 * The quotations of one fortune file: the text between `%` lines, trailing spaces of each line removed, empty
 * ones dropped. Exact duplicates within the file are kept once, so no quotation can sit in both splits.
 */
export function parseFortuneFile(text: string): string[] {
  const quotes: string[] = [];
  const seen = new Set<string>();
  let current: string[] = [];
  const flush = (): void => {
    while (current.length > 0 && current[0]!.trim() === '') current.shift();
    while (current.length > 0 && current[current.length - 1]!.trim() === '') current.pop();
    const quote = current.join('\n');
    current = [];
    if (quote.length === 0 || seen.has(quote)) return;
    seen.add(quote);
    quotes.push(quote);
  };
  for (const line of text.replace(/\r\n?/g, '\n').split('\n')) {
    if (line === '%') flush();
    else current.push(line.replace(/\s+$/, ''));
  }
  flush();
  return quotes;
}

/** True for a file name that is a category (not an index, a UTF-8 alias, a hidden or skipped file). */
export function isCategoryFile(name: string): boolean {
  return !name.startsWith('.') && !name.endsWith('.dat') && !name.endsWith('.u8') && !SKIPPED_CATEGORIES.includes(name);
}

/** Every category under `dir`, sorted by name: its quotations in file order. Throws MissingCorpusError when there are none. */
export function readFortunes(dir: string = FORTUNES_DIR): Map<string, string[]> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new MissingCorpusError(dir, `${dir} does not exist`);
  const categories = new Map<string, string[]>();
  for (const name of readdirSync(dir).sort()) {
    if (name === OFFENSIVE_SUBDIR || !isCategoryFile(name)) continue;
    const path = join(dir, name);
    if (!statSync(path).isFile()) continue;
    const quotes = parseFortuneFile(readFileSync(path, 'utf8'));
    if (quotes.length > 0) categories.set(name, quotes);
  }
  if (categories.size === 0) throw new MissingCorpusError(dir, `${dir} holds no fortune files`);
  return categories;
}

export interface CategorySplit {
  train: string[];
  heldOut: string[];
}

/**
 * Splits one category's quotations: a seeded Fisher–Yates shuffle of the indices (stream derived from the seed and
 * the category's name), the first ⌈fraction·n⌉ (at least 1 when n ≥ 2) held out. Both splits keep file order.
 */
export function splitCategory(category: string, quotes: readonly string[], options: { seed: number; heldOutFraction?: number }): CategorySplit {
  const fraction = options.heldOutFraction ?? 0.1;
  if (!(fraction >= 0 && fraction < 1)) throw new RangeError(`heldOutFraction must be in [0, 1), got ${fraction}`);
  const n = quotes.length;
  const order = Array.from({ length: n }, (_, i) => i);
  const rng = new SplitMix32(streamState(options.seed, `fortunes-split/${category}`));
  for (let i = n - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const heldCount = n < 2 ? 0 : Math.min(n - 1, Math.max(fraction > 0 ? 1 : 0, Math.ceil(fraction * n)));
  const held = new Set(order.slice(0, heldCount));
  const split: CategorySplit = { train: [], heldOut: [] };
  quotes.forEach((q, i) => (held.has(i) ? split.heldOut : split.train).push(q));
  return split;
}

export interface CorpusFiles {
  /** Per category: its train and held-out JSONL files and counts. */
  categories: Array<{ name: string; train: string; heldOut: string; trainCount: number; heldOutCount: number; trainChars: number }>;
  /** Every category's train split in one file (the pretraining data). */
  allTrain: string;
  /** Every category's held-out split in one file. */
  allHeldOut: string;
}

function jsonl(texts: readonly string[]): string {
  return texts.map((text) => `${JSON.stringify({ text })}\n`).join('');
}

/** Reads the fortunes, splits every category and writes `<out>/<category>.{train,heldout}.jsonl` plus the two `all.*` files. */
export function writeCorpus(out: string, options: { seed: number; heldOutFraction?: number; fortunesDir?: string }): CorpusFiles {
  const categories = readFortunes(options.fortunesDir ?? FORTUNES_DIR);
  mkdirSync(out, { recursive: true });
  const files: CorpusFiles = { categories: [], allTrain: join(out, 'all.train.jsonl'), allHeldOut: join(out, 'all.heldout.jsonl') };
  const allTrain: string[] = [];
  const allHeld: string[] = [];
  for (const [name, quotes] of categories) {
    const split = splitCategory(name, quotes, { seed: options.seed, ...(options.heldOutFraction !== undefined ? { heldOutFraction: options.heldOutFraction } : {}) });
    const train = join(out, `${name}.train.jsonl`);
    const heldOut = join(out, `${name}.heldout.jsonl`);
    writeFileSync(train, jsonl(split.train));
    writeFileSync(heldOut, jsonl(split.heldOut));
    allTrain.push(...split.train);
    allHeld.push(...split.heldOut);
    files.categories.push({
      name, train, heldOut, trainCount: split.train.length, heldOutCount: split.heldOut.length,
      trainChars: split.train.reduce((n, q) => n + q.length, 0),
    });
  }
  writeFileSync(files.allTrain, jsonl(allTrain));
  writeFileSync(files.allHeldOut, jsonl(allHeld));
  return files;
}

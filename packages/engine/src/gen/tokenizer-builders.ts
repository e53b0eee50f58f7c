/**
 * Real tokenizer.json files for the generated models, built from {@link ENGLISH_CORPUS}:
 * - a BERT-style WordPiece (BertNormalizer lowercasing, BertPreTokenizer, "[CLS] $A [SEP]" template) for the encoder;
 * - a GPT-2 / Llama-3-style byte-level BPE whose merges are learned here by a small deterministic trainer, with
 *   `<|begin_of_text|>` / `<|end_of_text|>` special tokens, for the decoder.
 * Both come out at exactly the requested vocabulary size, so a model's `vocab_size` always equals its tokenizer's
 * size: when the corpus runs out of pieces, the rest is filled the way real checkpoints reserve ids
 * (BERT's `[unused N]` vocabulary entries, Llama 3's `<|reserved_special_token_N|>` added tokens).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { ENGLISH_CORPUS } from './corpus.js';

/** The three JSON files Hugging Face saves for a fast tokenizer. */
export interface TokenizerFiles {
  'tokenizer.json': Record<string, unknown>;
  'tokenizer_config.json': Record<string, unknown>;
  'special_tokens_map.json': Record<string, unknown>;
}

export interface WordPieceTokenizer {
  kind: 'wordpiece';
  vocabSize: number;
  /** Entries learned from the corpus (specials, characters, words, word endings), before `[unused N]` filler. */
  learnedSize: number;
  padId: number;
  unkId: number;
  clsId: number;
  sepId: number;
  maskId: number;
  files: TokenizerFiles;
}

export interface ByteLevelBpeTokenizer {
  kind: 'byte-level-bpe';
  vocabSize: number;
  /** 256 byte symbols plus the tokens the trainer's merges produced. */
  learnedSize: number;
  merges: Array<[string, string]>;
  bosId: number;
  eosId: number;
  files: TokenizerFiles;
}

export type GeneratedTokenizer = WordPieceTokenizer | ByteLevelBpeTokenizer;

/** Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json into `dir` (created if needed). */
export function writeTokenizerFiles(dir: string, tokenizer: GeneratedTokenizer): void {
  mkdirSync(dir, { recursive: true });
  for (const [file, json] of Object.entries(tokenizer.files)) {
    writeFileSync(join(dir, file), `${JSON.stringify(json, null, 2)}\n`);
  }
}

/** Code-unit order, the same on every machine (never localeCompare). */
function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** An added-token entry as tokenizer.json spells it. */
function addedToken(id: number, content: string) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

/** tokenizer_config.json's `added_tokens_decoder`: id → the token without its id. */
function addedTokensDecoder(tokens: ReadonlyArray<ReturnType<typeof addedToken>>): Record<string, unknown> {
  return Object.fromEntries(tokens.map(({ id, ...rest }) => [String(id), { ...rest }]));
}

function specialTokenTemplate(token: string, id: number) {
  return { id: token, ids: [id], tokens: [token] };
}

// ---------------------------------------------------------------------------------------------------------------
// WordPiece (encoder)
// ---------------------------------------------------------------------------------------------------------------

export const WORDPIECE_SPECIAL_TOKENS = { pad: '[PAD]', unk: '[UNK]', cls: '[CLS]', sep: '[SEP]', mask: '[MASK]' } as const;

/** Every printable ASCII character a lowercasing BertNormalizer can leave, so ASCII text never needs [UNK]. */
function wordPieceCharacters(): string[] {
  const chars: string[] = [];
  for (let c = 0x21; c <= 0x7e; c++) {
    const ch = String.fromCharCode(c);
    if (ch >= 'A' && ch <= 'Z') continue;
    chars.push(ch);
  }
  return chars;
}

/** Counts, most frequent first, ties in code-unit order. */
function byFrequency(counts: Map<string, number>): string[] {
  return [...counts.entries()].sort(([a, ca], [b, cb]) => cb - ca || compareStrings(a, b)).map(([piece]) => piece);
}

/** The smallest WordPiece vocabulary: 5 specials, 68 characters, 36 '##' continuations of letters and digits. */
export const WORDPIECE_MIN_VOCAB = 5 + 68 + 36;

/**
 * A BERT-style WordPiece tokenizer of exactly `vocabSize` entries: [PAD]=0, [UNK], [CLS], [SEP], [MASK], the
 * characters, '##' + each letter and digit, then the corpus's words (length ≥ 2) by frequency, then its word
 * endings ('##ing', '##tion', …) by frequency, then `[unusedN]` filler (unreachable: BertPreTokenizer splits
 * on the brackets, exactly as in bert-base-uncased).
 */
export function buildWordPieceTokenizer(vocabSize: number, options: { modelMaxLength?: number; corpus?: string } = {}): WordPieceTokenizer {
  if (!Number.isInteger(vocabSize) || vocabSize < WORDPIECE_MIN_VOCAB) {
    throw new RangeError(`a WordPiece vocabulary needs at least ${WORDPIECE_MIN_VOCAB} entries (specials, characters, '##' continuations), got ${vocabSize}`);
  }
  const corpus = options.corpus ?? ENGLISH_CORPUS;
  const vocab: string[] = [];
  const seen = new Set<string>();
  const add = (piece: string): void => {
    if (vocab.length < vocabSize && !seen.has(piece)) {
      seen.add(piece);
      vocab.push(piece);
    }
  };
  const specials = WORDPIECE_SPECIAL_TOKENS;
  for (const t of [specials.pad, specials.unk, specials.cls, specials.sep, specials.mask]) add(t);
  for (const ch of wordPieceCharacters()) add(ch);
  for (const ch of '0123456789abcdefghijklmnopqrstuvwxyz') add(`##${ch}`);

  // BertNormalizer lowercases; BertPreTokenizer splits on whitespace and punctuation, leaving runs of letters/digits.
  const words = new Map<string, number>();
  const endings = new Map<string, number>();
  for (const word of corpus.toLowerCase().match(/[a-z0-9]+/g) ?? []) {
    if (word.length >= 2) words.set(word, (words.get(word) ?? 0) + 1);
    for (let start = 1; start <= word.length - 2; start++) {
      const ending = `##${word.slice(start)}`;
      endings.set(ending, (endings.get(ending) ?? 0) + 1);
    }
  }
  for (const word of byFrequency(words)) add(word);
  for (const ending of byFrequency(endings)) add(ending);
  const learnedSize = vocab.length;
  for (let i = 0; vocab.length < vocabSize; i++) add(`[unused${i}]`);

  const id = (t: string): number => vocab.indexOf(t);
  const [padId, unkId, clsId, sepId, maskId] = [id(specials.pad), id(specials.unk), id(specials.cls), id(specials.sep), id(specials.mask)];
  const added = [addedToken(padId, specials.pad), addedToken(unkId, specials.unk), addedToken(clsId, specials.cls), addedToken(sepId, specials.sep), addedToken(maskId, specials.mask)];

  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [
        { SpecialToken: { id: specials.cls, type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: specials.sep, type_id: 0 } },
      ],
      pair: [
        { SpecialToken: { id: specials.cls, type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: specials.sep, type_id: 0 } },
        { Sequence: { id: 'B', type_id: 1 } },
        { SpecialToken: { id: specials.sep, type_id: 1 } },
      ],
      special_tokens: {
        [specials.cls]: specialTokenTemplate(specials.cls, clsId),
        [specials.sep]: specialTokenTemplate(specials.sep, sepId),
      },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece',
      unk_token: specials.unk,
      continuing_subword_prefix: '##',
      max_input_chars_per_word: 100,
      vocab: Object.fromEntries(vocab.map((t, i) => [t, i])),
    },
  };
  const tokenizerConfig = {
    added_tokens_decoder: addedTokensDecoder(added),
    clean_up_tokenization_spaces: true,
    cls_token: specials.cls,
    do_basic_tokenize: true,
    do_lower_case: true,
    mask_token: specials.mask,
    model_max_length: options.modelMaxLength ?? 512,
    never_split: null,
    pad_token: specials.pad,
    sep_token: specials.sep,
    strip_accents: null,
    tokenize_chinese_chars: true,
    tokenizer_class: 'BertTokenizer',
    unk_token: specials.unk,
  };
  const specialTokensMap = { cls_token: specials.cls, mask_token: specials.mask, pad_token: specials.pad, sep_token: specials.sep, unk_token: specials.unk };
  return {
    kind: 'wordpiece',
    vocabSize,
    learnedSize,
    padId,
    unkId,
    clsId,
    sepId,
    maskId,
    files: { 'tokenizer.json': tokenizerJson, 'tokenizer_config.json': tokenizerConfig, 'special_tokens_map.json': specialTokensMap },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Byte-level BPE (decoder)
// ---------------------------------------------------------------------------------------------------------------

export const BOS_TOKEN = '<|begin_of_text|>';
export const EOS_TOKEN = '<|end_of_text|>';

/**
 * GPT-2's byte → printable character table: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100 onwards, so every byte string is a string of visible, non-space characters. Returned in GPT-2's
 * order (the printable bytes first), which is also the order of the first 256 vocabulary ids.
 */
export function gpt2ByteSymbols(): Array<{ byte: number; symbol: string }> {
  const bytes: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bytes.push(b);
  for (let b = 0xae; b <= 0xff; b++) bytes.push(b);
  const codePoints = [...bytes];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      codePoints.push(256 + extra++);
    }
  }
  return bytes.map((byte, i) => ({ byte, symbol: String.fromCodePoint(codePoints[i]!) }));
}

/** GPT-2's pre-tokenization regex, which the ByteLevel pre-tokenizer applies when use_regex is true. */
const GPT2_PRETOKENIZE = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** 256 byte symbols, then bos and eos: the smallest byte-level BPE vocabulary. */
export const BYTE_LEVEL_MIN_VOCAB = 258;

/** Pair keys pack two token ids into one number (exact in a double while ids stay below 2^20). */
const PAIR_SHIFT = 0x100000;

/**
 * Learns BPE merges the way the Hugging Face BpeTrainer does, deterministically: split the corpus with the GPT-2
 * regex, map each piece's UTF-8 bytes to symbols, then repeatedly merge the most frequent adjacent pair
 * (counted over every occurrence of every piece), ties broken by the pair's strings in code-unit order, until
 * `maxTokens` distinct tokens exist or no pair is left (every piece is one token).
 */
export function learnByteLevelMerges(corpus: string, maxTokens: number): { tokens: string[]; merges: Array<[string, string]> } {
  if (maxTokens >= PAIR_SHIFT) throw new RangeError(`byte-level BPE vocabulary must stay below ${PAIR_SHIFT} tokens, got ${maxTokens}`);
  const table = gpt2ByteSymbols();
  const symbolOfByte = new Array<string>(256);
  for (const { byte, symbol } of table) symbolOfByte[byte] = symbol;
  const tokens = table.map((t) => t.symbol);
  const idOf = new Map(tokens.map((t, i) => [t, i]));

  const pieceCounts = new Map<string, number>();
  const utf8 = new TextEncoder();
  for (const piece of corpus.match(GPT2_PRETOKENIZE) ?? []) pieceCounts.set(piece, (pieceCounts.get(piece) ?? 0) + 1);
  const words: number[][] = [];
  const counts: number[] = [];
  for (const [piece, count] of [...pieceCounts.entries()].sort(([a], [b]) => compareStrings(a, b))) {
    words.push(Array.from(utf8.encode(piece), (b) => idOf.get(symbolOfByte[b]!)!));
    counts.push(count);
  }

  const merges: Array<[string, string]> = [];
  while (tokens.length < maxTokens) {
    const pairCounts = new Map<number, number>();
    for (let w = 0; w < words.length; w++) {
      const word = words[w]!;
      const count = counts[w]!;
      for (let i = 0; i + 1 < word.length; i++) {
        const key = word[i]! * PAIR_SHIFT + word[i + 1]!;
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + count);
      }
    }
    let best = -1;
    let bestCount = 0;
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && comparePairs(tokens, key, best) < 0)) {
        best = key;
        bestCount = count;
      }
    }
    if (best < 0) break;
    const left = Math.floor(best / PAIR_SHIFT);
    const right = best % PAIR_SHIFT;
    const merged = tokens[left]! + tokens[right]!;
    let mergedId = idOf.get(merged);
    if (mergedId === undefined) {
      // Two different merge paths can produce the same string; the vocabulary keeps one id for it.
      mergedId = tokens.length;
      tokens.push(merged);
      idOf.set(merged, mergedId);
    }
    merges.push([tokens[left]!, tokens[right]!]);
    for (let w = 0; w < words.length; w++) {
      const word = words[w]!;
      if (word.length < 2) continue;
      const out: number[] = [];
      for (let i = 0; i < word.length; i++) {
        if (i + 1 < word.length && word[i] === left && word[i + 1] === right) {
          out.push(mergedId);
          i++;
        } else {
          out.push(word[i]!);
        }
      }
      if (out.length !== word.length) words[w] = out;
    }
  }
  return { tokens, merges };
}

function comparePairs(tokens: readonly string[], a: number, b: number): number {
  const [al, ar] = [tokens[Math.floor(a / PAIR_SHIFT)]!, tokens[a % PAIR_SHIFT]!];
  const [bl, br] = [tokens[Math.floor(b / PAIR_SHIFT)]!, tokens[b % PAIR_SHIFT]!];
  return compareStrings(al, bl) || compareStrings(ar, br);
}

/**
 * A byte-level BPE tokenizer of exactly `vocabSize` ids: the 256 byte symbols and the learned merges' tokens
 * first, then `<|reserved_special_token_N|>` filler when the corpus runs out of merges, then
 * `<|begin_of_text|>` (bos, id vocabSize − 2) and `<|end_of_text|>` (eos, id vocabSize − 1). Ids of bos and eos
 * depend only on the size, so a decoder config can name them without building the tokenizer. The template
 * prepends bos; decoding is exact (clean_up_tokenization_spaces is false).
 */
export function buildByteLevelBpeTokenizer(vocabSize: number, options: { modelMaxLength?: number; corpus?: string } = {}): ByteLevelBpeTokenizer {
  if (!Number.isInteger(vocabSize) || vocabSize < BYTE_LEVEL_MIN_VOCAB) {
    throw new RangeError(`a byte-level BPE vocabulary needs at least ${BYTE_LEVEL_MIN_VOCAB} ids (256 bytes, bos, eos), got ${vocabSize}`);
  }
  const { tokens, merges } = learnByteLevelMerges(options.corpus ?? ENGLISH_CORPUS, vocabSize - 2);
  const learnedSize = tokens.length;
  const added: Array<ReturnType<typeof addedToken>> = [];
  for (let id = learnedSize; id < vocabSize - 2; id++) added.push(addedToken(id, `<|reserved_special_token_${id - learnedSize}|>`));
  const bosId = vocabSize - 2;
  const eosId = vocabSize - 1;
  added.push(addedToken(bosId, BOS_TOKEN), addedToken(eosId, EOS_TOKEN));

  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: BOS_TOKEN, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [
        { SpecialToken: { id: BOS_TOKEN, type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: BOS_TOKEN, type_id: 1 } },
        { Sequence: { id: 'B', type_id: 1 } },
      ],
      special_tokens: { [BOS_TOKEN]: specialTokenTemplate(BOS_TOKEN, bosId) },
    },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(tokens.map((t, i) => [t, i])),
      // "left right" strings: readable by every tokenizers version (byte-level symbols never contain a space).
      merges: merges.map(([l, r]) => `${l} ${r}`),
    },
  };
  const tokenizerConfig = {
    added_tokens_decoder: addedTokensDecoder(added),
    bos_token: BOS_TOKEN,
    clean_up_tokenization_spaces: false,
    eos_token: EOS_TOKEN,
    model_input_names: ['input_ids', 'attention_mask'],
    model_max_length: options.modelMaxLength ?? 131072,
    tokenizer_class: 'PreTrainedTokenizerFast',
  };
  const specialTokensMap = { bos_token: BOS_TOKEN, eos_token: EOS_TOKEN };
  return {
    kind: 'byte-level-bpe',
    vocabSize,
    learnedSize,
    merges,
    bosId,
    eosId,
    files: { 'tokenizer.json': tokenizerJson, 'tokenizer_config.json': tokenizerConfig, 'special_tokens_map.json': specialTokensMap },
  };
}

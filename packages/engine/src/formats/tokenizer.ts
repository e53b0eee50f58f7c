/**
 * tokenizer.json (Hugging Face `tokenizers` format) through `@huggingface/tokenizers`, a pure-JS implementation
 * of the same normalizers, pre-tokenizers, models (BPE, WordPiece, Unigram), post-processors and decoders.
 * This wrapper validates the file up front (a bad file is a {@link ConfigError} naming it, never a crash on the
 * first encode), resolves the special-token roles a model needs, and keeps ids as plain numbers.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { InvalidArgumentError } from '@tessera/native';
import { ConfigError } from '../errors.js';
import { resolveInside } from './model-dir.js';

export const TOKENIZER_FILE = 'tokenizer.json';
export const TOKENIZER_CONFIG_FILE = 'tokenizer_config.json';

/** Token ids by role. A role is absent when neither tokenizer_config.json nor a well-known special token names it. */
export interface SpecialTokenIds {
  bos?: number;
  eos?: number;
  pad?: number;
  unk?: number;
  cls?: number;
  sep?: number;
}

type Role = keyof SpecialTokenIds;
const ROLES: readonly Role[] = ['bos', 'eos', 'pad', 'unk', 'cls', 'sep'];

/**
 * Special tokens recognised by name when tokenizer_config.json does not assign the role (BERT, Llama 2/3,
 * GPT-2 conventions). Only tokens the tokenizer marks special (or the model's own unk_token) are considered.
 */
const WELL_KNOWN: Readonly<Record<Role, readonly string[]>> = {
  bos: ['<|begin_of_text|>', '<s>', '<|startoftext|>'],
  eos: ['<|end_of_text|>', '</s>', '<|endoftext|>'],
  pad: ['[PAD]', '<pad>', '<|pad|>'],
  unk: ['[UNK]', '<unk>'],
  cls: ['[CLS]'],
  sep: ['[SEP]'],
};

const SUPPORTED_MODELS = ['BPE', 'WordPiece', 'Unigram'];

export interface EncodeOptions {
  /** Apply the post-processor's template ([CLS] … [SEP], a leading BOS, …). Default true. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special tokens (BOS, [CLS], …) from the text. Default true. */
  skipSpecialTokens?: boolean;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** tokenizer_config.json writes special tokens as strings or as serialized AddedTokens ({ content, … }). */
function tokenString(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (isPlainObject(v) && typeof v.content === 'string') return v.content;
  return undefined;
}

function readJson(path: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new ConfigError(path, `${path}: cannot read ${what} (${(cause as Error).message})`, { cause });
  }
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ConfigError(path, `${path}: ${what} is not valid JSON (${(cause as Error).message})`, { cause });
  }
}

export class TextTokenizer {
  /** Where the tokenizer came from (for messages). */
  readonly path: string;
  /** One past the largest id (vocabulary plus added tokens): every id this tokenizer emits is below it. */
  readonly vocabSize: number;
  readonly specialTokenIds: Readonly<SpecialTokenIds>;
  private readonly tokenizer: Tokenizer;

  private constructor(path: string, tokenizer: Tokenizer, specialTokenIds: SpecialTokenIds, vocabSize: number) {
    this.path = path;
    this.tokenizer = tokenizer;
    this.specialTokenIds = Object.freeze(specialTokenIds);
    this.vocabSize = vocabSize;
  }

  /** `dir/tokenizer.json`, with `dir/tokenizer_config.json` when present. Both must stay inside `dir`. */
  static fromDir(dir: string): TextTokenizer {
    return TextTokenizer.fromFile(resolveInside(dir, TOKENIZER_FILE));
  }

  /**
   * Reads a tokenizer.json. A sibling tokenizer_config.json, when present, supplies the special-token roles
   * (bos_token, eos_token, …) and clean_up_tokenization_spaces.
   */
  static fromFile(path: string): TextTokenizer {
    if (!existsSync(path)) throw new ConfigError(path, `${path}: not found`);
    const json = readJson(path, 'tokenizer.json');
    const configPath = resolveInside(dirname(path), TOKENIZER_CONFIG_FILE);
    const config = existsSync(configPath) ? readJson(configPath, TOKENIZER_CONFIG_FILE) : undefined;
    if (config !== undefined && !isPlainObject(config)) throw new ConfigError(configPath, `${configPath}: must be a JSON object`);
    return TextTokenizer.fromJson(json, config, path, configPath);
  }

  /**
   * Builds a tokenizer from a parsed tokenizer.json object (and optionally a parsed tokenizer_config.json).
   * `path` and `configPath` only name the sources in error messages.
   */
  static fromJson(json: unknown, config?: Record<string, unknown>, path = TOKENIZER_FILE, configPath = TOKENIZER_CONFIG_FILE): TextTokenizer {
    const fail = (message: string, cause?: unknown): never => {
      throw new ConfigError(path, `${path}: ${message}`, cause === undefined ? undefined : { cause });
    };
    if (!isPlainObject(json)) return fail('tokenizer.json must be a JSON object');
    const model = json.model;
    if (!isPlainObject(model)) return fail('model must be an object');
    if (typeof model.type !== 'string' || !SUPPORTED_MODELS.includes(model.type)) {
      fail(`model.type ${JSON.stringify(model.type)} is not supported (supported: ${SUPPORTED_MODELS.join(', ')})`);
    }
    const vocabOk = model.type === 'Unigram' ? Array.isArray(model.vocab) : isPlainObject(model.vocab);
    if (!vocabOk) fail(`model.vocab has the wrong form for a ${String(model.type)} model`);
    if (model.type === 'BPE' && !Array.isArray(model.merges)) fail('model.merges must be a list');
    const addedTokens = json.added_tokens ?? [];
    if (!Array.isArray(addedTokens) || !addedTokens.every((t) => isPlainObject(t) && typeof t.content === 'string' && Number.isSafeInteger(t.id) && (t.id as number) >= 0)) {
      fail('added_tokens must be a list of { id, content, … } objects');
    }

    // The library's settings object: special tokens as plain strings; no tokenization-space clean-up unless the
    // config asks for it (transformers' default is false; the library's is true).
    const settings: Record<string, unknown> = { ...(config ?? {}) };
    for (const key of Object.keys(settings)) {
      if (key.endsWith('_token')) {
        const s = tokenString(settings[key]);
        if (s === undefined) delete settings[key];
        else settings[key] = s;
      }
    }
    if (Array.isArray(settings.additional_special_tokens)) {
      settings.additional_special_tokens = settings.additional_special_tokens.map(tokenString).filter((s): s is string => s !== undefined);
    } else delete settings.additional_special_tokens;
    settings.clean_up_tokenization_spaces = settings.clean_up_tokenization_spaces === true;

    // The library requires these keys to be present (null is fine); a hand-written tokenizer.json may omit them.
    const full = { normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, ...json, added_tokens: addedTokens };
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(full, settings);
    } catch (cause) {
      return fail(`unsupported or malformed tokenizer (${(cause as Error).message})`, cause);
    }
    const vocabSize = tokenizer.model?.vocab.length ?? 0;
    if (vocabSize === 0) fail('the vocabulary is empty');

    if (typeof model.unk_token === 'string' && tokenizer.token_to_id(model.unk_token) === undefined) {
      fail(`model.unk_token ${JSON.stringify(model.unk_token)} is not in the vocabulary`);
    }

    const special = new Set((addedTokens as { content: string; special?: boolean }[]).filter((t) => t.special === true).map((t) => t.content));
    const unkToken = typeof model.unk_token === 'string' ? model.unk_token : undefined;
    const ids: SpecialTokenIds = {};
    for (const role of ROLES) {
      const key = `${role}_token`;
      const named = config ? tokenString(config[key]) : undefined;
      if (named !== undefined) {
        const id = tokenizer.token_to_id(named);
        if (id === undefined) throw new ConfigError(configPath, `${configPath}: ${key} ${JSON.stringify(named)} is not in the vocabulary of ${path}`);
        ids[role] = id;
        continue;
      }
      if (config && Object.hasOwn(config, key) && config[key] === null) continue; // explicitly no such token
      const candidates = role === 'unk' && unkToken !== undefined ? [unkToken] : WELL_KNOWN[role].filter((t) => special.has(t));
      for (const t of candidates) {
        const id = tokenizer.token_to_id(t);
        if (id !== undefined) {
          ids[role] = id;
          break;
        }
      }
    }
    return new TextTokenizer(path, tokenizer, ids, vocabSize);
  }

  /**
   * Token ids of `text` (normalized, pre-tokenized, split by the model, then the post-processor's template).
   * As in the Rust `tokenizers`, a BPE model without unk_token drops a piece its vocabulary lacks.
   */
  encode(text: string, options: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') throw new InvalidArgumentError(`encode: text must be a string, got ${typeof text}`);
    const { ids, tokens } = this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? true });
    for (let i = 0; i < ids.length; i++) {
      // Defensive: the library maps a piece it cannot find to undefined (construction already checked unk_token).
      if (!Number.isSafeInteger(ids[i])) {
        throw new ConfigError(this.path, `${this.path}: the piece ${JSON.stringify(tokens[i])} has no id in the vocabulary`);
      }
    }
    return ids;
  }

  /** The text of `ids`. Throws InvalidArgumentError for an id this tokenizer does not have. */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    for (const id of ids) {
      if (!Number.isSafeInteger(id) || id < 0 || id >= this.vocabSize || this.tokenizer.id_to_token(id) === undefined) {
        throw new InvalidArgumentError(`decode: ${id} is not a token id of ${this.path} (vocabulary size ${this.vocabSize})`);
      }
    }
    if (ids.length === 0) return '';
    return this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? true });
  }

  tokenToId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.tokenizer.id_to_token(id);
  }
}

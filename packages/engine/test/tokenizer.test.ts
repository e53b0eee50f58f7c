import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '@tessera/native';
import { ConfigError, PathOutsideModelError } from '../src/errors.js';
import { TextTokenizer } from '../src/formats/tokenizer.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-tokenizer-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirCounter = 0;
function writeDir(files: Record<string, unknown>): string {
  const dir = join(root, `tok-${dirCounter++}`);
  mkdirSync(dir);
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), typeof content === 'string' ? content : JSON.stringify(content));
  return dir;
}

const special = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });

/** bert-base-uncased's tokenizer.json layout with a 16-entry vocabulary. */
const bertVocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'hello', 'world', '##s', 'un', '##aff', '##able', ',', '!', 'cafe', '.', 'the'];
const bertJson = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((t, i) => special(i, t)),
  normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
  pre_tokenizer: { type: 'BertPreTokenizer' },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
    pair: [
      { SpecialToken: { id: '[CLS]', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '[SEP]', type_id: 0 } },
      { Sequence: { id: 'B', type_id: 1 } },
      { SpecialToken: { id: '[SEP]', type_id: 1 } },
    ],
    special_tokens: {
      '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] },
      '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] },
    },
  },
  decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
  model: {
    type: 'WordPiece',
    unk_token: '[UNK]',
    continuing_subword_prefix: '##',
    max_input_chars_per_word: 100,
    vocab: Object.fromEntries(bertVocab.map((t, i) => [t, i])),
  },
};

/** GPT-2's byte → printable-character table, written out independently of the library under test. */
function byteLevelAlphabet(): string[] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) out.push(printable(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + shifted++));
  return out;
}
const alphabet = byteLevelAlphabet(); // id b ↔ byte b
const merges: [string, string][] = [
  ['h', 'e'], //         256 he
  ['l', 'l'], //         257 ll
  ['he', 'll'], //       258 hell
  ['hell', 'o'], //      259 hello
  ['Ġ', 'w'], //         260 Ġw
  ['o', 'r'], //         261 or
  ['Ġw', 'or'], //       262 Ġwor
  ['l', 'd'], //         263 ld
  ['Ġwor', 'ld'], //     264 Ġworld
];
const bpeVocab: Record<string, number> = Object.fromEntries(alphabet.map((c, b) => [c, b]));
merges.forEach(([a, b], i) => (bpeVocab[a + b] = 256 + i));
/** A Llama-3-style byte-level BPE tokenizer.json. */
const bpeJson = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [special(300, '<|begin_of_text|>'), special(301, '<|end_of_text|>')],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [
      { SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } },
      { Sequence: { id: 'B', type_id: 1 } },
    ],
    special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [300], tokens: ['<|begin_of_text|>'] } },
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
    ignore_merges: true,
    vocab: bpeVocab,
    merges: merges.map(([a, b]) => `${a} ${b}`),
  },
};

const utf8 = (s: string) => [...Buffer.from(s, 'utf8')];

describe('TextTokenizer: BERT WordPiece', () => {
  const tok = TextTokenizer.fromJson(bertJson);

  it('lowercases, strips accents, splits punctuation and word pieces, and wraps in [CLS] … [SEP]', () => {
    // hello , world ##s ! un ##aff ##able cafe .
    expect(tok.encode('Hello, worlds! Unaffable CAFÉ.')).toEqual([2, 5, 11, 6, 7, 12, 8, 9, 10, 13, 14, 3]);
    expect(tok.encode('Hello, worlds!', { addSpecialTokens: false })).toEqual([5, 11, 6, 7, 12]);
    // Unknown words and each CJK character (split out by the normalizer) become [UNK].
    expect(tok.encode('xyz the 漢字')).toEqual([2, 1, 15, 1, 1, 3]);
    expect(tok.encode('')).toEqual([2, 3]);
  });

  it('decodes word pieces back to text, without special tokens unless asked', () => {
    expect(tok.decode([2, 5, 11, 6, 7, 12, 8, 9, 10, 13, 14, 3])).toBe('hello, worlds! unaffable cafe.');
    expect(tok.decode([2, 5, 6, 3], { skipSpecialTokens: false })).toBe('[CLS] hello world [SEP]');
    expect(tok.decode([])).toBe('');
  });

  it('knows its vocabulary and special tokens', () => {
    expect(tok.vocabSize).toBe(16);
    expect(tok.tokenToId('##able')).toBe(10);
    expect(tok.idToToken(13)).toBe('cafe');
    expect(tok.tokenToId('absent')).toBeUndefined();
    expect(tok.specialTokenIds).toEqual({ pad: 0, unk: 1, cls: 2, sep: 3 });
  });

  it('rejects ids it does not have', () => {
    for (const id of [16, -1, 2.5, Number.NaN]) expect(() => tok.decode([5, id]), String(id)).toThrow(InvalidArgumentError);
  });
});

describe('TextTokenizer: byte-level BPE (GPT-2 / Llama 3 style)', () => {
  const tok = TextTokenizer.fromJson(bpeJson);

  it('applies merges to byte-level pieces and prepends BOS', () => {
    expect(tok.encode('hello world')).toEqual([300, 259, 264]);
    // 'hello' ',' 'Ġworld' '!'
    expect(tok.encode('hello, world!', { addSpecialTokens: false })).toEqual([259, 44, 264, 33]);
    // Unmerged text falls back to one id per UTF-8 byte: é = C3 A9, then Ġ(space) and the 3-byte 漢.
    expect(tok.encode('é 漢', { addSpecialTokens: false })).toEqual([0xc3, 0xa9, 0x20, ...utf8('漢')]);
    expect(tok.encode('😀', { addSpecialTokens: false })).toEqual([0xf0, 0x9f, 0x98, 0x80]);
    // Special tokens written in the text are matched whole, before byte-level splitting.
    expect(tok.encode('<|begin_of_text|>hi<|end_of_text|>')).toEqual([300, 300, 104, 105, 301]);
  });

  it('round-trips ASCII and non-ASCII text through decode', () => {
    for (const s of ['hello world', 'Hello, World! The quick brown fox; 1234 "quotes" (parens).', '  leading and  double  spaces ', 'é', '漢字', '😀', 'naïve café — 漢字 👍🏽 😀!', 'tab\tnew\nline']) {
      expect(tok.decode(tok.encode(s)), s).toBe(s);
      expect(tok.decode(tok.encode(s, { addSpecialTokens: false })), s).toBe(s);
    }
    expect(tok.decode([300, 259, 301], { skipSpecialTokens: false })).toBe('<|begin_of_text|>hello<|end_of_text|>');
    expect(tok.decode([300, 259, 301])).toBe('hello');
  });

  it('finds BOS and EOS among its special tokens, and sizes its vocabulary to the largest id', () => {
    expect(tok.specialTokenIds).toEqual({ bos: 300, eos: 301 });
    expect(tok.vocabSize).toBe(302);
    // 265 … 299 are unused: not decodable.
    expect(() => tok.decode([270])).toThrow(/270 is not a token id/);
  });

  it('drops a piece a BPE vocabulary without unk_token lacks, as the Rust tokenizers do', () => {
    const vocab = { ...bpeVocab };
    delete vocab[alphabet[0x7a]!]; // 'z'
    const holey = TextTokenizer.fromJson({ ...bpeJson, model: { ...bpeJson.model, vocab } }, undefined, '/m/tokenizer.json');
    expect(holey.encode('hello')).toEqual([300, 259]);
    expect(holey.encode('zhez')).toEqual([300, 256]);
  });
});

describe('TextTokenizer: files', () => {
  it('reads tokenizer.json with its sibling tokenizer_config.json', () => {
    const dir = writeDir({
      'tokenizer.json': bpeJson,
      'tokenizer_config.json': {
        bos_token: '<|begin_of_text|>',
        eos_token: { __type: 'AddedToken', content: '<|end_of_text|>', special: true },
        pad_token: '<|end_of_text|>',
        clean_up_tokenization_spaces: true,
      },
    });
    const tok = TextTokenizer.fromDir(dir);
    expect(tok.path).toBe(join(dir, 'tokenizer.json'));
    expect(tok.specialTokenIds).toEqual({ bos: 300, eos: 301, pad: 301 });
    // clean_up_tokenization_spaces from the config: " ," → ","
    expect(tok.decode(tok.encode('hello , world'))).toBe('hello, world');
    // Without a config, no clean-up (transformers' default): the text comes back as written.
    const plain = TextTokenizer.fromFile(join(writeDir({ 'tokenizer.json': bpeJson }), 'tokenizer.json'));
    expect(plain.decode(plain.encode('hello , world'))).toBe('hello , world');
  });

  it('names the file for malformed JSON, unsupported components and inconsistent configs', () => {
    const bad = writeDir({ 'tokenizer.json': '{"model": {"type": "BPE",' });
    const e = (() => {
      try {
        TextTokenizer.fromDir(bad);
      } catch (err) {
        return err as ConfigError;
      }
      throw new Error('expected a throw');
    })();
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.path).toBe(join(bad, 'tokenizer.json'));
    expect(e.message).toContain('tokenizer.json is not valid JSON');

    const P = '/m/tokenizer.json';
    const cases: [unknown, RegExp][] = [
      [[], /must be a JSON object/],
      [{ ...bertJson, model: undefined }, /model must be an object/],
      [{ ...bertJson, model: { ...bertJson.model, type: 'CharLevel' } }, /model\.type "CharLevel" is not supported \(supported: BPE, WordPiece, Unigram\)/],
      [{ ...bertJson, model: { ...bertJson.model, vocab: ['a'] } }, /model\.vocab has the wrong form for a WordPiece model/],
      [{ ...bpeJson, model: { ...bpeJson.model, merges: 'h e' } }, /model\.merges must be a list/],
      [{ ...bertJson, pre_tokenizer: { type: 'Nonexistent' } }, /unsupported or malformed tokenizer \(Unknown PreTokenizer type: Nonexistent\)/],
      [{ ...bertJson, decoder: { type: 'Mystery' } }, /unsupported or malformed tokenizer/],
      [{ ...bertJson, added_tokens: [{ id: 'x', content: '[CLS]' }] }, /added_tokens must be a list/],
      [{ ...bertJson, model: { ...bertJson.model, unk_token: '<unk>' } }, /model\.unk_token "<unk>" is not in the vocabulary/],
    ];
    for (const [json, message] of cases) {
      expect(() => TextTokenizer.fromJson(json, undefined, P), String(message)).toThrow(ConfigError);
      expect(() => TextTokenizer.fromJson(json, undefined, P), String(message)).toThrow(message);
    }

    const wrongConfig = writeDir({ 'tokenizer.json': bertJson, 'tokenizer_config.json': { cls_token: '<cls>' } });
    expect(() => TextTokenizer.fromDir(wrongConfig)).toThrow(`${join(wrongConfig, 'tokenizer_config.json')}: cls_token "<cls>" is not in the vocabulary`);
    const brokenConfig = writeDir({ 'tokenizer.json': bertJson, 'tokenizer_config.json': '{' });
    expect(() => TextTokenizer.fromDir(brokenConfig)).toThrow(/tokenizer_config\.json: tokenizer_config\.json is not valid JSON/);
    expect(() => TextTokenizer.fromDir(join(root, 'nowhere'))).toThrow(/tokenizer\.json: not found/);
  });

  it('does not follow a tokenizer.json symlink out of the model directory', () => {
    const outside = writeDir({ 'tokenizer.json': bertJson });
    const dir = writeDir({});
    symlinkSync(join(outside, 'tokenizer.json'), join(dir, 'tokenizer.json'));
    expect(() => TextTokenizer.fromDir(dir)).toThrow(PathOutsideModelError);
  });
});

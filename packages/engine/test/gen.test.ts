/**
 * The tiny-model generator, checked only with low-level tools: the safetensors header is parsed here (8-byte LE
 * length + JSON), tokenizer.json is loaded with @huggingface/tokenizers, configs with JSON.parse, and the
 * adapter's effect is measured with a plain f64 Llama forward written below.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Tokenizer } from '@huggingface/tokenizers';
import { toHalfBits } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';

import type { DecoderConfig } from '../src/config.js';
import { toHfConfigJson } from '../src/formats/hf-config.js';
import { loraRankFor, peftPatternKey, peftTargetMatches, writeLoraAdapter } from '../src/formats/peft-writer.js';
import {
  BOS_TOKEN,
  buildByteLevelBpeTokenizer,
  buildWordPieceTokenizer,
  EOS_TOKEN,
  fnv1a32,
  generateLoraAdapter,
  generateModel,
  gpt2ByteSymbols,
  INIT_STD,
  learnByteLevelMerges,
  parameterCount,
  presetConfig,
  SplitMix32,
  streamState,
  uniformWithStd,
  weightBytes,
} from '../src/gen/index.js';
import {
  decoderLinearModules,
  decoderNormModules,
  decoderTensorShapes,
  decoderTopModules,
  encoderTensorShapes,
  encoderTopModules,
  peftLoraTensorNames,
} from '../src/models/names.js';

// ---------------------------------------------------------------------------------------------------------------
// Low-level readers
// ---------------------------------------------------------------------------------------------------------------

interface RawTensor {
  dtype: string;
  shape: number[];
  bytes: Buffer;
}

/** Parses a safetensors file by hand: header length, JSON header, then each tensor's byte range. */
function readSafetensors(path: string): { metadata: Record<string, string> | undefined; tensors: Map<string, RawTensor> } {
  const buf = readFileSync(path);
  const headerLength = Number(buf.readBigUInt64LE(0));
  expect((8 + headerLength) % 8).toBe(0);
  const header = JSON.parse(buf.subarray(8, 8 + headerLength).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const start = 8 + headerLength;
  const tensors = new Map<string, RawTensor>();
  let end = 0;
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [b, e] = entry.data_offsets;
    tensors.set(name, { dtype: entry.dtype, shape: entry.shape, bytes: buf.subarray(start + b, start + e) });
    end = Math.max(end, e);
  }
  expect(start + end).toBe(buf.length);
  return { metadata: header.__metadata__ as unknown as Record<string, string> | undefined, tensors };
}

function f32(t: RawTensor): Float32Array {
  expect(t.dtype).toBe('F32');
  const copy = Buffer.from(t.bytes);
  return new Float32Array(copy.buffer, copy.byteOffset, copy.byteLength / 4);
}

function sha256(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

function readJson(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

function loadTokenizer(dir: string): Tokenizer {
  return new Tokenizer(readJson(join(dir, 'tokenizer.json')), readJson(join(dir, 'tokenizer_config.json')));
}

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tessera-gen-'));
  dirs.push(d);
  return d;
}

const root = tempDir();
const tinyEncoder = generateModel(join(root, 'encoder'), { family: 'encoder', size: 'tiny' });
const tinyDecoder = generateModel(join(root, 'decoder'), { family: 'decoder', size: 'tiny' });

// ---------------------------------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------------------------------

/** SHA-256 of the seed-0 tiny files. A change here means every machine's generated models change: do it on purpose. */
const PINNED = {
  encoder: {
    'model.safetensors': 'ba182e8d67d4f1d529efcf814632a5fb302a446c98137bdd249020548e5abd79',
    'tokenizer.json': '4aa362a7f2f6a71116dd29ad6b3a704bd5a89e1eaf1f34d50f783f836205cc5e',
    'config.json': '4e455b369f4f958592f11ba4e9f631bf74c58c19f5a59f7172c31f0763a7eae0',
  },
  decoder: {
    'model.safetensors': '294ddfe289a1793f4435aa1f14cfd0ee1e95063d0ffdb2f041d45dd719c0ccc6',
    'tokenizer.json': '7120e8a49ad390adf01a18c4baa1a198dee53602c97761951e94b79e868e5ef6',
    'config.json': '06f4106b42f22901d26fd626be103cb1bc52073647c0b58a9b8fd6fbaf973541',
  },
} as const;

describe('determinism', () => {
  it('the seed-0 tiny encoder and decoder have pinned bytes', () => {
    for (const [family, files] of Object.entries(PINNED)) {
      const dir = family === 'encoder' ? tinyEncoder.dir : tinyDecoder.dir;
      for (const [file, hash] of Object.entries(files)) expect({ family, file, hash: sha256(join(dir, file)) }).toEqual({ family, file, hash });
    }
  });

  it('the generator core is pinned: FNV-1a, splitmix32 and the per-tensor stream', () => {
    // FNV-1a test vectors (http://www.isthe.com/chongo/tech/comp/fnv/).
    expect(fnv1a32(new TextEncoder().encode(''))).toBe(0x811c9dc5);
    expect(fnv1a32(new TextEncoder().encode('a'))).toBe(0xe40c292c);
    expect(fnv1a32(new TextEncoder().encode('foobar'))).toBe(0xbf9cf968);
    // Values below were cross-checked with an independent Python implementation of the same integer recipe.
    const rng = new SplitMix32(0);
    expect([rng.nextUint32(), rng.nextUint32(), rng.nextUint32()]).toEqual([0x92ca2f0e, 0x3cd6e3f3, 0x1b147dcc]);
    expect(streamState(0, 'model.embed_tokens.weight')).toBe(0xb5e6c286);
    expect(uniformWithStd(4, 0, 'model.embed_tokens.weight', 0.02)).toEqual(
      new Float32Array([0.008067670278251171, -0.029867976903915405, -0.009728584438562393, 0.03438744693994522]),
    );
  });

  it('regenerating gives identical files; another seed changes every random tensor and nothing else', () => {
    for (const family of ['encoder', 'decoder'] as const) {
      const first = family === 'encoder' ? tinyEncoder : tinyDecoder;
      const again = generateModel(join(tempDir(), family), { family, size: 'tiny', seed: 0 });
      for (const file of first.files) expect(readFileSync(join(again.dir, file)).equals(readFileSync(join(first.dir, file)))).toBe(true);

      const other = generateModel(join(tempDir(), family), { family, size: 'tiny', seed: 1 });
      for (const file of first.files.filter((f) => f !== 'model.safetensors')) {
        expect(readFileSync(join(other.dir, file)).equals(readFileSync(join(first.dir, file)))).toBe(true);
      }
      const a = readSafetensors(join(first.dir, 'model.safetensors')).tensors;
      const b = readSafetensors(join(other.dir, 'model.safetensors')).tensors;
      for (const [name, ta] of a) {
        const constant = f32(ta).every((v) => v === f32(ta)[0]);
        expect({ name, same: ta.bytes.equals(b.get(name)!.bytes) }).toEqual({ name, same: constant });
      }
    }
  });

  it('each tensor comes from its own (seed, name) stream, independent of the others and of its length', () => {
    const tensors = readSafetensors(join(tinyDecoder.dir, 'model.safetensors')).tensors;
    const name = decoderLinearModules(1).up + '.weight';
    const written = f32(tensors.get(name)!);
    expect(uniformWithStd(written.length, 0, name, INIT_STD)).toEqual(written);
    expect(uniformWithStd(10, 0, name, INIT_STD)).toEqual(written.subarray(0, 10));
    // A model with one layer fewer still has identical layer-0 tensors.
    const shallow = generateModel(join(tempDir(), 'shallow'), { family: 'decoder', overrides: { numLayers: 1 } });
    const shallowTensors = readSafetensors(join(shallow.dir, 'model.safetensors')).tensors;
    for (const t of [decoderLinearModules(0).q, decoderLinearModules(0).down, decoderTopModules.embedTokens]) {
      expect(shallowTensors.get(`${t}.weight`)!.bytes.equals(tensors.get(`${t}.weight`)!.bytes)).toBe(true);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Files and tensors
// ---------------------------------------------------------------------------------------------------------------

function expectExactShapeMap(path: string, shapes: Map<string, number[]>, dtype: string): Map<string, RawTensor> {
  const { metadata, tensors } = readSafetensors(path);
  expect(metadata).toEqual({ format: 'pt' });
  expect([...tensors.keys()].sort()).toEqual([...shapes.keys()].sort());
  for (const [name, shape] of shapes) {
    const t = tensors.get(name)!;
    expect({ name, dtype: t.dtype, shape: t.shape }).toEqual({ name, dtype, shape });
  }
  return tensors;
}

describe('model files', () => {
  it('the encoder has exactly the names.ts tensors, norms at 1, everything else uniform with std 0.02', () => {
    const config = tinyEncoder.config;
    expect(config).toMatchObject({ architecture: 'BertForSequenceClassification', hiddenSize: 64, numLayers: 2, numHeads: 4, intermediateSize: 128, maxPositions: 128, numLabels: 3, vocabSize: 1024 });
    const tensors = expectExactShapeMap(join(tinyEncoder.dir, 'model.safetensors'), encoderTensorShapes(config), 'F32');
    const bound = Math.fround(INIT_STD * Math.sqrt(3));
    for (const [name, t] of tensors) {
      const v = f32(t);
      if (name.endsWith('LayerNorm.weight')) {
        expect(v.every((x) => x === 1)).toBe(true);
        continue;
      }
      expect(v.every((x) => x >= -bound && x < bound)).toBe(true);
      expect(new Set(v).size).toBeGreaterThan(v.length / 2);
    }
    const words = f32(tensors.get(`${encoderTopModules(config).wordEmbeddings}.weight`)!);
    const std = Math.sqrt(words.reduce((s, x) => s + x * x, 0) / words.length);
    expect(std).toBeGreaterThan(0.0195);
    expect(std).toBeLessThan(0.0205);
    expect(tinyEncoder.bytes).toBe(readFileSync(join(tinyEncoder.dir, 'model.safetensors')).length);
  });

  it('the decoder has exactly the names.ts tensors (untied LM head, GQA shapes)', () => {
    const config = tinyDecoder.config;
    expect(config).toMatchObject({ hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, intermediateSize: 176, maxPositions: 256, tieWordEmbeddings: false, vocabSize: 1024 });
    const tensors = expectExactShapeMap(join(tinyDecoder.dir, 'model.safetensors'), decoderTensorShapes(config), 'F32');
    expect(tensors.get(`${decoderLinearModules(0).k}.weight`)!.shape).toEqual([32, 64]);
    for (let i = 0; i < config.numLayers; i++) {
      for (const norm of Object.values(decoderNormModules(i))) expect(f32(tensors.get(`${norm}.weight`)!).every((x) => x === 1)).toBe(true);
    }
    expect(f32(tensors.get(`${decoderTopModules.finalNorm}.weight`)!).every((x) => x === 1)).toBe(true);
  });

  it('config.json is the HF JSON of the returned config; generation_config.json agrees on bos/eos', () => {
    expect(readJson(join(tinyEncoder.dir, 'config.json'))).toEqual(toHfConfigJson(tinyEncoder.config));
    expect(readJson(join(tinyDecoder.dir, 'config.json'))).toEqual(toHfConfigJson(tinyDecoder.config));
    const generation = readJson(join(tinyDecoder.dir, 'generation_config.json'));
    expect(generation).toMatchObject({ bos_token_id: tinyDecoder.config.bosTokenId, eos_token_id: tinyDecoder.config.eosTokenIds[0] });
  });

  it('f16 and bf16 checkpoints are the f32 values rounded to nearest even, and say so in config.json', () => {
    const f32Tensors = readSafetensors(join(tinyDecoder.dir, 'model.safetensors')).tensors;
    for (const dtype of ['f16', 'bf16'] as const) {
      const half = generateModel(join(tempDir(), dtype), { family: 'decoder', dtype });
      const tensors = expectExactShapeMap(join(half.dir, 'model.safetensors'), decoderTensorShapes(half.config), dtype === 'f16' ? 'F16' : 'BF16');
      for (const [name, t] of tensors) {
        const rounded = toHalfBits(f32(f32Tensors.get(name)!), dtype);
        expect({ name, equal: t.bytes.equals(Buffer.from(rounded.buffer, rounded.byteOffset, rounded.byteLength)) }).toEqual({ name, equal: true });
      }
      expect(readJson(join(half.dir, 'config.json')).torch_dtype).toBe(dtype === 'f16' ? 'float16' : 'bfloat16');
    }
  });

  it('overrides reshape the model and its tokenizer together', () => {
    const model = generateModel(join(tempDir(), 'o'), { family: 'decoder', overrides: { vocabSize: 600, tieWordEmbeddings: true, numHeads: 2, numKvHeads: 1 } });
    expect(model.config).toMatchObject({ vocabSize: 600, headDim: 32, bosTokenId: 598, eosTokenIds: [599] });
    expectExactShapeMap(join(model.dir, 'model.safetensors'), decoderTensorShapes(model.config), 'F32');
    expect(loadTokenizer(model.dir).get_vocab().size).toBe(600);
    const bare = generateModel(join(tempDir(), 'b'), { family: 'encoder', overrides: { architecture: 'BertModel' } });
    expect(bare.config.numLabels).toBe(0);
    expectExactShapeMap(join(bare.dir, 'model.safetensors'), encoderTensorShapes(bare.config), 'F32');
    expect(() => generateModel(tempDir(), { family: 'decoder', overrides: { bosTokenId: 1 } })).toThrow(/bosTokenId must be 1022/);
    expect(() => generateModel(tempDir(), { family: 'decoder', overrides: { numKvHeads: 3 } })).toThrow(/multiple of numKvHeads/);
    expect(() => generateModel(tempDir(), { family: 'encoder', overrides: { vocabSize: 50 } })).toThrow(/at least 109/);
    expect(() => generateModel(tempDir(), { family: 'encoder', seed: -1 })).toThrow(RangeError);
  });
});

describe('mini presets', () => {
  it('weigh 50–200 MB in f32 (larger than a last-level cache), computed from the shape map', () => {
    const encoder = presetConfig('encoder', 'mini');
    const decoder = presetConfig('decoder', 'mini');
    expect(encoder).toMatchObject({ hiddenSize: 512, numLayers: 8, numHeads: 8, intermediateSize: 2048, maxPositions: 512, vocabSize: 8192 });
    expect(decoder).toMatchObject({ hiddenSize: 768, numLayers: 6, numHeads: 12, numKvHeads: 4, headDim: 64, intermediateSize: 2048, vocabSize: 8192 });
    for (const config of [encoder, decoder]) {
      const shapes = config.family === 'encoder' ? encoderTensorShapes(config) : decoderTensorShapes(config);
      const fromShapes = [...shapes.values()].reduce((sum, s) => sum + s.reduce((a, b) => a * b, 1) * 4, 0);
      expect(weightBytes(config, 'f32')).toBe(fromShapes);
      expect(fromShapes).toBeGreaterThan(50e6);
      expect(fromShapes).toBeLessThan(200e6);
      expect(weightBytes(config, 'bf16')).toBe(fromShapes / 2);
    }
    expect(weightBytes(encoder)).toBe(119_767_052);
    expect(weightBytes(decoder)).toBe(176_200_704);
    expect(parameterCount(presetConfig('decoder', 'tiny'))).toBe(223_552);
  });

  it('their tokenizers come out at exactly the preset vocabulary, the remainder as unreachable filler', () => {
    const wordPiece = buildWordPieceTokenizer(8192);
    const wpTokenizer = new Tokenizer(wordPiece.files['tokenizer.json'], wordPiece.files['tokenizer_config.json']);
    expect(wpTokenizer.get_vocab().size).toBe(8192);
    expect(wpTokenizer.id_to_token(8191)).toBe(`[unused${8191 - wordPiece.learnedSize}]`);
    // BertPreTokenizer splits the brackets off, so filler entries are never produced (as in bert-base-uncased).
    const filler = wpTokenizer.token_to_id(`[unused0]`)!;
    expect(filler).toBe(wordPiece.learnedSize);
    expect(wpTokenizer.encode('[unused0]').ids).not.toContain(filler);

    const bpe = buildByteLevelBpeTokenizer(8192);
    const bpeTokenizer = new Tokenizer(bpe.files['tokenizer.json'], bpe.files['tokenizer_config.json']);
    expect(bpeTokenizer.get_vocab().size).toBe(8192);
    expect([bpe.bosId, bpe.eosId]).toEqual([presetConfig('decoder', 'mini').bosTokenId, ...presetConfig('decoder', 'mini').eosTokenIds]);
    expect(bpeTokenizer.id_to_token(bpe.learnedSize)).toBe('<|reserved_special_token_0|>');
    const text = 'A mini model, for benchmarks only.';
    expect(bpeTokenizer.decode(bpeTokenizer.encode(text).ids, { skip_special_tokens: true })).toBe(text);
  });
});

describe('sharpen', () => {
  it('decoder: only model.norm.weight changes, to the sharpen factor', () => {
    const sharp = generateModel(join(tempDir(), 's'), { family: 'decoder', sharpen: 4 });
    const a = readSafetensors(join(tinyDecoder.dir, 'model.safetensors')).tensors;
    const b = readSafetensors(join(sharp.dir, 'model.safetensors')).tensors;
    const finalNorm = `${decoderTopModules.finalNorm}.weight`;
    for (const [name, t] of a) expect({ name, same: t.bytes.equals(b.get(name)!.bytes) }).toEqual({ name, same: name !== finalNorm });
    expect(f32(b.get(finalNorm)!).every((x) => x === 4)).toBe(true);
  });

  it('encoder: only the classifier weight and bias change, multiplied by the factor (logits scale exactly)', () => {
    const sharp = generateModel(join(tempDir(), 's'), { family: 'encoder', sharpen: 4 });
    const a = readSafetensors(join(tinyEncoder.dir, 'model.safetensors')).tensors;
    const b = readSafetensors(join(sharp.dir, 'model.safetensors')).tensors;
    const classifier = [`${encoderTopModules(tinyEncoder.config).classifier}.weight`, `${encoderTopModules(tinyEncoder.config).classifier}.bias`];
    for (const [name, t] of a) {
      expect({ name, same: t.bytes.equals(b.get(name)!.bytes) }).toEqual({ name, same: !classifier.includes(name) });
      if (classifier.includes(name)) expect(f32(b.get(name)!)).toEqual(f32(t).map((x) => x * 4));
    }
    expect(() => generateModel(tempDir(), { family: 'encoder', sharpen: 2, overrides: { architecture: 'BertModel' } })).toThrow(/no classifier/);
    expect(() => generateModel(tempDir(), { family: 'decoder', sharpen: 0 })).toThrow(/sharpen/);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Tokenizers
// ---------------------------------------------------------------------------------------------------------------

describe('tokenizers', () => {
  it('WordPiece: [PAD]=0 as in the config, [CLS] … [SEP] template, pair types, round trip through @huggingface/tokenizers', () => {
    const tok = loadTokenizer(tinyEncoder.dir);
    expect(tok.get_vocab().size).toBe(tinyEncoder.config.vocabSize);
    expect(tok.token_to_id('[PAD]')).toBe(tinyEncoder.config.padTokenId);
    expect(['[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((t) => tok.token_to_id(t))).toEqual([1, 2, 3, 4]);
    const text = 'The Morning train leaves at 7, and nobody is surprised!';
    const enc = tok.encode(text);
    expect(enc.ids[0]).toBe(2);
    expect(enc.ids.at(-1)).toBe(3);
    expect(enc.ids).not.toContain(1);
    expect(enc.tokens).toContain('train');
    expect(tok.decode(enc.ids, { skip_special_tokens: true })).toBe(text.toLowerCase());
    // A word outside the corpus falls back to '##' pieces, never to [UNK].
    expect(tok.encode('zyxwv').tokens.slice(1, -1).join(' ').replace(/ ##/g, '')).toBe('zyxwv');
    const pair = tok.encode('the sea', { text_pair: 'the sky', return_token_type_ids: true });
    expect(pair.tokens).toEqual(['[CLS]', 'the', 'sea', '[SEP]', 'the', 'sky', '[SEP]']);
    expect(pair.token_type_ids).toEqual([0, 0, 0, 0, 1, 1, 1]);
    expect(readJson(join(tinyEncoder.dir, 'special_tokens_map.json'))).toEqual({ cls_token: '[CLS]', mask_token: '[MASK]', pad_token: '[PAD]', sep_token: '[SEP]', unk_token: '[UNK]' });
    expect(readJson(join(tinyEncoder.dir, 'tokenizer_config.json'))).toMatchObject({ tokenizer_class: 'BertTokenizer', do_lower_case: true, model_max_length: 128 });
  });

  it('byte-level BPE: bos/eos ids agree with config.json, bos prepended, exact round trip of any UTF-8', () => {
    const tok = loadTokenizer(tinyDecoder.dir);
    const config = tinyDecoder.config;
    expect(tok.get_vocab().size).toBe(config.vocabSize);
    expect(tok.token_to_id(BOS_TOKEN)).toBe(config.bosTokenId);
    expect(tok.token_to_id(EOS_TOKEN)).toBe(config.eosTokenIds[0]);
    const hf = readJson(join(tinyDecoder.dir, 'config.json'));
    expect([hf.bos_token_id, hf.eos_token_id]).toEqual([tok.token_to_id(BOS_TOKEN), tok.token_to_id(EOS_TOKEN)]);
    for (const text of ['The morning train to the coast.', "  It's 23 degrees -- über-cool, naïve café 東京 🚆\n\ttabs", 'x']) {
      const enc = tok.encode(text);
      expect(enc.ids[0]).toBe(config.bosTokenId);
      expect(enc.ids.every((id: number) => id >= 0 && id < config.vocabSize)).toBe(true);
      expect(tok.decode(enc.ids, { skip_special_tokens: true })).toBe(text);
    }
    // Learned merges make common words single tokens.
    expect(tok.encode(' the', { add_special_tokens: false }).tokens).toEqual(['Ġthe']);
    expect(tok.encode(`hi${EOS_TOKEN}`).ids.at(-1)).toBe(config.eosTokenIds[0]);
    expect(readJson(join(tinyDecoder.dir, 'tokenizer_config.json'))).toMatchObject({ bos_token: BOS_TOKEN, eos_token: EOS_TOKEN, clean_up_tokenization_spaces: false });
  });

  it('the GPT-2 byte table covers all 256 bytes with visible, distinct symbols, printable bytes first', () => {
    const table = gpt2ByteSymbols();
    expect(table).toHaveLength(256);
    expect(new Set(table.map((t) => t.byte)).size).toBe(256);
    expect(new Set(table.map((t) => t.symbol)).size).toBe(256);
    expect(table[0]).toEqual({ byte: 0x21, symbol: '!' });
    expect(table.find((t) => t.byte === 0x20)!.symbol).toBe('Ġ');
    expect(table.find((t) => t.byte === 0x0a)!.symbol).toBe('Ċ');
  });

  it('the BPE trainer merges the most frequent pair first and breaks ties by pair string order', () => {
    // Pieces "ab", " cd", " cd": (Ġ,c) and (c,d) occur twice, (a,b) once. 'c' < 'Ġ', so (c,d) goes first.
    expect(learnByteLevelMerges('ab cd cd', 300).merges).toEqual([['c', 'd'], ['Ġ', 'cd'], ['a', 'b']]);
    // All ties: ('a','b') < ('c','d') < ('Ġ','c').
    expect(learnByteLevelMerges('ab cd', 300).merges).toEqual([['a', 'b'], ['c', 'd'], ['Ġ', 'cd']]);
    expect(learnByteLevelMerges('ab cd', 257).merges).toEqual([['a', 'b']]);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// LoRA adapters
// ---------------------------------------------------------------------------------------------------------------

describe('PEFT name matching', () => {
  it('target_modules: list entries match the module name or a dotted suffix; a string is a full-match regex', () => {
    expect(peftTargetMatches(['q_proj'], 'model.layers.0.self_attn.q_proj')).toBe(true);
    expect(peftTargetMatches(['self_attn.q_proj'], 'model.layers.0.self_attn.q_proj')).toBe(true);
    expect(peftTargetMatches(['proj'], 'model.layers.0.self_attn.q_proj')).toBe(false);
    expect(peftTargetMatches(['dense'], 'bert.encoder.layer.0.attention.output.dense')).toBe(true);
    expect(peftTargetMatches('.*\\.layers\\.1\\..*(q|v)_proj', 'model.layers.1.self_attn.v_proj')).toBe(true);
    expect(peftTargetMatches('.*\\.layers\\.1\\..*(q|v)_proj', 'model.layers.11.self_attn.v_proj')).toBe(false);
    expect(peftTargetMatches('q_proj', 'model.layers.0.self_attn.q_proj')).toBe(false);
  });

  it('rank_pattern: the first key k with (^|.*\\.)k$ matching wins', () => {
    const patterns = { 'layers.1.self_attn.q_proj': 2, q_proj: 4 };
    expect(peftPatternKey(patterns, 'model.layers.1.self_attn.q_proj')).toBe('layers.1.self_attn.q_proj');
    expect(peftPatternKey(patterns, 'model.layers.11.self_attn.q_proj')).toBe('q_proj');
    expect(peftPatternKey(patterns, 'model.layers.0.self_attn.v_proj')).toBeUndefined();
    expect(peftPatternKey({ proj: 3 }, 'model.layers.0.self_attn.q_proj')).toBeUndefined();
    expect(loraRankFor({ r: 8, rankPattern: patterns }, 'model.layers.0.self_attn.q_proj')).toBe(4);
    expect(loraRankFor({ r: 8, rankPattern: patterns }, 'model.layers.0.self_attn.v_proj')).toBe(8);
  });
});

describe('LoRA adapters', () => {
  it('PEFT layout: config keys, tensor names, [r, in] / [out, r] shapes with ranks per rank_pattern', () => {
    const adapter = generateLoraAdapter(join(tempDir(), 'a'), {
      base: tinyDecoder.config,
      rank: 8,
      alpha: 16,
      targets: ['q_proj', 'v_proj', 'down_proj'],
      rankPattern: { 'layers.1.self_attn.q_proj': 2, down_proj: 4 },
      alphaPattern: { v_proj: 32 },
      seed: 3,
    });
    const json = readJson(join(adapter.dir, 'adapter_config.json'));
    expect(json).toMatchObject({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      r: 8,
      lora_alpha: 16,
      target_modules: ['q_proj', 'v_proj', 'down_proj'],
      rank_pattern: { 'layers.1.self_attn.q_proj': 2, down_proj: 4 },
      alpha_pattern: { v_proj: 32 },
      use_rslora: false,
      fan_in_fan_out: false,
      bias: 'none',
    });
    const { metadata, tensors } = readSafetensors(join(adapter.dir, 'adapter_model.safetensors'));
    expect(metadata).toEqual({ format: 'pt' });
    const expected = new Map<string, number[]>();
    const c = tinyDecoder.config;
    for (let i = 0; i < c.numLayers; i++) {
      const lin = decoderLinearModules(i);
      const q = peftLoraTensorNames(lin.q);
      const v = peftLoraTensorNames(lin.v);
      const down = peftLoraTensorNames(lin.down);
      const qRank = i === 1 ? 2 : 8;
      expected.set(q.a, [qRank, c.hiddenSize]).set(q.b, [c.numHeads * c.headDim, qRank]);
      expected.set(v.a, [8, c.hiddenSize]).set(v.b, [c.numKvHeads * c.headDim, 8]);
      expected.set(down.a, [4, c.intermediateSize]).set(down.b, [c.hiddenSize, 4]);
    }
    expect(new Map([...tensors].map(([n, t]) => [n, t.shape]))).toEqual(expected);
    for (const t of tensors.values()) expect(t.dtype).toBe('F32');
    expect(tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')).toBeDefined();
    const v0 = adapter.modules.find((m) => m.module === decoderLinearModules(0).v)!;
    expect(v0).toMatchObject({ rank: 8, alpha: 32, scaling: 4 });

    // A is kaiming-uniform (bound 1/√in); B is random, not PEFT's zeros.
    const a = f32(tensors.get(peftLoraTensorNames(decoderLinearModules(0).down).a)!);
    expect(a.every((x) => Math.abs(x) <= 1 / Math.sqrt(c.intermediateSize))).toBe(true);
    expect(f32(tensors.get(peftLoraTensorNames(decoderLinearModules(0).down).b)!).some((x) => x !== 0)).toBe(true);
  });

  it('encoder adapters target query/value by default, task SEQ_CLS; same seed same bytes, other seed other bytes', () => {
    const one = generateLoraAdapter(join(tempDir(), 'e'), { base: tinyEncoder.config, seed: 5 });
    const two = generateLoraAdapter(join(tempDir(), 'e'), { base: tinyEncoder.config, seed: 5 });
    const three = generateLoraAdapter(join(tempDir(), 'e'), { base: tinyEncoder.config, seed: 6 });
    expect(one.config.targetModules).toEqual(['query', 'value']);
    expect(readJson(join(one.dir, 'adapter_config.json')).task_type).toBe('SEQ_CLS');
    expect(one.modules.map((m) => m.module)).toEqual([
      'bert.encoder.layer.0.attention.self.query',
      'bert.encoder.layer.0.attention.self.value',
      'bert.encoder.layer.1.attention.self.query',
      'bert.encoder.layer.1.attention.self.value',
    ]);
    const file = (d: string) => readFileSync(join(d, 'adapter_model.safetensors'));
    expect(file(one.dir).equals(file(two.dir))).toBe(true);
    expect(file(one.dir).equals(file(three.dir))).toBe(false);
    const regex = generateLoraAdapter(join(tempDir(), 'r'), { base: tinyEncoder.config, targets: '.*layer\\.1\\..*dense' });
    expect(regex.modules.map((m) => m.module)).toEqual([
      'bert.encoder.layer.1.attention.output.dense',
      'bert.encoder.layer.1.intermediate.dense',
      'bert.encoder.layer.1.output.dense',
    ]);
  });

  it('rejects targets that match nothing and inconsistent modules', () => {
    expect(() => generateLoraAdapter(tempDir(), { base: tinyDecoder.config, targets: ['q_proj', 'query'] })).toThrow(/query match no decoder Linear/);
    const config = { r: 4, loraAlpha: 8, targetModules: ['q_proj'], fanInFanOut: false, bias: 'none' as const, rankPattern: {}, alphaPattern: {}, useRslora: false, baseModelNameOrPath: null, taskType: null, modulesToSave: null };
    const module = { module: 'model.layers.0.self_attn.q_proj', rank: 4, inFeatures: 64, outFeatures: 64, a: new Float32Array(256), b: new Float32Array(256) };
    expect(() => writeLoraAdapter(tempDir(), config, [{ ...module, rank: 2, a: new Float32Array(128), b: new Float32Array(128) }])).toThrow(/has rank 2, but r \/ rank_pattern give it 4/);
    expect(() => writeLoraAdapter(tempDir(), config, [{ ...module, b: new Float32Array(255) }])).toThrow(/lora_B must be \[64, 4\]/);
    expect(() => writeLoraAdapter(tempDir(), config, [{ ...module, module: 'model.layers.0.self_attn.k_proj' }])).toThrow(/not matched by target_modules/);
    expect(() => writeLoraAdapter(tempDir(), config, [module, module])).toThrow(/appears twice/);
  });

  it('the default adapter changes the tiny decoder greedy tokens and keeps logits finite; bStd 0 is a no-op', () => {
    const tok = loadTokenizer(tinyDecoder.dir);
    const ids = tok.encode('The morning train to the coast leaves the old station at seven').ids;
    const base = decoderLogits(tinyDecoder.dir, tinyDecoder.config, ids);
    const adapter = generateLoraAdapter(join(tempDir(), 'g'), { base: tinyDecoder.config });
    const adapted = decoderLogits(tinyDecoder.dir, tinyDecoder.config, ids, adapter.dir, adapter.modules[0]!.scaling);
    expect(adapted.every((row) => row.every(Number.isFinite))).toBe(true);
    const changed = adapted.filter((row, i) => argmax(row) !== argmax(base[i]!)).length;
    expect(changed).toBeGreaterThanOrEqual(ids.length / 4);
    const noop = generateLoraAdapter(join(tempDir(), 'z'), { base: tinyDecoder.config, bStd: 0 });
    const same = decoderLogits(tinyDecoder.dir, tinyDecoder.config, ids, noop.dir, noop.modules[0]!.scaling);
    expect(same).toEqual(base);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// A plain f64 Llama forward (RMSNorm, RoPE rotate-half, GQA causal attention, SwiGLU), with optional LoRA deltas.
// ---------------------------------------------------------------------------------------------------------------

function argmax(row: Float64Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/** Logits for every position of `ids`, optionally with the adapter in `adapterDir` applied at `scaling`. */
function decoderLogits(dir: string, config: DecoderConfig, ids: number[], adapterDir?: string, scaling = 1): Float64Array[] {
  const weights = new Map([...readSafetensors(join(dir, 'model.safetensors')).tensors].map(([k, v]) => [k, f32(v)]));
  const get = (name: string): Float32Array => {
    const w = weights.get(name);
    if (!w) throw new Error(`no tensor ${name}`);
    return w;
  };
  const lora = new Map<string, { a: Float32Array; b: Float32Array; rank: number }>();
  if (adapterDir) {
    const tensors = readSafetensors(join(adapterDir, 'adapter_model.safetensors')).tensors;
    for (let i = 0; i < config.numLayers; i++) {
      for (const module of Object.values(decoderLinearModules(i))) {
        const names = peftLoraTensorNames(module);
        const a = tensors.get(names.a);
        const b = tensors.get(names.b);
        if (a && b) lora.set(module, { a: f32(a), b: f32(b), rank: a.shape[0]! });
      }
    }
  }
  const { hiddenSize: h, headDim: d, numHeads: nh, numKvHeads: nkv, intermediateSize: f } = config;
  const matvec = (w: Float32Array, x: Float64Array, out: number, inn: number): Float64Array => {
    const y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let s = 0;
      for (let i = 0; i < inn; i++) s += w[o * inn + i]! * x[i]!;
      y[o] = s;
    }
    return y;
  };
  const linear = (module: string, x: Float64Array, out: number, inn: number): Float64Array => {
    const y = matvec(get(`${module}.weight`), x, out, inn);
    const l = lora.get(module);
    if (l) {
      const delta = matvec(l.b, matvec(l.a, x, l.rank, inn), out, l.rank);
      for (let o = 0; o < out; o++) y[o]! += scaling * delta[o]!;
    }
    return y;
  };
  const rmsNorm = (x: Float64Array, gain: Float32Array): Float64Array => {
    const k = 1 / Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + config.rmsNormEps);
    return x.map((v, i) => v * k * gain[i]!);
  };
  const rope = (v: Float64Array, heads: number, pos: number): void => {
    for (let head = 0; head < heads; head++) {
      for (let i = 0; i < d / 2; i++) {
        const angle = pos * config.ropeTheta ** ((-2 * i) / d);
        const [c, s] = [Math.cos(angle), Math.sin(angle)];
        const [x1, x2] = [v[head * d + i]!, v[head * d + i + d / 2]!];
        v[head * d + i] = x1 * c - x2 * s;
        v[head * d + i + d / 2] = x2 * c + x1 * s;
      }
    }
  };
  const embed = get(`${decoderTopModules.embedTokens}.weight`);
  let xs = ids.map((t) => Float64Array.from(embed.subarray(t * h, (t + 1) * h)));
  for (let layer = 0; layer < config.numLayers; layer++) {
    const lin = decoderLinearModules(layer);
    const norm = decoderNormModules(layer);
    const qs: Float64Array[] = [];
    const ks: Float64Array[] = [];
    const vs: Float64Array[] = [];
    xs.forEach((x, pos) => {
      const hn = rmsNorm(x, get(`${norm.input_norm}.weight`));
      const q = linear(lin.q, hn, nh * d, h);
      const k = linear(lin.k, hn, nkv * d, h);
      rope(q, nh, pos);
      rope(k, nkv, pos);
      qs.push(q);
      ks.push(k);
      vs.push(linear(lin.v, hn, nkv * d, h));
    });
    xs = xs.map((x, pos) => {
      const attn = new Float64Array(nh * d);
      for (let head = 0; head < nh; head++) {
        const kv = Math.floor(head / (nh / nkv));
        const scores: number[] = [];
        for (let j = 0; j <= pos; j++) {
          let s = 0;
          for (let i = 0; i < d; i++) s += qs[pos]![head * d + i]! * ks[j]![kv * d + i]!;
          scores.push(s / Math.sqrt(d));
        }
        const max = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - max));
        const z = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j <= pos; j++) for (let i = 0; i < d; i++) attn[head * d + i]! += (e[j]! / z) * vs[j]![kv * d + i]!;
      }
      const o = linear(lin.o, attn, h, nh * d);
      const mid = x.map((v, i) => v + o[i]!);
      const hn = rmsNorm(mid, get(`${norm.post_attn_norm}.weight`));
      const gate = linear(lin.gate, hn, f, h);
      const up = linear(lin.up, hn, f, h);
      const down = linear(lin.down, gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]!), h, f);
      return mid.map((v, i) => v + down[i]!);
    });
  }
  const head = get(`${config.tieWordEmbeddings ? decoderTopModules.embedTokens : decoderTopModules.lmHead}.weight`);
  return xs.map((x) => matvec(head, rmsNorm(x, get(`${decoderTopModules.finalNorm}.weight`)), config.vocabSize, h));
}

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/formats/tokenizer.js';
import { generateModel } from '../src/gen/index.js';
import { IGNORE_INDEX } from '../src/train/decoder.js';
import { BatchSampler, causalLmBatch, datasetFromRecords, readJsonl, shuffledOrder, tokenizeCausalLm } from '../src/train/data.js';
import { TrainDataError } from '../src/train/errors.js';
import { trainLora } from '../src/train/trainer.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-train-data-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const modelDir = join(root, 'model');
const generated = generateModel(modelDir, { family: 'decoder', seed: 2 });
const tokenizer = TextTokenizer.fromDir(modelDir);
const eos = tokenizer.specialTokenIds.eos!;

function jsonl(name: string, lines: string[]): string {
  const path = join(root, name);
  writeFileSync(path, lines.join('\n'));
  return path;
}

function thrown(f: () => unknown): TrainDataError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(TrainDataError);
    return err as TrainDataError;
  }
  throw new Error('did not throw');
}

describe('training data', () => {
  it('reads JSONL, skipping blank lines and keeping source line numbers', () => {
    const path = jsonl('ok.jsonl', ['{"prompt": "a", "completion": " b"}', '', '  {"prompt": "c", "completion": " d"}  ', '']);
    const d = readJsonl(path);
    expect(d.kind).toBe('prompt-completion');
    expect(d.lines).toEqual([1, 3]);
  });

  it('names the file and line of a bad record', () => {
    const cases: [string[], number, RegExp][] = [
      [['{"text": "x"}', '{"text": "y"', '{"text": "z"}'], 2, /not valid JSON/],
      [['{"prompt": "a", "completion": " b"}', '{"prompt": "a"}'], 2, /"completion" must be a string/],
      [['{"prompt": "a", "completion": ""}'], 1, /"completion" is empty/],
      [['{"text": "a"}', '', '{"prompt": "a", "completion": " b"}'], 3, /prompt-completion record in a text data set/],
      [['[1, 2]'], 1, /must be a JSON object/],
      [['{"input": "a"}'], 1, /needs "text", "prompt" \+ "completion"/],
      [['{"text": "a", "label": 1.5}'], 1, /"label" must be a string or an integer/],
    ];
    cases.forEach(([lines, line, message], i) => {
      const path = jsonl(`bad-${i}.jsonl`, lines);
      const err = thrown(() => readJsonl(path));
      expect(err.line).toBe(line);
      expect(err.path).toBe(path);
      expect(err.message).toContain(`${path}:${line}:`);
      expect(err.message).toMatch(message);
    });
    expect(thrown(() => readJsonl(join(root, 'missing.jsonl'))).message).toMatch(/cannot read/);
    expect(thrown(() => readJsonl(jsonl('empty.jsonl', ['', '']))).message).toMatch(/no records/);
  });

  it('prompt + completion: the prompt with the template, the completion and EOS, loss on the completion only', () => {
    const [ex] = tokenizeCausalLm(datasetFromRecords([{ prompt: 'key 3 ->', completion: ' river' }]), tokenizer, { maxLength: 64 });
    const p = tokenizer.encode('key 3 ->');
    const c = tokenizer.encode(' river', { addSpecialTokens: false });
    expect(p[0]).toBe(tokenizer.specialTokenIds.bos);
    expect(ex!.ids).toEqual([...p, ...c, eos]);
    expect(Array.from(ex!.loss)).toEqual([...p.map(() => 0), ...c.map(() => 1), 1]);
    const err = thrown(() => tokenizeCausalLm(datasetFromRecords([{ prompt: 'a', completion: ' b' }, { prompt: 'x '.repeat(40), completion: ' y' }]), tokenizer, { maxLength: 16 }));
    expect(err.line).toBe(2);
    expect(err.message).toMatch(/more than the maximum length 16/);
  });

  it('text records are packed into blocks of maxLength, every token after the first predicted', () => {
    const texts = ['hello world', 'the quick brown fox', 'jumps over the lazy dog'];
    const all = texts.flatMap((t) => [...tokenizer.encode(t), eos]);
    const blocks = tokenizeCausalLm(datasetFromRecords(texts.map((text) => ({ text }))), tokenizer, { maxLength: 8 });
    expect(blocks.map((b) => b.ids).flat()).toEqual(all.length % 8 === 1 ? all.slice(0, -1) : all);
    expect(blocks.slice(0, -1).every((b) => b.ids.length === 8)).toBe(true);
    expect(blocks.every((b) => b.loss.every((x) => x === 1))).toBe(true);
    const unpacked = tokenizeCausalLm(datasetFromRecords(texts.map((text) => ({ text }))), tokenizer, { maxLength: 64, pack: false });
    expect(unpacked.map((b) => b.line)).toEqual([1, 2, 3]);
  });

  it('batches right-pad with mask 0 and shift the targets', () => {
    const b = causalLmBatch([
      { ids: [5, 6, 7, 8], loss: Uint8Array.of(0, 0, 1, 1), line: 1 },
      { ids: [9, 10], loss: Uint8Array.of(0, 1), line: 2 },
    ], 99);
    expect([b.batch, b.seq]).toEqual([2, 4]);
    expect(Array.from(b.tokens)).toEqual([5, 6, 7, 8, 9, 10, 99, 99]);
    expect(Array.from(b.mask!)).toEqual([1, 1, 1, 1, 1, 1, 0, 0]);
    const I = IGNORE_INDEX;
    expect(Array.from(b.targets)).toEqual([I, 7, 8, I, 10, I, I, I]);
  });

  it('shuffling is a seeded permutation per epoch, and a sampler resumes from (epoch, cursor)', () => {
    const a = shuffledOrder(50, 7, 0);
    expect([...a].sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(shuffledOrder(50, 7, 0)).toEqual(a);
    expect(shuffledOrder(50, 7, 1)).not.toEqual(a);
    expect(shuffledOrder(50, 8, 0)).not.toEqual(a);
    const s = new BatchSampler(10, 4, 3);
    const seen = Array.from({ length: 7 }, () => s.next());
    expect(seen.slice(0, 3).flat().sort((x, y) => x - y)).toEqual(Array.from({ length: 10 }, (_, i) => i));
    expect(seen[2]!.length).toBe(2);
    const r = new BatchSampler(10, 4, 3);
    r.seek(1, 4);
    expect([r.next(), r.next(), r.next()]).toEqual(seen.slice(4, 7));
  });

  it('trainLora fails on a bad line before any step', () => {
    const path = jsonl('late-bad.jsonl', ['{"prompt": "a", "completion": " b"}', '{"prompt": "c", "completion": " d"}', '{"prompt": "e", "completion": 3}']);
    let steps = 0;
    const err = thrown(() => trainLora({ model: modelDir, data: path, steps: 5, onProgress: () => steps++ }));
    expect(err.line).toBe(3);
    expect(steps).toBe(0);
    expect(generated.config.family).toBe('decoder');
  });
});

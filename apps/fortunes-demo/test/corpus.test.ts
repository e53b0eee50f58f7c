import { existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { FORTUNES_DIR, MissingCorpusError, isCategoryFile, parseFortuneFile, readFortunes, splitCategory, writeCorpus } from '../src/corpus.js';

const quotes = (n: number) => Array.from({ length: n }, (_, i) => `quotation number ${i}\n\t\t-- someone ${i % 7}`);

function fakeFortunes(): string {
  const dir = mkdtempSync(join(tmpdir(), 'fortunes-'));
  writeFileSync(join(dir, 'alpha'), 'A first one.\n%\nA second,\non two lines.   \n%\n\n%\nA first one.\n%\nThe last, no trailing percent.\n');
  writeFileSync(join(dir, 'alpha.dat'), Buffer.from([0, 1, 2, 3]));
  symlinkSync('alpha', join(dir, 'alpha.u8'));
  writeFileSync(join(dir, 'beta'), `${quotes(40).join('\n%\n')}\n%\n`);
  writeFileSync(join(dir, 'ascii-art'), '  /\\_/\\\n ( o.o )\n%\n');
  mkdirSync(join(dir, 'off'));
  writeFileSync(join(dir, 'off', 'rude'), 'not read\n%\n');
  return dir;
}

describe('parseFortuneFile', () => {
  it('splits on % lines, trims trailing spaces and blank edges, drops empty and duplicate quotations', () => {
    expect(parseFortuneFile('A first one.\n%\n\nA second,\non two lines.   \n\n%\n%\nA first one.\n%\nlast')).toEqual([
      'A first one.',
      'A second,\non two lines.',
      'last',
    ]);
  });
  it('keeps a % that is not alone on its line, and handles CRLF', () => {
    expect(parseFortuneFile('100% sure\r\n%\r\nnext\r\n')).toEqual(['100% sure', 'next']);
  });
  it('returns nothing for an empty file', () => {
    expect(parseFortuneFile('')).toEqual([]);
  });
});

describe('splitCategory', () => {
  it('is deterministic for a seed and differs across seeds and categories', () => {
    const q = quotes(200);
    const a = splitCategory('science', q, { seed: 7 });
    expect(splitCategory('science', q, { seed: 7 })).toEqual(a);
    expect(splitCategory('science', q, { seed: 8 }).heldOut).not.toEqual(a.heldOut);
    expect(splitCategory('politics', q, { seed: 7 }).heldOut).not.toEqual(a.heldOut);
  });

  it('puts every quotation in exactly one split, in file order, with ⌈fraction·n⌉ held out', () => {
    for (const n of [2, 3, 10, 99, 200]) {
      const q = quotes(n);
      const { train, heldOut } = splitCategory('c', q, { seed: 1, heldOutFraction: 0.1 });
      expect(heldOut.length).toBe(Math.min(n - 1, Math.max(1, Math.ceil(0.1 * n))));
      expect(train.length + heldOut.length).toBe(n);
      expect(new Set([...train, ...heldOut])).toEqual(new Set(q));
      for (const part of [train, heldOut]) expect(part).toEqual(q.filter((x) => part.includes(x)));
    }
  });

  it('keeps a single quotation for training and refuses a bad fraction', () => {
    expect(splitCategory('c', ['only'], { seed: 1 })).toEqual({ train: ['only'], heldOut: [] });
    expect(splitCategory('c', [], { seed: 1 })).toEqual({ train: [], heldOut: [] });
    expect(() => splitCategory('c', quotes(3), { seed: 1, heldOutFraction: 1 })).toThrow(RangeError);
  });
});

describe('readFortunes / writeCorpus', () => {
  it('reads category files only: no .dat, .u8, ascii-art or offensive sets', () => {
    const cats = readFortunes(fakeFortunes());
    expect([...cats.keys()]).toEqual(['alpha', 'beta']);
    expect(cats.get('alpha')).toEqual(['A first one.', 'A second,\non two lines.', 'The last, no trailing percent.']);
    expect(cats.get('beta')).toHaveLength(40);
    expect(['x.dat', 'x.u8', 'ascii-art', '.hidden'].map(isCategoryFile)).toEqual([false, false, false, false]);
  });

  it('names the apt-get command when the files are absent', () => {
    const missing = join(tmpdir(), 'no-such-fortunes-dir');
    expect(() => readFortunes(missing)).toThrow(MissingCorpusError);
    expect(() => readFortunes(missing)).toThrow(/apt-get install fortunes fortunes-min/);
    const empty = mkdtempSync(join(tmpdir(), 'fortunes-empty-'));
    expect(() => readFortunes(empty)).toThrow(/holds no fortune files.*apt-get install fortunes fortunes-min/);
  });

  it('writes one train and one held-out JSONL per category and the two all.* files, the same on a rerun', () => {
    const src = fakeFortunes();
    const out = mkdtempSync(join(tmpdir(), 'fortunes-out-'));
    const files = writeCorpus(out, { seed: 3, fortunesDir: src });
    const read = (p: string) => readFileSync(p, 'utf8').split('\n').filter(Boolean).map((l) => (JSON.parse(l) as { text: string }).text);
    const beta = files.categories.find((c) => c.name === 'beta')!;
    expect([beta.trainCount, beta.heldOutCount]).toEqual([36, 4]);
    expect(new Set([...read(beta.train), ...read(beta.heldOut)])).toEqual(new Set(quotes(40)));
    expect(read(files.allTrain).length + read(files.allHeldOut).length).toBe(43);
    const first = readFileSync(files.allHeldOut, 'utf8');
    writeCorpus(out, { seed: 3, fortunesDir: src });
    expect(readFileSync(files.allHeldOut, 'utf8')).toBe(first);
  });

  it.runIf(existsSync(FORTUNES_DIR))('splits the installed fortunes into disjoint parts covering every quotation', () => {
    for (const [name, q] of readFortunes()) {
      const { train, heldOut } = splitCategory(name, q, { seed: 20_261_126 });
      const held = new Set(heldOut);
      expect(train.some((t) => held.has(t))).toBe(false);
      expect(train.length + heldOut.length).toBe(q.length);
    }
  });
});

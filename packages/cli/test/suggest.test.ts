/** The did-you-mean: edit distance against a plain recursive reference on random, ragged and empty strings. */
import { rng } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';

import { COMMANDS, didYouMean, editDistance, SERVERS } from '../src/index.js';

/** Optimal string alignment distance, straight from its recurrence (exponential; short strings only). */
function reference(a: string, b: string): number {
  if (a.length === 0) return b.length;
  if (b.length === 0) return a.length;
  const i = a.length;
  const j = b.length;
  let d = Math.min(reference(a.slice(0, -1), b) + 1, reference(a, b.slice(0, -1)) + 1, reference(a.slice(0, -1), b.slice(0, -1)) + (a[i - 1] === b[j - 1] ? 0 : 1));
  if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, reference(a.slice(0, -2), b.slice(0, -2)) + 1);
  return d;
}

describe('editDistance', () => {
  it('matches the recurrence on random strings of ragged lengths (0 to 6) over a small alphabet', () => {
    const next = rng(20);
    const word = () => Array.from({ length: Math.floor(next() * 7) }, () => 'abc'[Math.floor(next() * 3)]).join('');
    for (let k = 0; k < 400; k++) {
      const a = word();
      const b = word();
      expect({ a, b, d: editDistance(a, b) }).toEqual({ a, b, d: reference(a, b) });
    }
  });

  it('empty strings, identity, symmetry, and a swap of neighbours costing 1', () => {
    expect(editDistance('', '')).toBe(0);
    expect(editDistance('', 'serve')).toBe(5);
    expect(editDistance('train', '')).toBe(5);
    expect(editDistance('bench', 'bench')).toBe(0);
    expect(editDistance('sevre', 'serve')).toBe(1);
    expect(editDistance('punica', 'pets')).toBe(editDistance('pets', 'punica'));
  });
});

describe('didYouMean', () => {
  const commands = COMMANDS.map((c) => c.name);
  it('suggests the closest name for a typo, a prefix, or a different case; nothing for a far word', () => {
    expect(didYouMean('sevre', commands)).toBe('serve');
    expect(didYouMean('trian', commands)).toBe('train');
    expect(didYouMean('GEN', commands)).toBe('gen');
    expect(didYouMean('ben', commands)).toBe('bench');
    expect(didYouMean('punca', SERVERS.map((s) => s.name))).toBe('punica');
    expect(didYouMean('pet', SERVERS.map((s) => s.name))).toBe('pets');
    expect(didYouMean('frobnicate', commands)).toBeNull();
    expect(didYouMean('x', commands)).toBeNull();
    expect(didYouMean('', commands)).toBeNull();
    expect(didYouMean('serve', [])).toBeNull();
  });
});

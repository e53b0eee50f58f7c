/**
 * hmi.md §4.1 behaviours 4 (back-off order), 5 (version isolation), 6 (storage) and A7 (copy-on-write updates,
 * reference-counted collection), on synthetic values: each key's row is a seeded function of (key, salt), where
 * the salt stands for the lower layers that computed it.
 */
import { mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import {
  CorpusTooSmallError,
  formatKey,
  HeapPlotValueStore,
  type PlotKey,
  packKey,
  PlotStoreArgumentError,
  PlotVersionTree,
  ROOT_VERSION,
  ReservedKeyError,
  rootKeys,
  selectByCoverage,
  SEPARATOR_KEY,
  TokenIdOutOfRangeError,
  TrigramCounts,
  TrigramKeyCodec,
  UnknownVersionError,
  type VersionId,
  VersionStateError,
  ZERO_ROW,
} from '../src/index.js';
import { zipfCorpus } from '../src/corpus/zipf.js';

const HIDDEN = 4;
const WIDTH = 3 * HIDDEN;

/** Values in ±[1, 2) (never zero, so a zero row is never mistaken for a stored one), seeded by (key, salt). */
function synth(keys: ArrayLike<PlotKey> | Iterable<PlotKey>, salt: number): Float32Array {
  const list = [...(keys as Iterable<PlotKey>)];
  const out = new Float32Array(list.length * WIDTH);
  list.forEach((key, i) => {
    const lo = Number(key & 0xffffffffn);
    const hi = Number(key >> 32n);
    const rand = mulberry32((lo ^ Math.imul(hi, 0x9e3779b1) ^ Math.imul(salt + 1, 0x85ebca6b)) >>> 0);
    for (let j = 0; j < WIDTH; j++) out[i * WIDTH + j] = (rand() < 0.5 ? -1 : 1) * (1 + rand());
  });
  return out;
}

function newTree(options: { minCorpusTokens?: number; mode?: 'encoder' | 'causal' } = {}) {
  const codec = new TrigramKeyCodec({ vocabSize: 1000, ...(options.mode ? { mode: options.mode } : {}) });
  const values = new HeapPlotValueStore({ hidden: HIDDEN });
  const tree = new PlotVersionTree({ codec, values, ...(options.minCorpusTokens !== undefined ? { minCorpusTokens: options.minCorpusTokens } : {}) });
  return { codec, values, tree };
}

/** A hand-made table: every key its own entry, values seeded by `salt`. */
function entries(keys: PlotKey[], salt: number) {
  return { keys, values: synth(keys, salt) };
}

/** A selection holding exactly `keys` (for hand-built branches). */
function selectionOf(keys: PlotKey[], alpha = 1) {
  const counts = new TrigramCounts();
  keys.forEach((k, i) => counts.add(k, keys.length - i));
  return selectByCoverage(counts, alpha);
}

describe('A2 back-off along the ancestor chain', () => {
  const { codec, tree } = newTree();
  const k = (l: number, c: number, r: number) => packKey(l, c, r);
  tree.createRoot(entries([k(0, 5, 0), k(0, 5, 6), k(4, 5, 6), k(3, 5, 9), k(0, 7, 0)], 0));
  const a = tree.createBranch({ domain: 'a', selection: selectionOf([k(4, 5, 6), k(0, 5, 9), k(1, 7, 2)]), values: synth([k(4, 5, 6), k(0, 5, 9), k(1, 7, 2)], 1) }).id;
  const sub = tree.createBranch({ domain: 'sub', parent: a, selection: selectionOf([k(2, 7, 2)]), values: synth([k(2, 7, 2)], 2) }).id;
  const where = (v: VersionId, key: PlotKey) => {
    const r = tree.lookup(v, key);
    return [r.version, r.step, r.key === null ? null : formatKey(r.key)];
  };

  it('the most specific version holding the exact key wins', () => {
    expect(tree.chain(sub)).toEqual(['sub@1', 'a@1', 'root']);
    expect(where(a, k(4, 5, 6))).toEqual(['a@1', 'exact', '(4,5,6)']);
    expect(where(sub, k(4, 5, 6))).toEqual(['a@1', 'exact', '(4,5,6)']); // an ancestor's tri-gram
    expect(where(ROOT_VERSION, k(4, 5, 6))).toEqual(['root', 'exact', '(4,5,6)']);
    expect(where(sub, k(2, 7, 2))).toEqual(['sub@1', 'exact', '(2,7,2)']);
  });

  it('a tri-gram anywhere on the chain beats a domain bi-gram; then bi-grams, then uni-grams, then the zero row', () => {
    expect(where(a, k(3, 5, 9))).toEqual(['root', 'exact', '(3,5,9)']); // root tri before a's bi (0,5,9)
    expect(where(a, k(8, 5, 9))).toEqual(['a@1', 'bigram', '(0,5,9)']);
    expect(where(sub, k(8, 5, 6))).toEqual(['root', 'bigram', '(0,5,6)']);
    expect(where(sub, k(8, 5, 2))).toEqual(['root', 'unigram', '(0,5,0)']);
    expect(where(sub, k(8, 7, 3))).toEqual(['root', 'unigram', '(0,7,0)']);
    // OOV: no tri, bi or uni entry anywhere on the chain → the zero row.
    expect(tree.lookup(sub, k(1, 8, 2))).toEqual({ row: ZERO_ROW, key: null, version: null, step: 'zero' });
    expect(tree.lookup(sub, SEPARATOR_KEY)).toEqual({ row: ZERO_ROW, key: null, version: null, step: 'separator' });
    // a's (1,7,2) is invisible from the root and from a sibling.
    expect(where(ROOT_VERSION, k(1, 7, 2))).toEqual(['root', 'unigram', '(0,7,0)']);
  });

  it('ids outside the vocabulary are an error, not an OOV', () => {
    expect(() => tree.lookup(a, k(1, 1000, 2))).toThrow(TokenIdOutOfRangeError);
    expect(() => tree.lookupRows(a, BigUint64Array.of(k(1, 1000, 2)))).toThrow(TokenIdOutOfRangeError);
  });

  it('a zeroed slot stays zero: gathering an OOV key or a separator reads the zero row', () => {
    const out = tree.gather(sub, BigUint64Array.of(k(1, 8, 2), SEPARATOR_KEY, k(4, 5, 6)));
    expect([...out.subarray(0, 2 * WIDTH)].every((x) => x === 0)).toBe(true);
    expect([...out.subarray(2 * WIDTH)].some((x) => x !== 0)).toBe(true);
  });

  it('causal keys back off to (PAD, b, c) then (PAD, PAD, c)', () => {
    const t = newTree({ mode: 'causal' }).tree;
    t.createRoot(entries([k(0, 0, 6), k(0, 5, 6)], 3));
    expect(t.lookup(ROOT_VERSION, k(4, 5, 6)).step).toBe('bigram');
    expect(t.lookup(ROOT_VERSION, k(4, 9, 6)).step).toBe('unigram');
    expect(() => t.createRoot(entries([k(0, 0, 6)], 3))).toThrow(VersionStateError);
    void codec;
  });
});

/** A general corpus for the root and two domain corpora with their own frequent phrases. */
function corpora() {
  const phrasesOf = (base: number) => Array.from({ length: 12 }, (_, i) => [base + 3 * i, base + 1 + 3 * i, base + 2 + 3 * i, base + 3 + 3 * i]);
  return {
    general: zipfCorpus({ seed: 1, vocabSize: 1000, sequences: 400, exponent: 1.1 }),
    bio: zipfCorpus({ seed: 2, vocabSize: 1000, sequences: 600, exponent: 1.2, phrases: phrasesOf(100), phraseRate: 0.15 }),
    eco: zipfCorpus({ seed: 3, vocabSize: 1000, sequences: 600, exponent: 1.2, phrases: phrasesOf(500), phraseRate: 0.15 }),
  };
}

function realisticTree() {
  const t = newTree();
  const c = corpora();
  const count = (seqs: number[][]) => new TrigramCounts().addBatch(t.codec.keys(seqs));
  const rootKeySet = rootKeys(t.codec, count(c.general));
  t.tree.createRoot({ keys: rootKeySet, values: synth(rootKeySet, 0) });
  const counts = { bio: count(c.bio), eco: count(c.eco) };
  const probe = (() => {
    const keys = new Set<PlotKey>();
    for (const seqs of [c.general.slice(0, 80), c.bio.slice(0, 80), c.eco.slice(0, 80)]) for (const key of t.codec.keys(seqs).keys) keys.add(key);
    const rand = mulberry32(9);
    for (let i = 0; i < 500; i++) keys.add(packKey(Math.floor(rand() * 1000), 1 + Math.floor(rand() * 999), Math.floor(rand() * 1000)));
    return BigUint64Array.from(keys);
  })();
  return { ...t, c, counts, probe };
}

const same = (a: Uint16Array, b: Uint16Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe('domain branches (A6) and version isolation (behaviour 5)', () => {
  it('a branch holds its α-coverage keys and records how they were chosen', () => {
    const { tree, counts } = realisticTree();
    const selection = selectByCoverage(counts.bio, 0.5);
    const info = tree.createBranch({ domain: 'bio', selection, values: synth(selection.keys, 1) });
    expect(info).toMatchObject({ id: 'bio@1', domain: 'bio', generation: 1, parent: 'root', state: 'live', entries: selection.keys.length });
    expect(info.coverage).toEqual({
      alpha: 0.5,
      boundary: 'inclusive',
      corpusTokens: counts.bio.total,
      distinct: counts.bio.distinct,
      kept: selection.keys.length,
      coveredOccurrences: selection.coveredOccurrences,
      coveredFraction: selection.coveredFraction,
      keptFraction: selection.keptFraction,
    });
    expect(new Set(tree.tableEntries('bio@1').map(([k]) => k))).toEqual(new Set(selection.keys));
    expect(tree.current('bio')).toBe('bio@1');
    // α = 0: an empty table, every lookup from the root.
    const none = tree.createBranch({ domain: 'eco', selection: selectByCoverage(counts.eco, 0), values: new Float32Array(0) });
    expect(none.entries).toBe(0);
  });

  it('creating a branch changes nothing the root or a sibling returns; domains differ exactly on their keep-sets', () => {
    const { tree, counts, probe } = realisticTree();
    const eco = selectByCoverage(counts.eco, 0.5);
    tree.createBranch({ domain: 'eco', selection: eco, values: synth(eco.keys, 2) });
    const rootBefore = tree.gather(ROOT_VERSION, probe);
    const ecoBefore = tree.gather('eco@1', probe);
    const bio = selectByCoverage(counts.bio, 0.5);
    tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) });
    expect(same(tree.gather(ROOT_VERSION, probe), rootBefore)).toBe(true);
    expect(same(tree.gather('eco@1', probe), ecoBefore)).toBe(true);

    const bioRows = tree.lookupRows('bio@1', probe);
    const ecoRows = tree.lookupRows('eco@1', probe);
    const inBio = new Set(bio.keys);
    const inEco = new Set(eco.keys);
    let differ = 0;
    probe.forEach((key, i) => {
      const expectSame = !inBio.has(key) && !inEco.has(key) && !tree.codec.backoff(key).some((s) => inBio.has(s.key) || inEco.has(s.key));
      if (expectSame) expect(bioRows[i]).toBe(ecoRows[i]);
      if (inBio.has(key) && !inEco.has(key)) {
        expect(bioRows[i]).not.toBe(ecoRows[i]);
        differ++;
      }
    });
    expect(differ).toBeGreaterThan(10);
    // A bio phrase tri-gram reads bio's value on bio, the root's on eco.
    const phraseKey = packKey(100, 101, 102);
    expect(inBio.has(phraseKey)).toBe(true);
    expect(tree.lookup('bio@1', phraseKey).version).toBe('bio@1');
    expect(tree.lookup('eco@1', phraseKey).version).not.toBe('bio@1');
  });

  it('lookupRows equals lookup key by key, on corpus batches with separators and random keys', () => {
    const { tree, counts, probe, c, codec } = realisticTree();
    const bio = selectByCoverage(counts.bio, 0.3);
    tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) });
    const batch = codec.keys(c.bio.slice(100, 140)).keys;
    for (const keys of [probe, batch, new BigUint64Array(0)]) {
      const rows = tree.lookupRows('bio@1', keys);
      expect([...rows]).toEqual([...keys].map((k) => tree.lookup('bio@1', k).row));
    }
  });

  it('lookupRows equals lookup on a causal tree too, and fails on the same keys', () => {
    const { tree, codec } = newTree({ mode: 'causal' });
    const c = corpora();
    const general = rootKeys(codec, new TrigramCounts().addBatch(codec.keys(c.general)));
    tree.createRoot({ keys: general, values: synth(general, 0) });
    const bio = selectByCoverage(new TrigramCounts().addBatch(codec.keys(c.bio)), 0.5);
    tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) });
    const keys = codec.keys([...c.bio.slice(300, 340), ...c.eco.slice(0, 40)]).keys;
    const rows = tree.lookupRows('bio@1', keys);
    expect([...rows]).toEqual([...keys].map((k) => tree.lookup('bio@1', k).row));
    const steps = new Set([...keys].map((k) => tree.lookup('bio@1', k).step));
    expect(steps).toEqual(new Set(['exact', 'bigram', 'unigram', 'separator']));
    for (const bad of [packKey(1, 2, 1000), packKey(1000, 2, 3), packKey(1, 1500, 3), 1n << 63n]) {
      const batch = BigUint64Array.of(packKey(1, 2, 3), bad);
      const single = (() => {
        try {
          tree.lookup('bio@1', bad);
        } catch (e) {
          return (e as Error).constructor;
        }
        return null;
      })();
      expect(single).not.toBeNull();
      expect(() => tree.lookupRows('bio@1', batch)).toThrow(single as new () => Error);
    }
  });

  it('refuses a corpus below the minimum, a taken domain name, an unknown parent, and bad entries', () => {
    const { tree, counts } = (() => {
      const t = newTree({ minCorpusTokens: 1_000_000 });
      t.tree.createRoot(entries([packKey(0, 1, 0)], 0));
      return { ...t, counts: realisticTree().counts };
    })();
    const bio = selectByCoverage(counts.bio, 0.5);
    expect(() => tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) })).toThrow(CorpusTooSmallError);
    const ok = newTree();
    ok.tree.createRoot(entries([packKey(0, 1, 0)], 0));
    ok.tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) });
    expect(() => ok.tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) })).toThrow(VersionStateError);
    expect(() => ok.tree.createBranch({ domain: 'x', parent: 'nope@1', selection: bio, values: synth(bio.keys, 1) })).toThrow(UnknownVersionError);
    expect(() => ok.tree.createBranch({ domain: 'root', selection: bio, values: synth(bio.keys, 1) })).toThrow(PlotStoreArgumentError);
    expect(() => ok.tree.createBranch({ domain: 'x', selection: bio, values: new Float32Array(3) })).toThrow(PlotStoreArgumentError);
    // The failed create left no trace: the name is free and generations did not move.
    expect(ok.tree.has('x@1')).toBe(false);
    expect(() => ok.tree.derive('bio@1', { upsert: entries([SEPARATOR_KEY], 1) })).toThrow(ReservedKeyError);
    expect(() => ok.tree.derive('bio@1', { upsert: entries([packKey(1, 2, 3), packKey(1, 2, 3)], 1) })).toThrow(PlotStoreArgumentError);
    expect(ok.tree.versions().map((v) => v.id)).toEqual(['root', 'bio@1']);
    expect(ok.values.liveRows).toBe(1 + bio.keys.length);
    const t2 = newTree();
    expect(() => t2.tree.createBranch({ domain: 'a', selection: bio, values: synth(bio.keys, 1) })).toThrow(UnknownVersionError);
  });
});

describe('copy-on-write updates and reference-counted collection (A7)', () => {
  it('derive shares every unchanged row; the old version reads exactly as before until it is collected', () => {
    const { tree, values, counts, probe } = realisticTree();
    const bio = selectByCoverage(counts.bio, 0.5);
    const eco = selectByCoverage(counts.eco, 0.5);
    tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) });
    tree.createBranch({ domain: 'eco', selection: eco, values: synth(eco.keys, 2) });
    tree.pin('bio@1'); // a tenant trained on bio@1
    const snap = (v: VersionId) => tree.gather(v, probe);
    const before = { root: snap(ROOT_VERSION), bio1: snap('bio@1'), eco1: snap('eco@1') };

    const removed = [...bio.keys.slice(0, 5)];
    const overwritten = [...bio.keys.slice(5, 8)];
    const added = [packKey(7, 8, 9), packKey(0, 7, 8)];
    const next = tree.derive('bio@1', { remove: removed, upsert: entries([...overwritten, ...added], 11) });
    expect(next).toMatchObject({ id: 'bio@2', parent: 'root', state: 'live', entries: bio.keys.length - 5 + 2 });
    expect(tree.info('bio@1').state).toBe('superseded');
    expect(tree.current('bio')).toBe('bio@2');
    expect(() => tree.pin('bio@1')).toThrow(VersionStateError);

    // Unchanged keys share the very same row.
    const rows1 = new Map(tree.tableEntries('bio@1'));
    const rows2 = new Map(tree.tableEntries('bio@2'));
    for (const key of bio.keys.slice(8)) expect(rows2.get(key)).toBe(rows1.get(key));
    for (const key of overwritten) expect(rows2.get(key)).not.toBe(rows1.get(key));
    for (const key of removed) expect(rows2.has(key)).toBe(false);
    expect(tree.lookup('bio@2', removed[0]!).version).not.toBe('bio@2');

    // Nothing anyone else sees has changed, bit for bit.
    expect(same(snap(ROOT_VERSION), before.root)).toBe(true);
    expect(same(snap('bio@1'), before.bio1)).toBe(true);
    expect(same(snap('eco@1'), before.eco1)).toBe(true);

    const bio2 = snap('bio@2');
    const shared = bio.keys.length - 8;
    expect(tree.storage().totals.sharedStoredBytes).toBe(shared * values.bytesPerRow);
    tree.unpin('bio@1'); // the tenant is retrained on bio@2: bio@1 is collected
    expect(tree.has('bio@1')).toBe(false);
    expect(() => tree.lookup('bio@1', probe[0]!)).toThrow(UnknownVersionError);
    expect(same(snap('bio@2'), bio2)).toBe(true);
    expect(same(snap('eco@1'), before.eco1)).toBe(true);
    expect(same(snap(ROOT_VERSION), before.root)).toBe(true);
    // The shared rows survive (now held by bio@2 alone); bio@1's own rows are freed.
    for (const key of bio.keys.slice(8)) expect(values.refCount(rows2.get(key)!)).toBe(1);
    expect(tree.storage().totals.sharedStoredBytes).toBe(0);
    expect(values.liveRows * values.bytesPerRow).toBe(tree.storage().totals.storedValueBytes);
  });

  it('update recomputes the table beside the old version, which pinned tenants keep reading until they let go', () => {
    const { tree, values, counts, probe, c, codec } = realisticTree();
    const eco = selectByCoverage(counts.eco, 0.5);
    tree.createBranch({ domain: 'eco', selection: eco, values: synth(eco.keys, 2) });
    tree.pin('eco@1');
    tree.pin('eco@1');
    const eco1 = tree.gather('eco@1', probe);
    const root = tree.gather(ROOT_VERSION, probe);
    const cumulative = counts.eco.merged(new TrigramCounts().addBatch(codec.keys(c.bio.slice(0, 100))));
    const eco2sel = selectByCoverage(cumulative, 0.5);
    const info = tree.updateBranch('eco@1', { selection: eco2sel, values: synth(eco2sel.keys, 12) });
    expect(info).toMatchObject({ id: 'eco@2', parent: 'root', entries: eco2sel.keys.length });
    expect(info.coverage?.corpusTokens).toBe(cumulative.total);
    expect(() => tree.updateBranch('eco@1', { selection: eco2sel, values: synth(eco2sel.keys, 12) })).toThrow(VersionStateError);
    tree.unpin('eco@1');
    expect(same(tree.gather('eco@1', probe), eco1)).toBe(true);
    expect(tree.has('eco@1')).toBe(true);
    tree.unpin('eco@1');
    expect(tree.has('eco@1')).toBe(false);
    expect(same(tree.gather(ROOT_VERSION, probe), root)).toBe(true);
    expect(values.liveRows).toBe(tree.storage().totals.storedValueBytes / values.bytesPerRow);
    expect(() => tree.unpin('eco@2')).toThrow(VersionStateError);
  });

  it('a deleted version stays while a child branch needs it, and goes with the last child', () => {
    const { tree, counts, probe } = realisticTree();
    const bio = selectByCoverage(counts.bio, 0.3);
    tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) });
    const med = selectByCoverage(counts.eco, 0.1);
    tree.createBranch({ domain: 'med', parent: 'bio@1', selection: med, values: synth(med.keys, 3) });
    const medView = tree.gather('med@1', probe);
    tree.delete('bio@1');
    expect(tree.info('bio@1')).toMatchObject({ state: 'deleted', children: ['med@1'] });
    expect(() => tree.current('bio')).toThrow(UnknownVersionError);
    expect(() => tree.createBranch({ domain: 'x', parent: 'bio@1', selection: med, values: synth(med.keys, 3) })).toThrow(VersionStateError);
    expect(same(tree.gather('med@1', probe), medView)).toBe(true);
    tree.pin('med@1');
    tree.delete('med@1');
    expect(tree.has('bio@1')).toBe(true);
    tree.unpin('med@1');
    expect(tree.has('med@1')).toBe(false);
    expect(tree.has('bio@1')).toBe(false);
    expect(tree.versions().map((v) => v.id)).toEqual([ROOT_VERSION]);
    // The name is free again; the new branch never reuses an old id.
    expect(tree.createBranch({ domain: 'bio', selection: bio, values: synth(bio.keys, 1) }).id).toBe('bio@2');
    expect(() => tree.delete(ROOT_VERSION)).toThrow(VersionStateError);
    expect(() => tree.derive(ROOT_VERSION, {})).toThrow(VersionStateError);
  });

  it('random operations: every version reads the same bytes all its life, and the accounting always adds up', () => {
    const { tree, values, counts, probe: allProbe } = realisticTree();
    const rand = mulberry32(21);
    const pool = [...counts.bio.sorted().keys.subarray(0, 400), ...counts.eco.sorted().keys.subarray(0, 400)];
    // The keys the edits touch, their neighbours in the domain rankings, and every 32nd probe key.
    const probe = BigUint64Array.from(new Set([...pool, ...allProbe.filter((_, i) => i % 32 === 0)]));
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const views = new Map<VersionId, Uint16Array>();
    const remember = (v: VersionId) => views.set(v, tree.gather(v, probe));
    remember(ROOT_VERSION);
    const domains = ['a', 'b', 'c', 'd'];
    const pins = new Map<VersionId, number>();
    let salt = 100;
    const selections = [counts.bio, counts.eco].flatMap((n) => [0.1, 0.3, 0.5].map((alpha) => selectByCoverage(n, alpha)));
    for (let step = 0; step < 100; step++) {
      const live = tree.versions().filter((v) => v.state === 'live');
      const liveBranches = live.filter((v) => v.id !== ROOT_VERSION);
      const r = rand();
      if (r < 0.2 || liveBranches.length === 0) {
        const free = domains.filter((d) => !live.some((v) => v.domain === d));
        if (free.length === 0) continue;
        const sel = pick(selections);
        remember(tree.createBranch({ domain: pick(free), parent: pick(live).id, selection: sel, values: synth(sel.keys, salt++) }).id);
      } else if (r < 0.4) {
        const v = pick(liveBranches).id;
        const upsert = [...new Set(Array.from({ length: 6 }, () => pick(pool)))];
        const remove = [...new Set(Array.from({ length: 6 }, () => pick(pool)))].filter((k) => !upsert.includes(k));
        remember(tree.derive(v, { upsert: entries(upsert, salt++), remove }).id);
      } else if (r < 0.5) {
        const v = pick(liveBranches).id;
        const sel = pick(selections);
        remember(tree.updateBranch(v, { selection: sel, values: synth(sel.keys, salt++) }).id);
      } else if (r < 0.6) {
        tree.delete(pick(liveBranches).id);
      } else if (r < 0.8) {
        const v = pick(live).id;
        tree.pin(v);
        pins.set(v, (pins.get(v) ?? 0) + 1);
      } else {
        const held = [...pins].filter(([, n]) => n > 0);
        if (held.length === 0) continue;
        const [v] = pick(held);
        tree.unpin(v);
        pins.set(v, pins.get(v)! - 1);
      }
      // Every surviving version still reads exactly what it read when it was made.
      for (const info of tree.versions()) expect(same(tree.gather(info.id, probe), views.get(info.id)!), `${info.id} at step ${step}`).toBe(true);
      // A version disappears only when nothing holds it.
      for (const [v, n] of pins) if (n > 0) expect(tree.has(v)).toBe(true);
      checkAccounting(tree, values);
    }
    expect(views.size).toBeGreaterThan(20);
  });
});

/** The storage report against the value store's own count and the tables' contents. */
function checkAccounting(tree: PlotVersionTree, values: HeapPlotValueStore): void {
  const report = tree.storage();
  const bpr = values.bytesPerRow;
  const t = report.totals;
  expect(t.storedValueBytes).toBe(values.accounting().liveBytes);
  expect(t.storedValueBytes).toBe(t.uniqueValueBytes + t.sharedStoredBytes);
  expect(t.referencedValueBytes).toBe(t.storedValueBytes + t.savedBySharingBytes);
  expect(t.totalBytes).toBe(t.storedValueBytes + t.indexBytes + t.reservedBytes);
  expect(t.tables).toBe(tree.versions().length);
  const tablesPerRow = new Map<number, number>();
  for (const table of report.tables) {
    expect(table.valueBytes).toBe(table.entries * bpr);
    expect(table.uniqueValueBytes + table.sharedValueBytes).toBe(table.valueBytes);
    for (const row of tree.tableRows(table.version)) tablesPerRow.set(row, (tablesPerRow.get(row) ?? 0) + 1);
  }
  // The store's reference count of every row is the number of tables that hold it.
  for (const [row, n] of tablesPerRow) if (values.refCount(row) !== n) throw new Error(`row ${row}: ${values.refCount(row)} refs, ${n} tables`);
  expect(tablesPerRow.size).toBe(values.liveRows);
}

describe('storage accounting', () => {
  it('adds up on a small tree, byte for byte', () => {
    const { tree, values } = newTree();
    const k = (c: number) => packKey(0, c, 0);
    tree.createRoot(entries([k(1), k(2), k(3), k(4), k(5)], 0));
    tree.createBranch({ domain: 'a', selection: selectionOf([packKey(1, 2, 3), packKey(2, 3, 4), packKey(3, 4, 5)]), values: synth([packKey(1, 2, 3), packKey(2, 3, 4), packKey(3, 4, 5)], 1) });
    tree.pin('a@1');
    tree.derive('a@1', { remove: [packKey(1, 2, 3)], upsert: entries([packKey(9, 9, 9)], 2) });
    const bpr = 3 * HIDDEN * 2;
    expect(bpr).toBe(24);
    const report = tree.storage();
    const byVersion = Object.fromEntries(report.tables.map((t) => [t.version, t]));
    expect(byVersion.root).toMatchObject({ entries: 5, valueBytes: 5 * bpr, uniqueValueBytes: 5 * bpr, sharedValueBytes: 0, state: 'live' });
    // a@1: (1,2,3) its own; (2,3,4), (3,4,5) shared with a@2.
    expect(byVersion['a@1']).toMatchObject({ entries: 3, valueBytes: 3 * bpr, uniqueValueBytes: 1 * bpr, sharedValueBytes: 2 * bpr, state: 'superseded' });
    expect(byVersion['a@2']).toMatchObject({ entries: 3, valueBytes: 3 * bpr, uniqueValueBytes: 1 * bpr, sharedValueBytes: 2 * bpr, state: 'live' });
    expect(report.totals).toMatchObject({
      tables: 3,
      entries: 11,
      referencedValueBytes: 11 * bpr,
      storedValueBytes: 9 * bpr,
      uniqueValueBytes: 7 * bpr,
      sharedStoredBytes: 2 * bpr,
      savedBySharingBytes: 2 * bpr,
      reservedBytes: bpr,
    });
    expect(report.totals.indexBytes).toBe(report.tables.reduce((a, t) => a + t.indexBytes, 0));
    expect(report.tables.every((t) => t.indexBytes > 0)).toBe(true);
    checkAccounting(tree, values);
    tree.unpin('a@1');
    expect(tree.storage().totals).toMatchObject({ tables: 2, storedValueBytes: 8 * bpr, sharedStoredBytes: 0, savedBySharingBytes: 0 });
    checkAccounting(tree, values);
  });
});

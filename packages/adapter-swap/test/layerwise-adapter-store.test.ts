/**
 * The host adapter store (disk → host LRU): sets survive a restart bit for bit; a write is atomic (a write that
 * fails half-way — a real EFBIG from a file-size limit in a child process — leaves the old file or none, and no
 * temporary file); foreign, corrupt, truncated and other-shape files are refused with typed errors; the host tier
 * evicts least recently used first and its bytes and the disk bytes are exact; concurrent gets share one read; a
 * read that races a newer write hands out its revision and does not cache it; delete removes the file.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { crc32 } from 'node:zlib';

import { mulberry32, UnknownAdapterError } from '@tessera/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import {
  AdapterFileError,
  adapterFileBytes,
  adapterSetBytes,
  AdapterShapeError,
  encodeAdapterFile,
  InvalidAdapterNameError,
  type LayerwiseAdapterSet,
  LayerwiseAdapterStore,
  layerNumel,
} from '../src/index.js';

const SHAPE = { hidden: 8, bottleneck: 2, layers: 3 };
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'tessera-adapter-store-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function randomSet(seed: number, labels = 3, shape = SHAPE): LayerwiseAdapterSet {
  const rand = mulberry32(seed);
  const r = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 10);
  return { adapters: Array.from({ length: shape.layers }, () => r(layerNumel(shape))), head: { weight: r(labels * shape.hidden), bias: r(labels) } };
}

const bits = (s: LayerwiseAdapterSet) => [...s.adapters, s.head.weight, s.head.bias].map((a) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length)));
const setBytes = (s: LayerwiseAdapterSet) => [...s.adapters, s.head.weight, s.head.bias].reduce((n, a) => n + a.byteLength, 0);
const filesIn = (d: string) => readdirSync(d).sort();
const diskBytes = (d: string) => readdirSync(d).filter((f) => f.endsWith('.tsadapt')).reduce((n, f) => n + statSync(join(d, f)).size, 0);

describe('LayerwiseAdapterStore', () => {
  it('round-trips sets bit for bit, with their metadata, across a restart that scans the directory', async () => {
    const a = randomSet(1, 3);
    // Values a careless codec would change: NaN payloads, -0, subnormals, infinities.
    a.adapters[0]!.set([Number.NaN, -0, 1e-45, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]);
    new Uint32Array(a.adapters[1]!.buffer, a.adapters[1]!.byteOffset, 1)[0] = 0x7fc0_1234; // a NaN with a payload
    const b = randomSet(2, 5);
    const store = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    await store.put('a', a, { domain: 'bio', labels: ['x', 'y', 'z'] });
    await store.put('b:v1@x', b);
    expect(store.ids()).toEqual(['a', 'b:v1@x']);
    expect(filesIn(dir)).toEqual(['a.tsadapt', 'b:v1@x.tsadapt']);
    expect(statSync(join(dir, 'b:v1@x.tsadapt')).size).toBe(adapterFileBytes(SHAPE, 5, 0));
    expect(statSync(join(dir, 'b:v1@x.tsadapt')).size).toBe(48 + adapterSetBytes(SHAPE, 5));

    const again = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    expect(again.ids()).toEqual(['a', 'b:v1@x']);
    expect(again.rejected).toEqual([]);
    expect(again.stats()).toMatchObject({ tenants: 2, diskBytes: diskBytes(dir), hostBytes: 0, hostCount: 0 });
    expect(again.peek('a')).toBeUndefined();
    expect(bits(await again.get('a'))).toEqual(bits(a));
    expect(bits(await again.get('b:v1@x'))).toEqual(bits(b));
    expect(again.readMeta('a')).toEqual({ domain: 'bio', labels: ['x', 'y', 'z'] });
    expect(again.readMeta('b:v1@x')).toBeUndefined();
    expect(again.info('a')).toMatchObject({ labels: 3, fileBytes: statSync(join(dir, 'a.tsadapt')).size, hostCached: true });
    // A decoded set holds exactly its payload: Σ byteLength over the arrays.
    expect(setBytes(again.peek('a')!)).toBe(adapterSetBytes(SHAPE, 3));
    expect(again.stats()).toMatchObject({ hits: 0, misses: 2, reads: 2, hostBytes: adapterSetBytes(SHAPE, 3) + adapterSetBytes(SHAPE, 5) });
  });

  it('refuses bad ids and bad shapes before writing anything', async () => {
    const store = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    await expect(store.put('../escape', randomSet(1))).rejects.toBeInstanceOf(InvalidAdapterNameError);
    await expect(store.put('x', randomSet(1, 3, { ...SHAPE, layers: 2 }))).rejects.toBeInstanceOf(AdapterShapeError);
    await expect(store.put('x', { ...randomSet(1), head: { weight: new Float32Array(7), bias: new Float32Array(1) } })).rejects.toBeInstanceOf(AdapterShapeError);
    expect(filesIn(dir)).toEqual([]);
    await expect(store.get('nobody')).rejects.toBeInstanceOf(UnknownAdapterError);
    expect(() => store.delete('nobody')).toThrow(UnknownAdapterError);
  });

  it('writes atomically: a write that fails half-way leaves the old file (or none) and no temporary file', async () => {
    const BIG = { hidden: 16, bottleneck: 4, layers: 3 };
    const store = new LayerwiseAdapterStore({ dir, shape: BIG });
    const old = randomSet(3, 3, BIG);
    await store.put('kept', old);
    const before = readFileSync(join(dir, 'kept.tsadapt'));
    expect(before.length).toBeGreaterThan(1024);

    // A child process under a 1 KiB file-size limit: the kernel cuts each write at 1,024 bytes (EFBIG). It
    // replaces 'kept' and creates 'fresh', both larger than the limit.
    const loaderDir = mkdtempSync(join(tmpdir(), 'tessera-ts-loader-'));
    try {
      const ts = pathToFileURL(createRequire(import.meta.url).resolve('typescript')).href;
      writeFileSync(join(loaderDir, 'hooks.mjs'), `
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from ${JSON.stringify(ts)};
export async function resolve(spec, ctx, next) {
  try { return await next(spec, ctx); } catch (err) {
    if (spec.endsWith('.js') && ctx.parentURL?.startsWith('file:')) {
      const url = new URL(spec.replace(/\\.js$/, '.ts'), ctx.parentURL);
      if (existsSync(fileURLToPath(url))) return { url: url.href, shortCircuit: true };
    }
    throw err;
  }
}
export async function load(url, ctx, next) {
  if (!url.endsWith('.ts')) return next(url, ctx);
  const out = ts.transpileModule(readFileSync(fileURLToPath(url), 'utf8'), { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true } });
  return { format: 'module', source: out.outputText, shortCircuit: true };
}`);
      writeFileSync(join(loaderDir, 'register.mjs'), `import { register } from 'node:module'; register(${JSON.stringify(pathToFileURL(join(loaderDir, 'hooks.mjs')).href)});`);
      const src = pathToFileURL(fileURLToPath(new URL('../src/layerwise/adapter-store.ts', import.meta.url))).href;
      writeFileSync(join(loaderDir, 'child.mjs'), `
const { LayerwiseAdapterStore } = await import(${JSON.stringify(src)});
const shape = ${JSON.stringify(BIG)};
const store = new LayerwiseAdapterStore({ dir: process.argv[2], shape });
const numel = 2 * shape.hidden * shape.bottleneck + shape.bottleneck + shape.hidden;
const set = { adapters: Array.from({ length: shape.layers }, () => new Float32Array(numel).fill(7)), head: { weight: new Float32Array(3 * shape.hidden), bias: new Float32Array(3) } };
const out = {};
for (const id of ['kept', 'fresh']) {
  try { await store.put(id, set); out[id] = 'written'; } catch (err) { out[id] = err.code; }
}
out.ids = store.ids();
console.log(JSON.stringify(out));`);
      const child = spawnSync('bash', ['-c', `ulimit -f 1; exec "${process.execPath}" --conditions=@tessera/source --import ./register.mjs ./child.mjs "${dir}"`], { cwd: loaderDir, encoding: 'utf8' });
      expect(child.status, child.stderr).toBe(0);
      expect(JSON.parse(child.stdout)).toEqual({ kept: 'EFBIG', fresh: 'EFBIG', ids: ['kept'] });
    } finally {
      rmSync(loaderDir, { recursive: true, force: true });
    }
    expect(filesIn(dir)).toEqual(['kept.tsadapt']);
    expect(readFileSync(join(dir, 'kept.tsadapt')).equals(before)).toBe(true);

    // A rename that fails (the target is a directory) in this process: the same, and the store is unchanged.
    mkdirSync(join(dir, 'blocked.tsadapt'));
    await expect(store.put('blocked', randomSet(4, 3, BIG))).rejects.toMatchObject({ code: 'EISDIR' });
    expect(filesIn(dir)).toEqual(['blocked.tsadapt', 'kept.tsadapt']);
    expect(store.ids()).toEqual(['kept']);
    expect(store.stats().writes).toBe(1);

    // A staged write is invisible until committed; abort leaves nothing.
    const staged = await store.stage('later', randomSet(5, 3, BIG));
    expect(store.has('later')).toBe(false);
    expect(filesIn(dir).filter((f) => f.includes('later'))).toHaveLength(1); // the temporary file
    expect(filesIn(dir).filter((f) => f.startsWith('later'))).toEqual([]);
    staged.abort();
    expect(filesIn(dir)).toEqual(['blocked.tsadapt', 'kept.tsadapt']);
    // A crash between write and rename leaves a temporary file; the next scan removes it and never serves it.
    writeFileSync(join(dir, `.ghost.999.1.tmp`), encodeAdapterFile('ghost', randomSet(6, 3, BIG), BIG));
    const restarted = new LayerwiseAdapterStore({ dir, shape: BIG });
    expect(restarted.ids()).toEqual(['kept']);
    expect(filesIn(dir)).toEqual(['blocked.tsadapt', 'kept.tsadapt']);
    expect(bits(await restarted.get('kept'))).toEqual(bits(old));
  });

  it('refuses foreign, corrupt, truncated, padded, other-version and other-shape files with typed errors', async () => {
    const good = encodeAdapterFile('g', randomSet(7), SHAPE, new TextEncoder().encode('{"m":1}'));
    const write = (name: string, bytes: Uint8Array) => writeFileSync(join(dir, `${name}.tsadapt`), bytes);
    write('good', good);
    write('foreign', new TextEncoder().encode('{"this is": "json, not an adapter file", "padding": "................................"}'));
    write('truncated', good.subarray(0, good.length - 4));
    write('padded', Buffer.concat([good, Buffer.from([0])]));
    write('short', good.subarray(0, 20));
    const headerFlip = good.slice();
    headerFlip[13]! ^= 1; // hidden, without fixing the header checksum
    write('header-flip', headerFlip);
    const v2 = good.slice();
    const view = new DataView(v2.buffer);
    view.setUint32(8, 2, true);
    view.setUint32(44, crc32(v2.subarray(0, 44)), true);
    write('v2', v2);
    write('other-shape', encodeAdapterFile('o', randomSet(8, 3, { ...SHAPE, bottleneck: 3 }), { ...SHAPE, bottleneck: 3 }));
    const payloadFlip = good.slice();
    payloadFlip[payloadFlip.length - 1]! ^= 0x10; // the header is intact: found by the read, not by the scan
    write('payload-flip', payloadFlip);
    const metaFlip = good.slice();
    metaFlip[48]! ^= 1;
    write('meta-flip', metaFlip);
    writeFileSync(join(dir, 'notes.txt'), 'not ours, not looked at');

    const store = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    expect(store.ids()).toEqual(['good', 'meta-flip', 'payload-flip']);
    const problems = Object.fromEntries(store.rejected.map((r) => [r.file.split('/').pop()!.replace('.tsadapt', ''), r.error instanceof AdapterFileError ? r.error.problem : r.error.constructor.name]));
    expect(problems).toEqual({ foreign: 'magic', truncated: 'length', padded: 'length', short: 'length', 'header-flip': 'checksum', v2: 'version', 'other-shape': 'AdapterShapeError' });
    expect(store.rejected.find((r) => r.file.endsWith('other-shape.tsadapt'))!.error).toMatchObject({ code: 'TESSERA_ADAPTER_SHAPE_MISMATCH', found: { hidden: 8, bottleneck: 3, layers: 3 } });
    // Rejected files stay where they are; the disk bytes count only the files served.
    expect(store.stats().diskBytes).toBe(3 * good.length);
    await expect(store.get('payload-flip')).rejects.toMatchObject({ code: 'TESSERA_ADAPTER_FILE_CHECKSUM', problem: 'checksum' });
    await expect(store.get('meta-flip')).rejects.toBeInstanceOf(AdapterFileError);
    expect(() => store.readMeta('meta-flip')).toThrow(AdapterFileError);
    expect(store.stats()).toMatchObject({ readFailures: 2, hostCount: 0 });
    expect(store.readMeta('good')).toEqual({ m: 1 });
    expect(store.peek('good')).toBeUndefined();
    await store.get('good');
    expect(store.stats().hostCount).toBe(1);
  });

  it('evicts the least recently used sets first and counts disk and host bytes exactly', async () => {
    const per3 = adapterSetBytes(SHAPE, 3);
    const per2 = adapterSetBytes(SHAPE, 2);
    // Room for two 3-label sets and one 2-label set: 2·per3 + per2.
    const budget = 2 * per3 + per2;
    const store = new LayerwiseAdapterStore({ dir, shape: SHAPE, hostBudgetBytes: budget });
    const sets: Record<string, LayerwiseAdapterSet> = { a: randomSet(10, 3), b: randomSet(11, 3), c: randomSet(12, 2), d: randomSet(13, 3) };
    for (const id of ['a', 'b', 'c']) await store.put(id, sets[id]!);
    expect(store.hostIds()).toEqual(['a', 'b', 'c']);
    expect(store.stats()).toMatchObject({ hostBytes: budget, evictions: 0, writes: 3 });
    await store.get('a'); // a hit: a is now the most recent
    expect(store.hostIds()).toEqual(['b', 'c', 'a']);
    await store.put('d', sets.d!); // evicts b, the least recently used
    expect(store.hostIds()).toEqual(['c', 'a', 'd']);
    expect(store.stats()).toMatchObject({ evictions: 1, hostBytes: per2 + 2 * per3, hits: 1, misses: 0, reads: 0 });
    expect(bits(await store.get('b'))).toEqual(bits(sets.b!)); // from disk
    // b (per3) needs per3 of room: evicting c (per2) is not enough, so a goes too.
    expect(store.hostIds()).toEqual(['d', 'b']);
    expect(store.stats()).toMatchObject({ evictions: 3, misses: 1, reads: 1 });
    const check = () => {
      const s = store.stats();
      expect(s.hostBytes).toBe(store.hostIds().reduce((n, id) => n + setBytes(store.peek(id)!), 0));
      expect(s.hostBytes).toBeLessThanOrEqual(budget);
      expect(s.diskBytes).toBe(diskBytes(dir));
      expect(s.diskBytes).toBe(store.ids().reduce((n, id) => n + statSync(store.pathOf(id)).size, 0));
    };
    check();
    // A replacement with another label count, then a delete: both tiers follow.
    await store.put('a', randomSet(14, 2));
    check();
    expect(store.delete('d')).toEqual({ fileBytes: 48 + per3, hostBytes: per3 });
    check();
    expect(filesIn(dir)).toEqual(['a.tsadapt', 'b.tsadapt', 'c.tsadapt']);
    await expect(store.get('d')).rejects.toBeInstanceOf(UnknownAdapterError);

    // Budget 0: no host tier; every get is a read. A set larger than the budget is never kept.
    const none = new LayerwiseAdapterStore({ dir, shape: SHAPE, hostBudgetBytes: 0 });
    await none.get('a');
    await none.get('a');
    expect(none.stats()).toMatchObject({ reads: 2, hits: 0, hostBytes: 0, evictions: 0 });
  });

  it('shares one disk read among concurrent gets, and prefetch fills the host tier ahead', async () => {
    const writer = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    for (let i = 0; i < 6; i++) await writer.put(`t${i}`, randomSet(20 + i));
    const store = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    const got = await Promise.all([store.get('t0'), store.get('t0'), store.get('t0'), store.get('t1')]);
    expect(got[0]).toBe(got[1]);
    expect(got[0]).toBe(got[2]);
    expect(store.stats()).toMatchObject({ reads: 2, misses: 4, hits: 0, readsInFlight: 0 });
    await store.prefetch(['t2', 't3', 't3', 't0', 'no-such-tenant']);
    expect(store.stats()).toMatchObject({ reads: 4, prefetchReads: 2 });
    // t0 touched at once (about to be used), then the two reads land, in whichever order the disk finishes them.
    const host = store.hostIds();
    expect(host.slice(0, 2)).toEqual(['t1', 't0']);
    expect([...host.slice(2)].sort()).toEqual(['t2', 't3']);
    // A get during a prefetch shares its read.
    const p = store.prefetch(['t4']);
    const t4 = store.get('t4');
    await p;
    expect(bits(await t4)).toEqual(bits(randomSet(24)));
    expect(store.stats()).toMatchObject({ reads: 5, prefetchReads: 3, misses: 5 });
    await store.get('t2');
    expect(store.stats().hits).toBe(1);
  });

  it('a read that races a newer write hands out its own revision and does not cache it', async () => {
    await new LayerwiseAdapterStore({ dir, shape: SHAPE }).put('x', randomSet(30));
    const store = new LayerwiseAdapterStore({ dir, shape: SHAPE });
    const r0 = store.info('x')!.revision;
    const reading = store.get('x'); // from disk, in flight
    const staged = await store.stage('x', randomSet(31));
    const committed = staged.commit();
    expect(committed.revision).toBeGreaterThan(r0);
    const stale = await reading;
    expect(stale.revision).toBe(r0);
    expect(bits(stale)).toEqual(bits(randomSet(30)));
    expect(store.peek('x')).toBe(committed);
    expect(bits(await store.get('x'))).toEqual(bits(randomSet(31)));
    expect(() => staged.commit()).toThrow(/already committed/);
  });
});

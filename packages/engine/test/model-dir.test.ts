import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { randomFloats } from '@tessera/test-utils';
import { BadHeaderError, ConfigError, MissingTensorError, PathOutsideModelError, TensorShapeError } from '../src/errors.js';
import { MODEL_SAFETENSORS, MODEL_SAFETENSORS_INDEX, ModelTensors, resolveInside } from '../src/formats/model-dir.js';
import { writeSafetensors } from '../src/formats/safetensors.js';
import { PagedKvCache, generateModel, loadDecoder } from '../src/index.js';

const base = mkdtempSync(join(tmpdir(), 'tessera-model-dir-'));
afterAll(() => rmSync(base, { recursive: true, force: true }));
let dirCounter = 0;
function freshDir(name: string): string {
  const d = join(base, `${dirCounter++}-${name}`);
  mkdirSync(d, { recursive: true });
  return d;
}

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a throw');
}

/** Open file descriptors of this process (Linux), to show failed opens close what they opened. */
function openFds(): number | null {
  return existsSync('/proc/self/fd') ? readdirSync('/proc/self/fd').length : null;
}

const tensorsA = {
  'embed.weight': { dtype: 'f32' as const, shape: [10, 4], data: randomFloats(40, 1) },
  'layer.0.weight': { dtype: 'f32' as const, shape: [4, 4], data: randomFloats(16, 2) },
};
const tensorsB = {
  'layer.1.weight': { dtype: 'f32' as const, shape: [4, 4], data: randomFloats(16, 3) },
  'norm.weight': { dtype: 'f32' as const, shape: [4], data: randomFloats(4, 4) },
};
const allShapes = new Map<string, number[]>([
  ['embed.weight', [10, 4]],
  ['layer.0.weight', [4, 4]],
  ['layer.1.weight', [4, 4]],
  ['norm.weight', [4]],
]);

function writeSharded(dir: string, weightMap?: Record<string, string>): void {
  writeSafetensors(join(dir, 'model-00001-of-00002.safetensors'), tensorsA);
  writeSafetensors(join(dir, 'model-00002-of-00002.safetensors'), tensorsB);
  const map =
    weightMap ??
    Object.fromEntries([
      ...Object.keys(tensorsA).map((n) => [n, 'model-00001-of-00002.safetensors']),
      ...Object.keys(tensorsB).map((n) => [n, 'model-00002-of-00002.safetensors']),
    ]);
  writeFileSync(join(dir, MODEL_SAFETENSORS_INDEX), JSON.stringify({ metadata: { total_size: 0 }, weight_map: map }));
}

describe('resolveInside', () => {
  const dir = freshDir('resolve');
  writeFileSync(join(dir, 'config.json'), '{}');
  mkdirSync(join(dir, 'sub'));
  writeFileSync(join(dir, 'sub', 'inner.json'), '{}');
  const outside = freshDir('outside');
  writeFileSync(join(outside, 'secret.safetensors'), 'x');

  it('resolves names inside the directory, existing or not', () => {
    expect(resolveInside(dir, 'config.json')).toBe(join(dir, 'config.json'));
    expect(resolveInside(dir, 'sub/inner.json')).toBe(join(dir, 'sub', 'inner.json'));
    expect(resolveInside(dir, './sub/../config.json')).toBe(join(dir, 'config.json'));
    expect(resolveInside(dir, 'not-yet/written.bin')).toBe(join(dir, 'not-yet', 'written.bin'));
  });

  it('rejects .. escapes', () => {
    for (const p of ['..', '../secret.safetensors', 'sub/../../x', `../${join('..', 'etc', 'passwd')}`]) {
      const e = caught(() => resolveInside(dir, p));
      expect(e, p).toBeInstanceOf(PathOutsideModelError);
      expect((e as Error).message).toContain('outside the model directory');
    }
  });

  it('rejects absolute paths, even ones inside the directory', () => {
    expect(() => resolveInside(dir, '/etc/passwd')).toThrow(PathOutsideModelError);
    expect(() => resolveInside(dir, join(dir, 'config.json'))).toThrow(/is an absolute path/);
    expect(() => resolveInside(dir, '')).toThrow(PathOutsideModelError);
    expect(() => resolveInside(dir, 'a\0b')).toThrow(PathOutsideModelError);
  });

  it('rejects symlinks whose real path leaves the directory, and accepts ones that stay inside', () => {
    symlinkSync(join(outside, 'secret.safetensors'), join(dir, 'link.safetensors'));
    symlinkSync(outside, join(dir, 'linked-dir'));
    symlinkSync(join(dir, 'config.json'), join(dir, 'alias.json'));
    const e = caught(() => resolveInside(dir, 'link.safetensors'));
    expect(e).toBeInstanceOf(PathOutsideModelError);
    expect((e as Error).message).toContain(outside);
    // Through a symlinked directory, whether or not the file exists.
    expect(() => resolveInside(dir, 'linked-dir/secret.safetensors')).toThrow(PathOutsideModelError);
    expect(() => resolveInside(dir, 'linked-dir/missing.json')).toThrow(PathOutsideModelError);
    expect(resolveInside(dir, 'alias.json')).toBe(join(dir, 'alias.json'));
  });

  it('accepts a model directory that is itself a symlink', () => {
    const link = join(base, `${dirCounter++}-dir-link`);
    symlinkSync(dir, link);
    expect(resolveInside(link, 'config.json')).toBe(join(link, 'config.json'));
  });

  it("accepts a Hugging Face hub cache snapshot's links into its own blobs folder only", () => {
    const repo = freshDir('hub/models--org--tiny');
    mkdirSync(join(repo, 'blobs'));
    mkdirSync(join(repo, 'snapshots', 'abc123'), { recursive: true });
    writeFileSync(join(repo, 'blobs', 'deadbeef'), '{}');
    symlinkSync('../../blobs/deadbeef', join(repo, 'snapshots', 'abc123', 'config.json'));
    symlinkSync(join(outside, 'secret.safetensors'), join(repo, 'snapshots', 'abc123', 'model.safetensors'));
    const snapshot = join(repo, 'snapshots', 'abc123');
    expect(resolveInside(snapshot, 'config.json')).toBe(join(snapshot, 'config.json'));
    expect(() => resolveInside(snapshot, 'model.safetensors')).toThrow(PathOutsideModelError);
  });
});

describe('ModelTensors', () => {
  it('opens a single model.safetensors and reads through it', async () => {
    const dir = freshDir('single');
    writeSafetensors(join(dir, MODEL_SAFETENSORS), { ...tensorsA, ...tensorsB });
    const model = ModelTensors.open(dir);
    try {
      expect(model.paths).toEqual([join(dir, MODEL_SAFETENSORS)]);
      expect(new Set(model.names())).toEqual(new Set(allShapes.keys()));
      expect(model.has('norm.weight')).toBe(true);
      expect(model.info('norm.weight')).toMatchObject({ dtype: 'f32', shape: [4], byteLength: 16, path: join(dir, MODEL_SAFETENSORS) });
      model.checkShapes(allShapes);
      const t = model.read('layer.0.weight');
      expect(Array.from(t.toArray() as Float32Array)).toEqual(Array.from(tensorsA['layer.0.weight'].data));
      t.dispose();
      const ta = await model.readAsync('norm.weight');
      expect(Array.from(ta.toArray() as Float32Array)).toEqual(Array.from(tensorsB['norm.weight'].data));
      ta.dispose();
      expect(Array.from(model.readHost('embed.weight') as Float32Array)).toEqual(Array.from(tensorsA['embed.weight'].data));
      expect(() => model.read('nope')).toThrow(MissingTensorError);
      await expect(model.readAsync('nope')).rejects.toThrow(/no tensor named nope/);
    } finally {
      model.close();
    }
  });

  it('opens shards through model.safetensors.index.json', () => {
    const dir = freshDir('sharded');
    writeSharded(dir);
    const model = ModelTensors.open(dir);
    try {
      expect(model.paths).toHaveLength(2);
      expect(new Set(model.names())).toEqual(new Set(allShapes.keys()));
      expect(model.info('norm.weight').path).toBe(join(dir, 'model-00002-of-00002.safetensors'));
      expect(model.info('embed.weight').path).toBe(join(dir, 'model-00001-of-00002.safetensors'));
      model.checkShapes(allShapes);
      const t = model.read('layer.1.weight', { dtype: 'bf16' });
      expect(t.dtype).toBe('bf16');
      t.dispose();
    } finally {
      model.close();
    }
  });

  it('checkShapes names missing tensors (up to five, with the count) and mismatched shapes', () => {
    const dir = freshDir('check');
    writeSafetensors(join(dir, MODEL_SAFETENSORS), tensorsA);
    const model = ModelTensors.open(dir);
    try {
      const expected = new Map(allShapes);
      for (let i = 0; i < 6; i++) expected.set(`extra.${i}.weight`, [1]);
      const missing = caught(() => model.checkShapes(expected));
      expect(missing).toBeInstanceOf(MissingTensorError);
      const msg = (missing as Error).message;
      expect(msg).toContain('8 tensor(s) the config requires are missing');
      expect(msg).toContain('layer.1.weight, norm.weight, extra.0.weight, extra.1.weight, extra.2.weight');
      expect(msg).toContain('(3 more)');
      expect(msg).not.toContain('extra.3.weight');

      const wrong = caught(() => model.checkShapes(new Map([['layer.0.weight', [4, 8]], ['embed.weight', [10, 4, 1]]])));
      expect(wrong).toBeInstanceOf(TensorShapeError);
      expect((wrong as Error).message).toMatch(/tensor layer\.0\.weight has shape \[4, 4\] but the config implies \[4, 8\] \(1 other/);
      expect((wrong as TensorShapeError).path).toBe(join(dir, MODEL_SAFETENSORS));
    } finally {
      model.close();
    }
  });

  it('reports a directory with no weights, or not a directory', () => {
    const empty = freshDir('empty');
    const e = caught(() => ModelTensors.open(empty));
    expect(e).toBeInstanceOf(MissingTensorError);
    expect((e as Error).message).toMatch(/neither model\.safetensors nor model\.safetensors\.index\.json exists/);
    writeFileSync(join(empty, 'pytorch_model.bin'), 'pickle');
    expect(() => ModelTensors.open(empty)).toThrow(/PyTorch pickles are not read/);
    expect(() => ModelTensors.open(join(base, 'no-such-dir'))).toThrow(MissingTensorError);
    expect(() => ModelTensors.open(join(empty, 'pytorch_model.bin'))).toThrow(/not a model directory/);
  });

  it('names a missing shard, and a tensor its shard does not hold', () => {
    const dir = freshDir('missing-shard');
    writeSharded(dir);
    rmSync(join(dir, 'model-00002-of-00002.safetensors'));
    const e = caught(() => ModelTensors.open(dir));
    expect(e).toBeInstanceOf(MissingTensorError);
    expect((e as Error).message).toContain('shard model-00002-of-00002.safetensors (holding 2 tensor(s)) does not exist');

    const dir2 = freshDir('wrong-shard');
    writeSharded(dir2, { 'embed.weight': 'model-00001-of-00002.safetensors', 'norm.weight': 'model-00001-of-00002.safetensors' });
    expect(() => ModelTensors.open(dir2)).toThrow(/tensor norm\.weight is mapped to model-00001-of-00002\.safetensors, which does not hold it/);
  });

  it('rejects index entries that leave the directory (.., absolute, symlink)', () => {
    const outside = freshDir('outside-shards');
    writeSafetensors(join(outside, 'evil.safetensors'), tensorsB);
    for (const file of ['../outside/evil.safetensors', join(outside, 'evil.safetensors'), 'linked.safetensors']) {
      const dir = freshDir('escape');
      writeSharded(dir, { 'embed.weight': 'model-00001-of-00002.safetensors', 'norm.weight': file });
      symlinkSync(join(outside, 'evil.safetensors'), join(dir, 'linked.safetensors'));
      expect(() => ModelTensors.open(dir), file).toThrow(PathOutsideModelError);
    }
    const dir = freshDir('escape-single');
    symlinkSync(join(outside, 'evil.safetensors'), join(dir, MODEL_SAFETENSORS));
    expect(() => ModelTensors.open(dir)).toThrow(PathOutsideModelError);
  });

  it('rejects a malformed index with a ConfigError naming it', () => {
    const dir = freshDir('bad-index');
    writeFileSync(join(dir, MODEL_SAFETENSORS_INDEX), '{"weight_map": ');
    const e = caught(() => ModelTensors.open(dir));
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).path).toBe(join(dir, MODEL_SAFETENSORS_INDEX));
    writeFileSync(join(dir, MODEL_SAFETENSORS_INDEX), '{"metadata": {}}');
    expect(() => ModelTensors.open(dir)).toThrow(/weight_map must be an object/);
    writeFileSync(join(dir, MODEL_SAFETENSORS_INDEX), '{"weight_map": {"a": 3}}');
    expect(() => ModelTensors.open(dir)).toThrow(/weight_map\.a must be a file name/);
  });

  it('closes the shards it opened when a later shard is bad', () => {
    const dir = freshDir('bad-second-shard');
    writeSharded(dir);
    writeFileSync(join(dir, 'model-00002-of-00002.safetensors'), Buffer.from([4, 0, 0, 0, 0, 0, 0, 0, 0x7b, 0x7b, 0x7b, 0x7b]));
    const before = openFds();
    expect(() => ModelTensors.open(dir)).toThrow(BadHeaderError);
    expect(openFds()).toBe(before);
  });
});

describe('tensors of dtypes the engine does not read', () => {
  /** Appends raw tensors (any safetensors dtype name) to an existing safetensors file. */
  function appendRaw(path: string, extra: Record<string, { dtype: string; shape: number[]; bytes: Uint8Array }>): void {
    const file = readFileSync(path);
    const n = Number(file.readBigUInt64LE(0));
    const header = JSON.parse(file.subarray(8, 8 + n).toString('utf8')) as Record<string, unknown>;
    let data = Buffer.from(file.subarray(8 + n));
    for (const [name, t] of Object.entries(extra)) {
      header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [data.length, data.length + t.bytes.length] };
      data = Buffer.concat([data, Buffer.from(t.bytes)]);
    }
    const json = Buffer.from(JSON.stringify(header));
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(json.length));
    writeFileSync(path, Buffer.concat([prefix, json, data]));
  }

  it('loads a model whose checkpoint carries unused F64, I8 and BOOL tensors, and refuses a used one by name', () => {
    const dir = freshDir('extras');
    generateModel(dir, { family: 'decoder', size: 'tiny', seed: 3 });
    // Every tensor is disposed here: a finalizer freeing one later would move another test's budget figures.
    const logitsOf = (model: ReturnType<typeof loadDecoder>): Float32Array => {
      const cache = PagedKvCache.create({ ...model.kvShape, numPages: 4 });
      const out = model.forward([{ id: 's', tokens: [1, 2, 3] }], { cache });
      const logits = out.logits!.toArray() as Float32Array;
      out.logits!.dispose();
      cache.dispose();
      model.dispose();
      return logits;
    };
    const referenceLogits = logitsOf(loadDecoder(dir));
    appendRaw(join(dir, MODEL_SAFETENSORS), {
      'model.rotary_emb.inv_freq_f64': { dtype: 'F64', shape: [2], bytes: new Uint8Array(16) },
      'quant.scales': { dtype: 'I8', shape: [4], bytes: new Uint8Array(4) },
      'attention.mask': { dtype: 'BOOL', shape: [3], bytes: new Uint8Array([1, 0, 1]) },
    });
    expect(logitsOf(loadDecoder(dir))).toEqual(referenceLogits);

    // The same dtype on a tensor the config uses is refused, naming it.
    const used = freshDir('used-f64');
    generateModel(used, { family: 'decoder', size: 'tiny', seed: 3 });
    const path = join(used, MODEL_SAFETENSORS);
    const file = readFileSync(path);
    const n = Number(file.readBigUInt64LE(0));
    const header = JSON.parse(file.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: number[] }>;
    const norm = header['model.norm.weight']!;
    const [begin, end] = norm.data_offsets as [number, number];
    header['model.norm.weight'] = { dtype: 'I8', shape: [end - begin], data_offsets: [begin, end] };
    const json = Buffer.from(JSON.stringify(header));
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(json.length));
    writeFileSync(path, Buffer.concat([prefix, json, file.subarray(8 + n)]));
    expect(() => loadDecoder(used)).toThrow(/model\.norm\.weight has dtype I8, which this engine does not read/);
  });
});

/**
 * A Hugging Face model directory's weights: `model.safetensors`, or shards listed by
 * `model.safetensors.index.json`, behind one interface. Every path a directory (or its index) names goes
 * through {@link resolveInside}, so a crafted index or symlink cannot make the engine read outside it.
 */
import { existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import type { AnyTypedArray, Tensor } from '@tessera/native';
import { ConfigError, MissingTensorError, PathOutsideModelError, TensorShapeError } from '../errors.js';
import { SafetensorsFile, type SafetensorsReadOptions, type SafetensorsTensorInfo } from './safetensors.js';

export const MODEL_SAFETENSORS = 'model.safetensors';
export const MODEL_SAFETENSORS_INDEX = 'model.safetensors.index.json';

/** `child` is `root` or below it (both absolute, normalized). */
function isWithin(root: string, child: string): boolean {
  const rel = relative(root, child);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

/**
 * Where symlinks may point. A Hugging Face hub cache snapshot (`…/models--org--name/snapshots/<rev>/`) holds
 * its files as symlinks into the same repository's `blobs/` folder, so that folder counts as inside too.
 */
function allowedRealRoots(dirReal: string): string[] {
  const snapshots = dirname(dirReal);
  const repo = dirname(snapshots);
  if (basename(snapshots) === 'snapshots' && basename(repo).startsWith('models--')) return [dirReal, join(repo, 'blobs')];
  return [dirReal];
}

/**
 * Resolves `relativePath` against the model directory `dir` and returns the absolute path. Throws
 * {@link PathOutsideModelError} for an absolute path, a `..` escape, or a path whose real location (after
 * symlinks) leaves the directory. A path that does not exist yet is checked through its deepest existing parent.
 */
export function resolveInside(dir: string, relativePath: string): string {
  const root = resolve(dir);
  const shown = `${relativePath}`;
  if (typeof relativePath !== 'string' || relativePath === '' || relativePath.includes('\0')) {
    throw new PathOutsideModelError(join(root, shown), `${root}: ${JSON.stringify(relativePath)} is not a usable file name inside the model directory`);
  }
  if (isAbsolute(relativePath)) {
    throw new PathOutsideModelError(relativePath, `${root}: ${relativePath} is an absolute path; model files must be named relative to the model directory`);
  }
  const target = resolve(root, relativePath);
  if (!isWithin(root, target)) {
    throw new PathOutsideModelError(target, `${root}: ${relativePath} resolves to ${target}, outside the model directory`);
  }
  let rootReal: string;
  try {
    rootReal = realpathSync(root);
  } catch {
    return target; // the directory itself does not exist: opening will report that
  }
  // The deepest existing path from the target up to the root decides where symlinks lead.
  let existing = target;
  while (!existsSync(existing) && existing !== root) existing = dirname(existing);
  let real: string;
  try {
    real = realpathSync(existing);
  } catch {
    return target; // a dangling symlink: opening will report it
  }
  if (!allowedRealRoots(rootReal).some((r) => isWithin(r, real))) {
    throw new PathOutsideModelError(target, `${root}: ${relativePath} is a symlink (or lies under one) that leads to ${real}, outside the model directory`);
  }
  return target;
}

/** A tensor's location in a possibly sharded checkpoint: the file holding it, and its range there. */
export interface ModelTensorInfo extends SafetensorsTensorInfo {
  /** The safetensors file holding the tensor. */
  path: string;
}

function shapeString(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

function readIndex(dir: string, indexPath: string): Map<string, string> {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(indexPath, 'utf8'));
  } catch (cause) {
    throw new ConfigError(indexPath, `${indexPath}: not readable JSON (${(cause as Error).message})`, { cause });
  }
  const weightMap = typeof json === 'object' && json !== null && !Array.isArray(json) ? (json as Record<string, unknown>).weight_map : undefined;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    throw new ConfigError(indexPath, `${indexPath}: weight_map must be an object mapping tensor names to shard files`);
  }
  const map = new Map<string, string>();
  for (const [name, file] of Object.entries(weightMap)) {
    if (typeof file !== 'string') throw new ConfigError(indexPath, `${indexPath}: weight_map.${name} must be a file name, got ${JSON.stringify(file)}`);
    map.set(name, resolveInside(dir, file));
  }
  return map;
}

/**
 * The tensors of a model directory: one `model.safetensors`, or the shards of `model.safetensors.index.json`
 * (whose `weight_map` decides which shard holds each tensor). Files stay open until {@link close}.
 */
export class ModelTensors {
  readonly dir: string;
  private readonly files: SafetensorsFile[];
  private readonly byName: Map<string, SafetensorsFile>;

  private constructor(dir: string, files: SafetensorsFile[], byName: Map<string, SafetensorsFile>) {
    this.dir = dir;
    this.files = files;
    this.byName = byName;
  }

  /** Opens the weights of `dir`, validating every header (and, when sharded, that each shard holds its tensors). */
  static open(dir: string): ModelTensors {
    const root = resolve(dir);
    let isDir = false;
    try {
      isDir = statSync(root).isDirectory();
    } catch {
      /* reported below */
    }
    if (!isDir) throw new MissingTensorError(root, `${root}: not a model directory (it does not exist or is not a directory)`);

    const single = resolveInside(root, MODEL_SAFETENSORS);
    if (existsSync(single)) {
      const file = SafetensorsFile.open(single);
      return new ModelTensors(root, [file], new Map(file.names().map((n) => [n, file])));
    }
    const indexPath = resolveInside(root, MODEL_SAFETENSORS_INDEX);
    if (!existsSync(indexPath)) {
      const legacy = ['pytorch_model.bin', 'pytorch_model.bin.index.json'].filter((f) => existsSync(join(root, f)));
      throw new MissingTensorError(
        root,
        `${root}: neither ${MODEL_SAFETENSORS} nor ${MODEL_SAFETENSORS_INDEX} exists` +
          (legacy.length > 0 ? ` (found ${legacy.join(', ')}: PyTorch pickles are not read; convert the weights to safetensors)` : ''),
      );
    }
    const weightMap = readIndex(root, indexPath);
    const shardPaths = [...new Set(weightMap.values())].sort();
    const opened = new Map<string, SafetensorsFile>();
    try {
      for (const shardPath of shardPaths) {
        if (!existsSync(shardPath)) {
          const count = [...weightMap.values()].filter((p) => p === shardPath).length;
          throw new MissingTensorError(shardPath, `${indexPath}: shard ${relative(root, shardPath)} (holding ${count} tensor(s)) does not exist`);
        }
        opened.set(shardPath, SafetensorsFile.open(shardPath));
      }
      const byName = new Map<string, SafetensorsFile>();
      for (const [name, shardPath] of weightMap) {
        const file = opened.get(shardPath)!;
        if (!file.has(name)) throw new MissingTensorError(shardPath, `${indexPath}: tensor ${name} is mapped to ${relative(root, shardPath)}, which does not hold it`);
        byName.set(name, file);
      }
      return new ModelTensors(root, [...opened.values()], byName);
    } catch (err) {
      for (const file of opened.values()) file.close();
      throw err;
    }
  }

  /** The model directory (what error messages name). */
  get path(): string {
    return this.dir;
  }

  /** The safetensors files behind this directory. */
  get paths(): string[] {
    return this.files.map((f) => f.path);
  }

  /** Tensor names, by file then file order. */
  names(): string[] {
    return this.files.flatMap((f) => f.names().filter((n) => this.byName.get(n) === f));
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  info(name: string): ModelTensorInfo {
    const file = this.fileOf(name);
    return { ...file.info(name), path: file.path };
  }

  read(name: string, options: SafetensorsReadOptions = {}): Tensor {
    return this.fileOf(name).read(name, options);
  }

  readHost(name: string): AnyTypedArray {
    return this.fileOf(name).readHost(name);
  }

  readAsync(name: string, options: SafetensorsReadOptions = {}): Promise<Tensor> {
    try {
      return this.fileOf(name).readAsync(name, options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Checks that every expected tensor exists with its expected shape (tensors not listed are ignored: HF
   * checkpoints carry extras such as heads the model does not use). Missing tensors are reported first.
   */
  checkShapes(expected: ReadonlyMap<string, readonly number[]>): void {
    const missing = [...expected.keys()].filter((n) => !this.byName.has(n));
    if (missing.length > 0) {
      const shown = missing.slice(0, 5).join(', ');
      const more = missing.length > 5 ? `, … (${missing.length - 5} more)` : '';
      throw new MissingTensorError(this.dir, `${this.dir}: ${missing.length} tensor(s) the config requires are missing: ${shown}${more}`);
    }
    const mismatched: { name: string; want: readonly number[]; have: number[]; path: string }[] = [];
    for (const [name, want] of expected) {
      const info = this.info(name);
      if (info.shape.length !== want.length || info.shape.some((d, i) => d !== want[i])) mismatched.push({ name, want, have: info.shape, path: info.path });
    }
    const first = mismatched[0];
    if (first) {
      const others = mismatched.length > 1 ? ` (${mismatched.length - 1} other tensor(s) mismatch too)` : '';
      throw new TensorShapeError(first.path, `${first.path}: tensor ${first.name} has shape ${shapeString(first.have)} but the config implies ${shapeString(first.want)}${others}`);
    }
  }

  /** Closes every file. Idempotent. */
  close(): void {
    for (const f of this.files) f.close();
  }

  private fileOf(name: string): SafetensorsFile {
    const file = this.byName.get(name);
    if (!file) throw new MissingTensorError(this.dir, `${this.dir}: no tensor named ${name}`);
    return file;
  }
}

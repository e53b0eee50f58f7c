/**
 * The zoo on disk (design note §3.7): one directory per tensor content hash holding the raw little-endian bytes and
 * a small descriptor, block manifests by block id, and the zoo's snapshot. Putting a tensor that is already there
 * writes nothing (deduplication), and every file is written to a temporary name and renamed, so a reader never sees
 * a partial tensor.
 *
 *   <root>/tensors/<2 hex>/<64 hex>/data.bin   raw bytes
 *   <root>/tensors/<2 hex>/<64 hex>/meta.json  { dtype, shape, bytes }
 *   <root>/blocks/<64 hex>.json               a block manifest
 *   <root>/zoo.json                            BlockZoo.toJSON()
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { ZooIntegrityError, ZooInvalidError, ZooNotFoundError } from '../planner/errors.js';
import { type BlockId, isBlockId, isTensorId, type TensorDescriptor, type TensorId, tensorByteLength, tensorId } from '../planner/ids.js';
import type { BlockManifest } from '../planner/manifest.js';
import { verifyManifest } from '../planner/manifest.js';
import { BlockZoo, type ZooSnapshot } from '../planner/zoo.js';

/** What any tensor source (the disk store, a test's map) gives the device pool. */
export interface TensorReader {
  /** dtype, shape and the raw bytes of a stored tensor. */
  read(id: TensorId): { dtype: string; shape: number[]; bytes: Uint8Array };
}

export interface DiskStoreStats {
  /** Distinct tensors on disk and their bytes. */
  uniqueTensors: number;
  storedBytes: number;
  /** Since this store was opened: puts, those that found their tensor already stored, and the bytes put. */
  puts: number;
  dedupHits: number;
  bytesPut: number;
}

function atomicWrite(path: string, data: string | Uint8Array): void {
  const tmp = `${path}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  writeFileSync(tmp, data);
  renameSync(tmp, path);
}

export class DiskTensorStore implements TensorReader {
  readonly root: string;
  private unique = 0;
  private stored = 0;
  private puts = 0;
  private hits = 0;
  private bytesPut = 0;

  private constructor(root: string) {
    this.root = root;
  }

  /** Opens (creating when missing) a store at `root`, counting what is already there. */
  static open(root: string): DiskTensorStore {
    mkdirSync(join(root, 'tensors'), { recursive: true });
    mkdirSync(join(root, 'blocks'), { recursive: true });
    const store = new DiskTensorStore(root);
    for (const prefix of readdirSync(join(root, 'tensors'))) {
      for (const hex of readdirSync(join(root, 'tensors', prefix))) {
        const data = join(root, 'tensors', prefix, hex, 'data.bin');
        if (!existsSync(join(root, 'tensors', prefix, hex, 'meta.json')) || !existsSync(data)) continue;
        store.unique++;
        store.stored += statSync(data).size;
      }
    }
    return store;
  }

  private dirOf(id: TensorId): string {
    if (!isTensorId(id)) throw new ZooInvalidError(`${JSON.stringify(id)} is not a tensor id (sha256:<64 hex>)`);
    const hex = id.slice('sha256:'.length);
    return join(this.root, 'tensors', hex.slice(0, 2), hex);
  }

  /** Stores a tensor under its content id; `stored` is false when it was there already (nothing is written). */
  put(desc: TensorDescriptor, bytes: ArrayBufferView): { id: TensorId; stored: boolean } {
    const id = tensorId(desc, bytes);
    this.puts++;
    this.bytesPut += bytes.byteLength;
    const dir = this.dirOf(id);
    if (existsSync(join(dir, 'meta.json'))) {
      this.hits++;
      return { id, stored: false };
    }
    mkdirSync(dir, { recursive: true });
    atomicWrite(join(dir, 'data.bin'), new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    // meta.json last: its presence is what marks the tensor as stored.
    atomicWrite(join(dir, 'meta.json'), `${JSON.stringify({ dtype: desc.dtype, shape: [...desc.shape], bytes: bytes.byteLength })}\n`);
    this.unique++;
    this.stored += bytes.byteLength;
    return { id, stored: true };
  }

  has(id: TensorId): boolean {
    return existsSync(join(this.dirOf(id), 'meta.json'));
  }

  /** Descriptor of a stored tensor. */
  describe(id: TensorId): { dtype: string; shape: number[]; bytes: number } {
    const meta = join(this.dirOf(id), 'meta.json');
    if (!existsSync(meta)) throw new ZooNotFoundError('tensor', id);
    return JSON.parse(readFileSync(meta, 'utf8')) as { dtype: string; shape: number[]; bytes: number };
  }

  /** Reads a stored tensor; `verify` re-hashes the bytes and throws ZooIntegrityError when they do not match the id. */
  read(id: TensorId, options: { verify?: boolean } = {}): { dtype: string; shape: number[]; bytes: Uint8Array } {
    const meta = this.describe(id);
    const buf = readFileSync(join(this.dirOf(id), 'data.bin'));
    // A fresh ArrayBuffer of exactly the tensor (Buffer pools may misalign typed views).
    const bytes = new Uint8Array(buf.byteLength);
    bytes.set(buf);
    if (bytes.byteLength !== tensorByteLength(meta)) throw new ZooIntegrityError(id, `tensor ${id} holds ${bytes.byteLength} bytes on disk, ${tensorByteLength(meta)} expected`);
    if (options.verify && tensorId(meta, bytes) !== id) throw new ZooIntegrityError(id, `tensor ${id}'s bytes on disk hash to another id: the store is corrupt`);
    return { dtype: meta.dtype, shape: meta.shape, bytes };
  }

  stats(): DiskStoreStats {
    return { uniqueTensors: this.unique, storedBytes: this.stored, puts: this.puts, dedupHits: this.hits, bytesPut: this.bytesPut };
  }

  /** Writes a manifest under its block id (idempotent: the id is its content). */
  putManifest(m: BlockManifest): void {
    if (!verifyManifest(m)) throw new ZooIntegrityError(m.blockId, `manifest ${m.blockId} does not hash to its id`);
    const path = join(this.root, 'blocks', `${m.blockId.slice('blk:'.length)}.json`);
    if (!existsSync(path)) atomicWrite(path, `${JSON.stringify(m, null, 1)}\n`);
  }

  getManifest(id: BlockId): BlockManifest {
    if (!isBlockId(id)) throw new ZooInvalidError(`${JSON.stringify(id)} is not a block id (blk:<64 hex>)`);
    const path = join(this.root, 'blocks', `${id.slice('blk:'.length)}.json`);
    if (!existsSync(path)) throw new ZooNotFoundError('block', id);
    const m = JSON.parse(readFileSync(path, 'utf8')) as BlockManifest;
    if (!verifyManifest(m) || m.blockId !== id) throw new ZooIntegrityError(id, `manifest file for ${id} does not hash to its id`);
    return m;
  }

  /** Saves the zoo's snapshot and every block manifest it references. */
  saveZoo(zoo: BlockZoo): void {
    for (const b of zoo.blocks()) {
      for (const t of b.tensors) if (!this.has(t.id)) throw new ZooIntegrityError(t.id, `block ${b.blockId} references tensor ${t.name} (${t.id}), which this store does not hold`);
      this.putManifest(b);
    }
    atomicWrite(join(this.root, 'zoo.json'), `${JSON.stringify(zoo.toJSON())}\n`);
  }

  loadZoo(): BlockZoo {
    const path = join(this.root, 'zoo.json');
    if (!existsSync(path)) throw new ZooNotFoundError('model', path, `${path}: no zoo saved in this store`);
    return BlockZoo.fromJSON(JSON.parse(readFileSync(path, 'utf8')) as ZooSnapshot);
  }
}

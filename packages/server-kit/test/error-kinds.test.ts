/**
 * Every exported error class of every @tessera package maps to a deliberate HTTP status: a class that extends
 * core's TesseraError states its kind, and a kind that lands on 500 must be listed below with the reason. So a new
 * error class cannot become a 500 by accident. Data-driven: add a package to PACKAGES, or an entry to INTERNAL.
 */
import { TesseraError } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { STATUS_BY_KIND } from '../src/index.js';

/** The public entries walked (each package's src/index.ts through its name). */
const PACKAGES = [
  '@tessera/core',
  '@tessera/native',
  '@tessera/engine',
  '@tessera/batcher',
  '@tessera/length-scheduler',
  '@tessera/block-zoo',
  '@tessera/pet-ops',
  '@tessera/plot-store',
  '@tessera/sgmv-kernel',
  '@tessera/adapter-swap',
  '@tessera/cluster',
  '@tessera/sim',
  '@tessera/server-kit',
] as const;

/** `package:Class` → why it is allowed to answer 500. */
const INTERNAL: Readonly<Record<string, string>> = {
  '@tessera/core:TesseraError': 'the base class; each subclass states its own kind',
  '@tessera/core:RemoteError': "carries the remote error's kind per instance (the class default only covers untyped remote failures)",
  '@tessera/cluster:RemoteError': "core's RemoteError with the adapter it names: the remote kind per instance",
  '@tessera/pet-ops:PetOpsError': 'the base class of pet-ops errors; each subclass states its own kind',
  '@tessera/native:DisposedTensorError': 'a tensor used after dispose(): a bug in the caller',
  '@tessera/native:DeviceMismatchError': 'tensors of two backends in one op: a bug in the caller',
  '@tessera/native:DeviceError': 'the device (CUDA) failed',
  '@tessera/sim:EventOrderError': 'the simulator scheduled an event in the past: a bug',
  '@tessera/cluster:ClusterError': 'the base class of cluster errors; each subclass states its own kind',
  '@tessera/batcher:BatcherStateError': 'the scheduler driven out of order (plan() during a step, two run() loops): a bug in the caller',
  '@tessera/block-zoo:ZooIntegrityError': 'the tensor store on disk is corrupt (a stored file does not hash to its id)',
  '@tessera/adapter-swap:AdapterFileError': "a tenant's adapter file on disk is corrupt, foreign or truncated (the store wrote it atomically and checksummed)",
  '@tessera/adapter-swap:PipelineStateError': 'the layer-wise pipeline told of a completion it never handed out, or stalled: a bug in its runner',
};

/** Every exported TesseraError class, each under the first package (in PACKAGES order) that exports it. */
async function allErrorClasses(): Promise<Map<string, typeof TesseraError>> {
  const owner = new Map<unknown, string>();
  const out = new Map<string, typeof TesseraError>();
  for (const name of PACKAGES) for (const [exported, cls] of await errorClasses(name, owner)) out.set(`${name}:${exported}`, cls);
  return out;
}

async function errorClasses(name: string, owner: Map<unknown, string>): Promise<[string, typeof TesseraError][]> {
  const mod = (await import(name)) as Record<string, unknown>;
  const out: [string, typeof TesseraError][] = [];
  for (const [exported, value] of Object.entries(mod)) {
    if (typeof value !== 'function' || owner.has(value)) continue;
    owner.set(value, name);
    if (value !== TesseraError && !(value.prototype instanceof TesseraError)) {
      owner.delete(value);
      continue;
    }
    out.push([exported, value as typeof TesseraError]);
  }
  return out;
}

describe('error kinds → HTTP status', () => {
  it('every exported TesseraError class answers a non-500 status, or is listed as internal', async () => {
    const wrong: string[] = [];
    const classes = await allErrorClasses();
    expect(classes.size).toBeGreaterThan(20);
    for (const [key, cls] of classes) {
      const status = STATUS_BY_KIND[cls.kind];
      expect(status, `${key}: kind ${cls.kind}`).toBeDefined();
      if (status === 500 && INTERNAL[key] === undefined) wrong.push(`${key} (kind '${cls.kind}')`);
    }
    expect(wrong, 'classes that would answer 500: give them a kind, or list them in INTERNAL with a reason').toEqual([]);
  });

  it('lists no class that is not exported or not internal any more', async () => {
    const seen = await allErrorClasses();
    for (const key of Object.keys(INTERNAL)) {
      expect(seen.has(key), `${key} is allowlisted but not exported`).toBe(true);
      expect(STATUS_BY_KIND[seen.get(key)!.kind], `${key} is allowlisted but no longer internal`).toBe(500);
    }
  });
});

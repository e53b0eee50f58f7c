/**
 * A host (float64) interpreter of native PetOps, with the semantics of @tessera/native's petSiteRun: the oracle
 * for the native kernels and a way to run a LoadedPet's ops where the native PET kernels are absent. Ops run in
 * list order; each reads its tensors from the device and writes `y` back.
 */
import type { PetOp, PetRows, Tensor } from '@tessera/native';
import { geluErfRef, geluTanhRef } from './forward.js';

/** Row indices of `rows`: start + s·stride + t for s < seqs, t < tokens. */
export function petRowIndices(rows: PetRows): number[] {
  const out: number[] = [];
  for (let s = 0; s < rows.seqs; s++) for (let t = 0; t < rows.tokens; t++) out.push(rows.start + s * rows.stride + t);
  return out;
}

function f32(t: Tensor): Float32Array {
  return t.toArray() as Float32Array;
}

function i32(t: Tensor): Int32Array {
  return t.toArray() as Int32Array;
}

function features(t: Tensor): number {
  return t.shape[t.shape.length - 1]!;
}

export function referencePetOp(op: PetOp): void {
  const rows = petRowIndices(op.rows);
  const y = f32(op.y);
  const d = features(op.y);
  switch (op.kind) {
    case 'csr': {
      const x = f32(op.x);
      const din = features(op.x);
      const indptr = i32(op.indptr);
      const indices = i32(op.indices);
      const values = f32(op.values);
      const scale = op.scale ?? 1;
      for (const r of rows) {
        for (let o = 0; o < d; o++) {
          let acc = 0;
          for (let e = indptr[o]!; e < indptr[o + 1]!; e++) acc += values[e]! * x[r * din + indices[e]!]!;
          y[r * d + o] = y[r * d + o]! + scale * acc;
        }
      }
      break;
    }
    case 'bias': {
      const b = f32(op.bias);
      for (const r of rows) for (let j = 0; j < d; j++) y[r * d + j] = y[r * d + j]! + b[j]!;
      break;
    }
    case 'adapter': {
      const down = f32(op.down);
      const bd = f32(op.downBias);
      const up = f32(op.up);
      const bu = f32(op.upBias);
      const m = op.down.shape[0]!;
      const act = (op.act ?? 'gelu') === 'gelu' ? geluErfRef : geluTanhRef;
      const z = new Float64Array(m);
      for (const r of rows) {
        for (let k = 0; k < m; k++) {
          let acc = bd[k]!;
          for (let j = 0; j < d; j++) acc += y[r * d + j]! * down[k * d + j]!;
          z[k] = act(acc);
        }
        for (let j = 0; j < d; j++) {
          let acc = bu[j]!;
          for (let k = 0; k < m; k++) acc += z[k]! * up[j * m + k]!;
          y[r * d + j] = y[r * d + j]! + acc;
        }
      }
      break;
    }
    case 'layernorm': {
      const x = f32(op.x);
      const gamma = f32(op.gamma);
      const beta = f32(op.beta);
      for (const r of rows) {
        let mean = 0;
        for (let j = 0; j < d; j++) mean += x[r * d + j]!;
        mean /= d;
        let v = 0;
        for (let j = 0; j < d; j++) v += (x[r * d + j]! - mean) ** 2;
        const inv = 1 / Math.sqrt(v / d + op.eps);
        for (let j = 0; j < d; j++) y[r * d + j] = (x[r * d + j]! - mean) * inv * gamma[j]! + beta[j]!;
      }
      break;
    }
  }
  op.y.write(y);
}

/** Runs `ops` in order on the host (petSiteRun's sequential semantics). */
export function referencePetSiteRun(ops: readonly PetOp[]): void {
  for (const op of ops) referencePetOp(op);
}

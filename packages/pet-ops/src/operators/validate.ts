/**
 * Checks shared by every PET type: a task's config, its tensors against the type's documented layout, and the
 * contents of compressed tensors (CSR, bit-packed masks). Every failure names the tensor (or config field).
 */
import type { EncoderConfig } from '@tessera/engine';
import { PetConfigError, PetShapeError } from '../errors.js';
import type { HostTensor, PetConfig, PetParams, PetTensorSpec, PetType } from '../types.js';

export function shapeString(shape: readonly number[]): string {
  return `[${shape.map((d) => (d < 0 ? 'nnz' : String(d))).join(', ')}]`;
}

export function describe(t: HostTensor): string {
  return `${t.dtype} ${shapeString(t.shape)}`;
}

const ARRAY_OF: Record<HostTensor['dtype'], { ctor: Function; name: string }> = {
  f32: { ctor: Float32Array, name: 'Float32Array' },
  i32: { ctor: Int32Array, name: 'Int32Array' },
  u8: { ctor: Uint8Array, name: 'Uint8Array' },
};

/** The shared model must have a pooler: a task head reads the pooled [CLS] output. */
export function checkSharedConfig(config: EncoderConfig): void {
  if (config.family !== 'encoder' || config.architecture !== 'BertForSequenceClassification') {
    throw new PetConfigError(
      `PET tasks need a BertForSequenceClassification shared model (its pooler feeds each task's head), got ${config.family} ${config.architecture}`,
    );
  }
}

/** Labels: a non-empty list of distinct, non-empty strings (their count is the head's width). */
export function checkLabels(type: PetType, pet: PetConfig): void {
  const labels = pet.labels as unknown;
  if (!Array.isArray(labels) || labels.length === 0) throw new PetConfigError(`${type} task: config.labels must be a non-empty list of label names`);
  const seen = new Set<string>();
  labels.forEach((label, i) => {
    if (typeof label !== 'string' || label === '') throw new PetConfigError(`${type} task: config.labels[${i}] must be a non-empty string, got ${JSON.stringify(label)}`);
    if (seen.has(label)) throw new PetConfigError(`${type} task: config.labels has ${JSON.stringify(label)} twice`);
    seen.add(label);
  });
}

export function checkPositiveInteger(type: PetType, field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new PetConfigError(`${type} task: config.${field} must be a positive integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * The tensors match the layout exactly: every required tensor present, nothing the layout does not name, each of
 * the spec's dtype and shape (-1 matches any length), its data a typed array of exactly that many elements.
 */
export function checkLayout(type: PetType, specs: readonly PetTensorSpec[], params: PetParams): void {
  const byName = new Map(specs.map((s) => [s.name, s]));
  for (const [name, t] of params.tensors) {
    if (!byName.has(name)) throw new PetShapeError(name, `no tensor of this name (the ${type} layout does not name it)`, describe(t));
  }
  for (const spec of specs) {
    const t = params.tensors.get(spec.name);
    const want = `${spec.dtype} ${shapeString(spec.shape)}`;
    if (!t) {
      if (spec.optional) continue;
      throw new PetShapeError(spec.name, want, 'no such tensor', `the ${type} layout requires it`);
    }
    if (t.dtype !== spec.dtype) throw new PetShapeError(spec.name, want, describe(t), 'wrong dtype');
    if (t.shape.length !== spec.shape.length || t.shape.some((d, i) => !Number.isInteger(d) || d < 0 || (spec.shape[i]! >= 0 && d !== spec.shape[i]))) {
      throw new PetShapeError(spec.name, want, describe(t));
    }
    const arr = ARRAY_OF[t.dtype];
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (!(t.data instanceof arr.ctor) || t.data.length !== numel) {
      throw new PetShapeError(spec.name, `a ${arr.name} of ${numel} elements`, `a ${t.data.constructor.name} of ${t.data.length}`, `data of ${describe(t)}`);
    }
  }
}

/** No NaN or infinity in an f32 tensor (it would spread through every later layer of the task's rows). */
export function checkFinite(name: string, data: Float32Array): void {
  for (let i = 0; i < data.length; i++) {
    if (!Number.isFinite(data[i]!)) throw new PetShapeError(name, 'finite values', `${data[i]} at element ${i}`);
  }
}

/**
 * A CSR matrix [rows, cols] is well formed: indptr [rows + 1] rises from 0 to nnz, indices and values hold nnz
 * entries, and each row's indices are in [0, cols) and strictly increasing.
 */
export function checkCsr(names: { indptr: string; indices: string; values: string }, indptr: Int32Array, indices: Int32Array, values: Float32Array, rows: number, cols: number): void {
  if (indptr.length !== rows + 1) throw new PetShapeError(names.indptr, `${rows + 1} row pointers`, String(indptr.length));
  if (indptr[0] !== 0) throw new PetShapeError(names.indptr, 'indptr[0] = 0', `indptr[0] = ${indptr[0]}`);
  const nnz = indices.length;
  if (values.length !== nnz) throw new PetShapeError(names.values, `${nnz} values (one per index of ${names.indices})`, String(values.length));
  if (indptr[rows] !== nnz) throw new PetShapeError(names.indptr, `indptr[${rows}] = nnz = ${nnz}`, `indptr[${rows}] = ${indptr[rows]}`);
  for (let r = 0; r < rows; r++) {
    const begin = indptr[r]!;
    const end = indptr[r + 1]!;
    if (end < begin) throw new PetShapeError(names.indptr, 'non-decreasing row pointers', `indptr[${r}] = ${begin} > indptr[${r + 1}] = ${end}`);
    let prev = -1;
    for (let e = begin; e < end; e++) {
      const c = indices[e]!;
      if (c < 0 || c >= cols) throw new PetShapeError(names.indices, `column indices in [0, ${cols})`, `${c} at entry ${e} (row ${r})`);
      if (c <= prev) throw new PetShapeError(names.indices, 'strictly increasing column indices within a row', `${prev} then ${c} in row ${r}`);
      prev = c;
    }
  }
}

/** Bytes of one row of a bit-packed mask over `cols` inputs. */
export function maskRowBytes(cols: number): number {
  return Math.ceil(cols / 8);
}

/** Bit `c` of a mask row (LSB-first within a byte): 1 keeps the weight, 0 masks it out. */
export function maskBit(mask: Uint8Array, rowOffset: number, c: number): number {
  return (mask[rowOffset + (c >> 3)]! >> (c & 7)) & 1;
}

/** The padding bits past `cols` in each row's last byte must be 0: a writer using another bit order shows up here. */
export function checkMaskPadding(name: string, mask: Uint8Array, rows: number, cols: number): void {
  const rowBytes = maskRowBytes(cols);
  const used = cols % 8;
  if (used === 0) return;
  const padMask = 0xff & ~((1 << used) - 1);
  for (let r = 0; r < rows; r++) {
    const last = mask[r * rowBytes + rowBytes - 1]!;
    if ((last & padMask) !== 0) {
      throw new PetShapeError(name, `padding bits ${used}..7 of each row's last byte = 0 (bits are LSB-first)`, `byte 0x${last.toString(16)} in row ${r}`);
    }
  }
}

/** A task LayerNorm comes whole: weight and bias both, or neither (the shared one). */
export function checkNormPairs(params: PetParams, modules: readonly string[]): void {
  for (const m of modules) {
    const w = params.tensors.has(`${m}.weight`);
    const b = params.tensors.has(`${m}.bias`);
    if (w !== b) {
      const [have, lack] = w ? ['weight', 'bias'] : ['bias', 'weight'];
      throw new PetShapeError(`${m}.${lack}`, `present (a task LayerNorm needs both ${m}.weight and ${m}.bias)`, `only ${m}.${have}`);
    }
  }
}

export function hostF32(params: PetParams, name: string): Float32Array {
  return params.tensors.get(name)!.data as Float32Array;
}

export function hostI32(params: PetParams, name: string): Int32Array {
  return params.tensors.get(name)!.data as Int32Array;
}

export function hostU8(params: PetParams, name: string): Uint8Array {
  return params.tensors.get(name)!.data as Uint8Array;
}

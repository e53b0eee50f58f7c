/**
 * Scaled dot-product attention (f32) with grouped-query heads (GQA):
 *   - {@link attentionPrefill}: all positions of a batch of sequences at once, causal or bidirectional, with an
 *     optional key padding mask;
 *   - {@link attentionDecode}: one new query per sequence against a paged KV cache of {@link PAGE_SIZE}-row pages
 *     addressed through a block table (vLLM's PagedAttention layout).
 * Query head h reads kv head floor(h / (nHeads / nKvHeads)). A query that sees no key gets a zero row.
 */
import { callNative, InvalidArgumentError } from '../errors.js';
import { checkShapes, expectDtype, expectRank, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

/** Rows per KV-cache page. A cache is [numPages, PAGE_SIZE, nKvHeads, headDim]. */
export const PAGE_SIZE = 16;

export interface AttentionPrefillOptions {
  /** Query i sees keys j <= i only. Default false (bidirectional, as in an encoder). */
  causal?: boolean;
  /** Multiplies q·k before the softmax. Default 1 / sqrt(headDim). */
  scale?: number;
  /** u8 [batch, seq]: 0 marks a padding key, which gets no weight from any query. */
  keyMask?: Tensor | undefined;
  /** Write here ([batch, seq, nHeads, headDim] f32) instead of allocating. Must not overlap q, k or v. */
  out?: Tensor;
  /** Run the plain double-precision reference kernel (CPU only; tests compare against it). */
  reference?: boolean;
}

export interface AttentionDecodeOptions {
  /** Multiplies q·k before the softmax. Default 1 / sqrt(headDim). */
  scale?: number;
  /** Write here ([batch, nHeads, headDim] f32) instead of allocating. Must not overlap an input. */
  out?: Tensor;
  /** Run the plain double-precision reference kernel (CPU only). */
  reference?: boolean;
  /**
   * Host copies of `blockTable` and `contextLens` with the same contents, e.g. kept by a caller that built the
   * tensors on the host and calls once per layer: the checks here read them instead of reading the tensors back
   * on every call (a device-to-host copy on a GPU). The native layer still checks the tensors themselves before
   * a kernel reads them.
   */
  hostIndices?: { blockTable: Int32Array; contextLens: Int32Array };
}

function resolveScale(op: string, scale: number | undefined, headDim: number): number {
  if (scale === undefined) return headDim > 0 ? 1 / Math.sqrt(headDim) : 1;
  if (!Number.isFinite(scale)) throw new InvalidArgumentError(`${op}: scale must be a finite number, got ${scale}`);
  return scale;
}

function checkHeadSplit(op: string, q: Tensor, nHeads: number, kv: Tensor, kvName: string, nKvHeads: number): void {
  checkShapes(nKvHeads === 0 ? nHeads === 0 : nHeads % nKvHeads === 0, () =>
    `${op}: q ${formatShape(q.shape)} has ${nHeads} heads, not a multiple of the ${nKvHeads} kv heads of ${kvName} ${formatShape(kv.shape)}`);
}

// The native side rejects any byte overlap between out and an input; catching the plain mistake here names it.
function checkOutIsNotInput(op: string, out: Tensor | undefined, inputs: Record<string, Tensor>): void {
  for (const [name, t] of Object.entries(inputs)) {
    if (out === t) throw new InvalidArgumentError(`${op}: out ${formatShape(t.shape)} is the input ${name}; attention cannot run in place`);
  }
}

/**
 * softmax(scale · q kᵀ + mask) v per (sequence, head).
 * q [batch, seq, nHeads, headDim]; k, v [batch, seq, nKvHeads, headDim] → [batch, seq, nHeads, headDim].
 */
export function attentionPrefill(q: Tensor, k: Tensor, v: Tensor, options: AttentionPrefillOptions = {}): Tensor {
  const op = 'attentionPrefill';
  const { keyMask, out: outOption } = options;
  const backend = sameBackend(op, q, k, v, keyMask, outOption);
  for (const [name, t] of [['q', q], ['k', k], ['v', v]] as const) {
    expectDtype(op, name, t, 'f32');
    expectRank(op, name, t, 4);
  }
  const [batch, seq, nHeads, headDim] = q.shape as [number, number, number, number];
  const nKvHeads = k.shape[2]!;
  const kvShape = [batch, seq, nKvHeads, headDim];
  checkShapes(k.shape.every((d, i) => d === kvShape[i]), () =>
    `${op}: k ${formatShape(k.shape)} does not fit q ${formatShape(q.shape)}: expected [batch, seq, kvHeads, headDim] = ${formatShape(kvShape)}`);
  checkShapes(v.shape.every((d, i) => d === k.shape[i]), () =>
    `${op}: v ${formatShape(v.shape)} and k ${formatShape(k.shape)} must have the same shape`);
  checkHeadSplit(op, q, nHeads, k, 'k', nKvHeads);
  if (keyMask) {
    expectDtype(op, 'keyMask', keyMask, 'u8');
    checkShapes(keyMask.rank === 2 && keyMask.shape[0] === batch && keyMask.shape[1] === seq, () =>
      `${op}: keyMask ${formatShape(keyMask.shape)} must be [batch, seq] = ${formatShape([batch, seq])} for q ${formatShape(q.shape)}`);
  }
  const scale = resolveScale(op, options.scale, headDim);
  checkOutIsNotInput(op, outOption, { q, k, v });
  const out = resolveOut(op, outOption, q.shape, 'f32', backend);
  callNative(() =>
    backend.binding.attentionPrefill(q.native, k.native, v.native, out.native, {
      causal: options.causal ?? false,
      scale,
      keyMask: keyMask?.native ?? null,
      reference: options.reference ?? false,
    }),
  );
  return out;
}

/**
 * One decode step: each sequence's query against its first contextLens[b] cached positions.
 * q [batch, nHeads, headDim]; kCache, vCache [numPages, 16, nKvHeads, headDim]; blockTable i32 [batch, maxPages]
 * (position t of sequence b lives in page blockTable[b, floor(t / 16)], row t % 16); contextLens i32 [batch]
 * → [batch, nHeads, headDim]. Only the first ceil(len / 16) entries of a block-table row are read, so unused
 * entries may hold anything (e.g. -1). Validation reads blockTable and contextLens to the host.
 */
export function attentionDecode(
  q: Tensor,
  kCache: Tensor,
  vCache: Tensor,
  blockTable: Tensor,
  contextLens: Tensor,
  options: AttentionDecodeOptions = {},
): Tensor {
  const op = 'attentionDecode';
  const { out: outOption } = options;
  const backend = sameBackend(op, q, kCache, vCache, blockTable, contextLens, outOption);
  expectDtype(op, 'q', q, 'f32');
  expectDtype(op, 'kCache', kCache, 'f32');
  expectDtype(op, 'vCache', vCache, 'f32');
  expectDtype(op, 'blockTable', blockTable, 'i32');
  expectDtype(op, 'contextLens', contextLens, 'i32');
  expectRank(op, 'q', q, 3);
  expectRank(op, 'kCache', kCache, 4);
  expectRank(op, 'blockTable', blockTable, 2);
  const [batch, nHeads, headDim] = q.shape as [number, number, number];
  const [numPages, pageSize, nKvHeads, cacheHeadDim] = kCache.shape as [number, number, number, number];
  checkShapes(pageSize === PAGE_SIZE && cacheHeadDim === headDim, () =>
    `${op}: kCache ${formatShape(kCache.shape)} does not fit q ${formatShape(q.shape)}: expected [numPages, ${PAGE_SIZE}, kvHeads, ${headDim}]`);
  checkShapes(vCache.rank === 4 && vCache.shape.every((d, i) => d === kCache.shape[i]), () =>
    `${op}: vCache ${formatShape(vCache.shape)} and kCache ${formatShape(kCache.shape)} must have the same shape`);
  checkHeadSplit(op, q, nHeads, kCache, 'kCache', nKvHeads);
  const maxPages = blockTable.shape[1]!;
  checkShapes(blockTable.shape[0] === batch, () =>
    `${op}: blockTable ${formatShape(blockTable.shape)} must have one row per sequence of q ${formatShape(q.shape)}`);
  checkShapes(contextLens.rank === 1 && contextLens.shape[0] === batch, () =>
    `${op}: contextLens ${formatShape(contextLens.shape)} must be [batch] = ${formatShape([batch])} for q ${formatShape(q.shape)}`);

  const mirror = options.hostIndices;
  if (mirror && (mirror.blockTable.length !== batch * maxPages || mirror.contextLens.length !== batch)) {
    throw new InvalidArgumentError(
      `${op}: hostIndices hold ${mirror.blockTable.length} block-table and ${mirror.contextLens.length} length entries, but blockTable ${formatShape(blockTable.shape)} and contextLens ${formatShape(contextLens.shape)} hold ${batch * maxPages} and ${batch}`);
  }
  const lens = mirror ? mirror.contextLens : (contextLens.toArray() as Int32Array);
  const table = mirror ? mirror.blockTable : (blockTable.toArray() as Int32Array);
  for (let b = 0; b < batch; b++) {
    const len = lens[b]!;
    if (len < 0) throw new InvalidArgumentError(`${op}: contextLens[${b}] = ${len} is negative`);
    const used = Math.ceil(len / PAGE_SIZE);
    if (used > maxPages) {
      throw new InvalidArgumentError(
        `${op}: contextLens[${b}] = ${len} needs ${used} pages of ${PAGE_SIZE} but blockTable ${formatShape(blockTable.shape)} has ${maxPages} per sequence`);
    }
    for (let p = 0; p < used; p++) {
      const page = table[b * maxPages + p]!;
      if (page < 0 || page >= numPages) {
        throw new InvalidArgumentError(
          `${op}: blockTable[${b}, ${p}] = ${page} is not a page of kCache ${formatShape(kCache.shape)} (valid: 0 to ${numPages - 1})`);
      }
    }
  }

  const scale = resolveScale(op, options.scale, headDim);
  checkOutIsNotInput(op, outOption, { q, kCache, vCache });
  const out = resolveOut(op, outOption, q.shape, 'f32', backend);
  callNative(() =>
    backend.binding.attentionDecode(q.native, kCache.native, vCache.native, blockTable.native, contextLens.native, out.native, {
      scale,
      reference: options.reference ?? false,
    }),
  );
  return out;
}

/**
 * The flat cache row (page * 16 + offset) holding `position` of a sequence whose block-table row is
 * `blockTableRow`. With a cache viewed as [numPages * 16, nKvHeads * headDim] rows, scatterRows(newK, slots, cache)
 * writes new K/V rows into place.
 */
export function kvSlot(blockTableRow: ArrayLike<number>, position: number): number {
  if (!Number.isInteger(position) || position < 0) {
    throw new InvalidArgumentError(`kvSlot: position ${position} is not a non-negative integer`);
  }
  const index = Math.floor(position / PAGE_SIZE);
  if (index >= blockTableRow.length) {
    throw new InvalidArgumentError(
      `kvSlot: position ${position} is in page ${index} of the sequence, but its block-table row has ${blockTableRow.length} entries`);
  }
  const page = blockTableRow[index]!;
  if (!Number.isInteger(page) || page < 0) {
    throw new InvalidArgumentError(`kvSlot: block-table entry ${index} (for position ${position}) is ${page}, not a page id`);
  }
  return page * PAGE_SIZE + (position % PAGE_SIZE);
}

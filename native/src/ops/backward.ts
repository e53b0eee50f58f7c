/**
 * Backward kernels for training (f32): the gradients of the forwards in the other op groups.
 *
 * Every op recomputes what it needs from the forward's inputs (LayerNorm / RMSNorm statistics, attention
 * probabilities), so only the inputs must be kept. Reductions run in a fixed order on every backend path
 * (parameter gradients are column sums with rows added in order; row statistics use the forwards' fixed trees),
 * so results are bitwise identical for any thread count. `reference: true` runs the double-accumulating scalar
 * kernels. Parameter gradients (dgamma, dbeta, dWeight, dBias, embedding tables) overwrite their output unless
 * `accumulate` is set, in which case the output must be given and the gradient is added to it.
 */
import type { ActivationName } from '../binding.js';
import { callNative, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { checkShapes, expectDtype, expectRank, expectSameShape, formatShape, sameShape } from '../shape.js';
import { sameBackend, Tensor } from '../tensor.js';
import { gemm } from './gemm.js';
import { checkEps, checkRowInput, checkRowParam } from './norm.js';
import { resolveOut } from './output.js';

export interface BackwardOptions {
  /** Run the plain scalar reference kernel (double accumulation; CPU only; tests compare against it). */
  reference?: boolean;
}

export interface ParamGradOptions extends BackwardOptions {
  /** Add the parameter gradients to the given outputs instead of overwriting them (gradient accumulation). */
  accumulate?: boolean;
}

/**
 * An optional output: `undefined` allocates one (when `want`), `null` skips it, a tensor is checked and written.
 * With `accumulate` a wanted output must be given.
 */
function optionalOut(op: string, name: string, given: Tensor | null | undefined, want: boolean, shape: readonly number[],
  backend: Tensor['backend'], accumulate: boolean): Tensor | null {
  if (given === null || (given === undefined && !want)) return null;
  if (given === undefined && accumulate) {
    throw new InvalidArgumentError(`${op}: accumulate adds to ${name}, so pass ${name} (or null to skip it)`);
  }
  return resolveOut(op, given, shape, 'f32', backend);
}

// ---------------------------------------------------------------- normalisation

export interface LayerNormBackwardOptions extends ParamGradOptions {
  /** As in the forward (default 1e-5). */
  eps?: number;
  /** dL/dx: written here (may be `dy` itself), allocated when absent, skipped when null. */
  dx?: Tensor | null | undefined;
  /** dL/dgamma [dim]: allocated when absent and gamma is given, skipped when null. */
  dgamma?: Tensor | null | undefined;
  /** dL/dbeta [dim]: allocated when absent and gamma is given (an affine LayerNorm), skipped when null. */
  dbeta?: Tensor | null | undefined;
}

export interface LayerNormGrads {
  dx: Tensor | null;
  dgamma: Tensor | null;
  dbeta: Tensor | null;
}

/**
 * Backward of {@link layerNorm} over the last dimension: x and gamma are the forward's inputs, dy = dL/dy.
 * dx = rstd (g·dy - mean(g·dy) - x̂ mean(g·dy x̂)), dgamma = Σ_rows dy x̂, dbeta = Σ_rows dy.
 */
export function layerNormBackward(x: Tensor, gamma: Tensor | null | undefined, dy: Tensor, options: LayerNormBackwardOptions = {}): LayerNormGrads {
  const op = 'layerNormBackward';
  const backend = sameBackend(op, x, gamma, dy, options.dx ?? undefined, options.dgamma ?? undefined, options.dbeta ?? undefined);
  const dim = checkRowInput(op, x, 'x');
  expectDtype(op, 'dy', dy, 'f32');
  expectSameShape(op, 'dy', dy, 'x', x);
  checkRowParam(op, 'gamma', gamma, x, dim);
  const eps = options.eps ?? 1e-5;
  checkEps(op, eps);
  const accumulate = options.accumulate ?? false;
  const dx = optionalOut(op, 'dx', options.dx, true, x.shape, backend, false);
  const dgamma = optionalOut(op, 'dgamma', options.dgamma, !!gamma, [dim], backend, accumulate);
  const dbeta = optionalOut(op, 'dbeta', options.dbeta, !!gamma, [dim], backend, accumulate);
  callNative(() => backend.binding.layerNormBackward(x.native, gamma?.native ?? null, dy.native, dx?.native ?? null, dgamma?.native ?? null,
    dbeta?.native ?? null, { eps, accumulate, reference: options.reference ?? false }));
  return { dx, dgamma, dbeta };
}

export interface RmsNormBackwardOptions extends ParamGradOptions {
  /** As in the forward (default 1e-6). */
  eps?: number;
  /** dL/dx: written here (may be `dy` itself), allocated when absent, skipped when null. */
  dx?: Tensor | null | undefined;
  /** dL/dgamma [dim]: allocated when absent and gamma is given, skipped when null. */
  dgamma?: Tensor | null | undefined;
}

/** Backward of {@link rmsNorm}: dx = rstd (g·dy - x̂ mean(g·dy x̂)) with x̂ = x·rstd, dgamma = Σ_rows dy x̂. */
export function rmsNormBackward(x: Tensor, gamma: Tensor | null | undefined, dy: Tensor, options: RmsNormBackwardOptions = {}):
  { dx: Tensor | null; dgamma: Tensor | null } {
  const op = 'rmsNormBackward';
  const backend = sameBackend(op, x, gamma, dy, options.dx ?? undefined, options.dgamma ?? undefined);
  const dim = checkRowInput(op, x, 'x');
  expectDtype(op, 'dy', dy, 'f32');
  expectSameShape(op, 'dy', dy, 'x', x);
  checkRowParam(op, 'gamma', gamma, x, dim);
  const eps = options.eps ?? 1e-6;
  checkEps(op, eps);
  const accumulate = options.accumulate ?? false;
  const dx = optionalOut(op, 'dx', options.dx, true, x.shape, backend, false);
  const dgamma = optionalOut(op, 'dgamma', options.dgamma, !!gamma, [dim], backend, accumulate);
  callNative(() => backend.binding.rmsNormBackward(x.native, gamma?.native ?? null, dy.native, dx?.native ?? null, dgamma?.native ?? null,
    { eps, accumulate, reference: options.reference ?? false }));
  return { dx, dgamma };
}

export interface SoftmaxBackwardOptions extends BackwardOptions {
  /** The forward's scale (default 1). */
  scale?: number;
  /** Write dx here (may be y or dy: in place). */
  out?: Tensor;
}

/** Backward of {@link softmax} from its output y: dx = scale · y ⊙ (dy - Σ y·dy) per row. */
export function softmaxBackward(y: Tensor, dy: Tensor, options: SoftmaxBackwardOptions = {}): Tensor {
  const op = 'softmaxBackward';
  const backend = sameBackend(op, y, dy, options.out);
  checkRowInput(op, y, 'y');
  expectDtype(op, 'dy', dy, 'f32');
  expectSameShape(op, 'dy', dy, 'y', y);
  const scale = options.scale ?? 1;
  if (!Number.isFinite(scale)) throw new InvalidArgumentError(`${op}: scale must be finite, got ${scale}`);
  const dx = resolveOut(op, options.out, y.shape, 'f32', backend);
  callNative(() => backend.binding.softmaxBackward(y.native, dy.native, dx.native, { scale, reference: options.reference ?? false }));
  return dx;
}

// ---------------------------------------------------------------- activations

export interface ActivationBackwardOptions extends BackwardOptions {
  /** Write dx here (may be x or dy: in place). */
  out?: Tensor;
}

function activationBackward(act: ActivationName, op: string, x: Tensor, dy: Tensor, options: ActivationBackwardOptions): Tensor {
  const backend = sameBackend(op, x, dy, options.out);
  expectDtype(op, 'x', x, 'f32');
  expectDtype(op, 'dy', dy, 'f32');
  expectSameShape(op, 'dy', dy, 'x', x);
  const dx = resolveOut(op, options.out, x.shape, 'f32', backend);
  callNative(() => backend.binding.activationBackward(act, x.native, dy.native, dx.native, { reference: options.reference ?? false }));
  return dx;
}

/** dx = dy · GELU'(x) for the erf form: Φ(x) + x φ(x). */
export function geluErfBackward(x: Tensor, dy: Tensor, options: ActivationBackwardOptions = {}): Tensor {
  return activationBackward('gelu_erf', 'geluErfBackward', x, dy, options);
}

/** dx = dy · GELU'(x) for the tanh form: with s = sigmoid(2u), u = c(x + 0.044715x³): s + 2x s(1-s) u'. */
export function geluTanhBackward(x: Tensor, dy: Tensor, options: ActivationBackwardOptions = {}): Tensor {
  return activationBackward('gelu_tanh', 'geluTanhBackward', x, dy, options);
}

/** dx = dy · SiLU'(x) = dy · s(1 + x(1 - s)), s = sigmoid(x). */
export function siluBackward(x: Tensor, dy: Tensor, options: ActivationBackwardOptions = {}): Tensor {
  return activationBackward('silu', 'siluBackward', x, dy, options);
}

export interface SiluMulBackwardOptions extends BackwardOptions {
  /** Write dGate here (may be an input, not dUp). */
  dgate?: Tensor;
  /** Write dUp here (may be an input, not dGate). */
  dup?: Tensor;
}

/** Backward of {@link siluMul} (SwiGLU, out = silu(gate) ⊙ up): dgate = dy ⊙ up ⊙ silu'(gate), dup = dy ⊙ silu(gate). */
export function siluMulBackward(gate: Tensor, up: Tensor, dy: Tensor, options: SiluMulBackwardOptions = {}): { dgate: Tensor; dup: Tensor } {
  const op = 'siluMulBackward';
  const backend = sameBackend(op, gate, up, dy, options.dgate, options.dup);
  for (const [name, t] of [['gate', gate], ['up', up], ['dy', dy]] as const) expectDtype(op, name, t, 'f32');
  expectSameShape(op, 'up', up, 'gate', gate);
  expectSameShape(op, 'dy', dy, 'gate', gate);
  if (options.dgate && options.dgate === options.dup) throw new InvalidArgumentError(`${op}: dgate and dup must be different tensors`);
  const dgate = resolveOut(op, options.dgate, gate.shape, 'f32', backend);
  const dup = resolveOut(op, options.dup, gate.shape, 'f32', backend);
  callNative(() => backend.binding.siluMulBackward(gate.native, up.native, dy.native, dgate.native, dup.native, { reference: options.reference ?? false }));
  return { dgate, dup };
}

// ---------------------------------------------------------------- attention

export interface AttentionPrefillBackwardOptions extends BackwardOptions {
  /** As in the forward: query i sees keys j <= i only. Default false. */
  causal?: boolean;
  /** As in the forward. Default 1 / sqrt(headDim). */
  scale?: number;
  /** As in the forward: u8 [batch, seq], 0 marks a padding key (which gets dk = dv = 0). */
  keyMask?: Tensor | undefined;
  /** Outputs to write (must not overlap an input or each other); allocated when absent. */
  dq?: Tensor;
  dk?: Tensor;
  dv?: Tensor;
}

/**
 * Backward of {@link attentionPrefill} (same layout: q, dout [batch, seq, nHeads, headDim]; k, v [batch, seq,
 * nKvHeads, headDim]). The probabilities are recomputed from q and k; dk and dv of a kv head sum over the query
 * heads of its GQA group and over the queries in a fixed order. A query that sees no key gets dq = 0.
 */
export function attentionPrefillBackward(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, options: AttentionPrefillBackwardOptions = {}):
  { dq: Tensor; dk: Tensor; dv: Tensor } {
  const op = 'attentionPrefillBackward';
  const { keyMask } = options;
  const backend = sameBackend(op, q, k, v, dout, keyMask, options.dq, options.dk, options.dv);
  for (const [name, t] of [['q', q], ['k', k], ['v', v], ['dout', dout]] as const) {
    expectDtype(op, name, t, 'f32');
    expectRank(op, name, t, 4);
  }
  const [batch, seq, nHeads, headDim] = q.shape as [number, number, number, number];
  const nKvHeads = k.shape[2]!;
  const kvShape = [batch, seq, nKvHeads, headDim];
  checkShapes(sameShape(k.shape, kvShape), () =>
    `${op}: k ${formatShape(k.shape)} does not fit q ${formatShape(q.shape)}: expected [batch, seq, kvHeads, headDim] = ${formatShape(kvShape)}`);
  expectSameShape(op, 'v', v, 'k', k);
  expectSameShape(op, 'dout', dout, 'q', q);
  checkShapes(nKvHeads === 0 ? nHeads === 0 : nHeads % nKvHeads === 0, () =>
    `${op}: q ${formatShape(q.shape)} has ${nHeads} heads, not a multiple of the ${nKvHeads} kv heads of k ${formatShape(k.shape)}`);
  if (keyMask) {
    expectDtype(op, 'keyMask', keyMask, 'u8');
    checkShapes(keyMask.rank === 2 && keyMask.shape[0] === batch && keyMask.shape[1] === seq, () =>
      `${op}: keyMask ${formatShape(keyMask.shape)} must be [batch, seq] = ${formatShape([batch, seq])} for q ${formatShape(q.shape)}`);
  }
  let scale = options.scale;
  if (scale === undefined) scale = headDim > 0 ? 1 / Math.sqrt(headDim) : 1;
  else if (!Number.isFinite(scale)) throw new InvalidArgumentError(`${op}: scale must be a finite number, got ${scale}`);
  const inputs = [q, k, v, dout];
  for (const [name, t] of [['dq', options.dq], ['dk', options.dk], ['dv', options.dv]] as const) {
    if (t && inputs.includes(t)) throw new InvalidArgumentError(`${op}: ${name} ${formatShape(t.shape)} is an input; the backward cannot run in place`);
  }
  const dq = resolveOut(op, options.dq, q.shape, 'f32', backend);
  const dk = resolveOut(op, options.dk, k.shape, 'f32', backend);
  const dv = resolveOut(op, options.dv, k.shape, 'f32', backend);
  const s = scale;
  callNative(() => backend.binding.attentionPrefillBackward(q.native, k.native, v.native, dout.native, dq.native, dk.native, dv.native, {
    causal: options.causal ?? false,
    scale: s,
    keyMask: keyMask?.native ?? null,
    reference: options.reference ?? false,
  }));
  return { dq, dk, dv };
}

// ---------------------------------------------------------------- embedding, column sums, linear

export interface EmbeddingBackwardOptions extends ParamGradOptions {
  /** The table gradient [vocab, dim] to write (required with accumulate). */
  out?: Tensor;
}

/**
 * Backward of {@link embedding} (f32 gradient): dtable[ids[i]] += dy[i] for every token i in order, over a zeroed
 * [vocab, dim] table (or onto `out` with accumulate). dy is [...ids.shape, dim]. The fast path adds in f32 in token
 * order, one task per block of columns, so repeated ids sum in the same order on any thread count.
 */
export function embeddingBackward(dy: Tensor, ids: Tensor, vocab: number, options: EmbeddingBackwardOptions = {}): Tensor {
  const op = 'embeddingBackward';
  const backend = sameBackend(op, dy, ids, options.out);
  expectDtype(op, 'dy', dy, 'f32');
  expectDtype(op, 'ids', ids, 'i32');
  if (!Number.isInteger(vocab) || vocab < 0) throw new InvalidArgumentError(`${op}: vocab must be an integer >= 0, got ${vocab}`);
  checkShapes(dy.rank === ids.rank + 1 && ids.shape.every((d, i) => d === dy.shape[i]), () =>
    `${op}: dy ${formatShape(dy.shape)} must be [...ids.shape, dim] for ids ${formatShape(ids.shape)}`);
  const dim = dy.shape[dy.rank - 1]!;
  const values = ids.toArray() as Int32Array;
  for (let i = 0; i < values.length; i++) {
    const id = values[i]!;
    if (id < 0 || id >= vocab) throw new InvalidArgumentError(`${op}: ids[${i}] = ${id} is outside [0, ${vocab}) (the vocabulary size)`);
  }
  const accumulate = options.accumulate ?? false;
  if (accumulate && !options.out) throw new InvalidArgumentError(`${op}: accumulate adds to the table gradient, so pass it as \`out\``);
  const out = resolveOut(op, options.out, [vocab, dim], 'f32', backend);
  callNative(() => backend.binding.embeddingBackward(dy.native, ids.native, out.native, { accumulate, reference: options.reference ?? false }));
  return out;
}

export interface ColumnSumOptions extends ParamGradOptions {
  /** Write (or with accumulate, add) here: f32 [cols]. */
  out?: Tensor;
}

/** out[c] = Σ_rows x[..., c] over every leading dimension (a Linear's bias gradient), rows added in order in double. */
export function columnSum(x: Tensor, options: ColumnSumOptions = {}): Tensor {
  const op = 'columnSum';
  const backend = sameBackend(op, x, options.out);
  const cols = checkRowInput(op, x, 'x');
  const accumulate = options.accumulate ?? false;
  if (accumulate && !options.out) throw new InvalidArgumentError(`${op}: accumulate adds to out, so pass it`);
  const out = resolveOut(op, options.out, [cols], 'f32', backend);
  callNative(() => backend.binding.columnSum(x.native, out.native, { accumulate, reference: options.reference ?? false }));
  return out;
}

export interface LinearBackwardOptions extends ParamGradOptions {
  /** dL/dx [..., in]: allocated when absent, skipped when null. Needs an f32/f16/bf16 weight. */
  dx?: Tensor | null | undefined;
  /** dL/dweight [out, in]: allocated when absent, skipped when null. */
  dWeight?: Tensor | null | undefined;
  /** dL/dbias [out]: computed when given or when `bias` is set. */
  dBias?: Tensor | null | undefined;
  /** The layer has a bias: allocate dBias (default false unless dBias is given). */
  bias?: boolean;
}

/**
 * Backward of {@link linear} (y = x Wᵀ + b, W [out, in]) through the GEMM: dx = dy W, dW (+)= dyᵀ x (GEMM with
 * transA, beta = 1 when accumulating), db (+)= {@link columnSum}(dy). x and dy may have any leading dimensions.
 */
export function linearBackward(x: Tensor, weight: Tensor, dy: Tensor, options: LinearBackwardOptions = {}):
  { dx: Tensor | null; dWeight: Tensor | null; dBias: Tensor | null } {
  const op = 'linearBackward';
  const backend = sameBackend(op, x, weight, dy, options.dx ?? undefined, options.dWeight ?? undefined, options.dBias ?? undefined);
  const inFeatures = checkRowInput(op, x, 'x');
  expectDtype(op, 'weight', weight, ['f32', 'f16', 'bf16']);
  expectRank(op, 'weight', weight, 2);
  const [outFeatures, wIn] = weight.shape as [number, number];
  checkShapes(wIn === inFeatures, () =>
    `${op}: x ${formatShape(x.shape)} and weight ${formatShape(weight.shape)} disagree on in_features: ${inFeatures} vs ${wIn}`);
  expectDtype(op, 'dy', dy, 'f32');
  const yShape = [...x.shape.slice(0, -1), outFeatures];
  checkShapes(sameShape(dy.shape, yShape), () =>
    `${op}: dy ${formatShape(dy.shape)} must be ${formatShape(yShape)} for x ${formatShape(x.shape)} and weight ${formatShape(weight.shape)}`);
  const accumulate = options.accumulate ?? false;
  const dx = optionalOut(op, 'dx', options.dx, true, x.shape, backend, false);
  const dWeight = optionalOut(op, 'dWeight', options.dWeight, true, [outFeatures, inFeatures], backend, accumulate);
  const dBias = optionalOut(op, 'dBias', options.dBias, options.bias ?? false, [outFeatures], backend, accumulate);
  const rows = x.shape.slice(0, -1).reduce((p, d) => p * d, 1);
  const reference = options.reference ?? false;
  const views: Tensor[] = [];
  const as2d = (t: Tensor, cols: number): Tensor => {
    if (t.rank === 2) return t;
    const view = t.reshape([rows, cols]);
    views.push(view);
    return view;
  };
  try {
    const dy2 = as2d(dy, outFeatures);
    if (dx) gemm(dy2, weight, { out: as2d(dx, inFeatures), reference });
    if (dWeight) gemm(dy2, as2d(x, inFeatures), { transA: true, beta: accumulate ? 1 : 0, out: dWeight, reference });
    if (dBias) columnSum(dy2, { out: dBias, accumulate, reference });
  } finally {
    for (const view of views) view.dispose();
  }
  return { dx, dWeight, dBias };
}

/** An f32 tensor of zeros shaped like `t` on its backend (gradient buffers for accumulation). */
export function zerosLike(t: Tensor): Tensor {
  return Tensor.zeros(t.shape, 'f32', t.backend);
}

/**
 * Surrogates for speculation (design note §3.5, Table 4): a block of whole layers pruned structurally by about
 * half (LLM-Pruner style: whole key/value head groups by weight-norm importance, and whole FFN channels by
 * ‖gate_c‖·‖up_c‖·‖down_:,c‖), then recovered by least squares: o_proj is refitted on the kept heads' contexts
 * to reproduce the real attention's residual, and down_proj on the kept channels to reproduce the real layer's
 * output (ridge, closed form; the paper's LoRA recovery is the gradient-descent alternative). The layers are fitted
 * in order, each on the surrogate's own input, so errors do not compound unseen.
 *
 * The pruned layers are ordinary Llama layers with fewer heads and channels: the same forward runs them, and the
 * staged engine can run them as a model whose config has the surrogate's head and channel counts.
 *
 * A component surrogate (buildComponentSurrogate) prunes one half of one layer, for a block that holds only a
 * layer's attention or only its FFN: the attention half loses head groups and refits o_proj so that x + attn(x)
 * matches the real layer's residual after attention; the FFN half loses channels and refits down_proj so that
 * mid + ffn(mid) matches the real layer's output.
 */
import type { ArchSig } from '../planner/arch.js';
import { ZooInvalidError } from '../planner/errors.js';
import type { CalibrationData } from './equivalence.js';
import { type Mat, mat, matmulT, meanRowCosine, ridge, transpose, vstack } from './linalg.js';
import { type LlamaWeights, attentionContext, embed, ffnActivations, layerTrace, llamaLayerNames, rmsNorm, runLayers, weight } from './llama.js';

export interface SurrogateOptions {
  /** Fraction of head groups and FFN channels kept; default 0.5. */
  keep?: number;
  /** Ridge strength relative to the mean squared feature; default 1e-2. */
  lambda?: number;
  /** Skip the least-squares recovery (the plain pruned block, for comparison). */
  recover?: boolean;
  /** Forward repetitions when timing the block against the surrogate; default 5. */
  timingReps?: number;
}

/** The half of a layer a component block holds. */
export type SurrogateComponent = 'attention' | 'ffn';

export interface Surrogate {
  /** Layers [from, to) of the source model (a component surrogate: its layer, to = from + 1). */
  from: number;
  to: number;
  /** The surrogate's shape: the source's with fewer heads and channels. */
  archSig: ArchSig;
  /** The pruned (and recovered) layer tensors, by the source's tensor names (norm gains as 1×n). */
  tensors: Map<string, Mat>;
  /** For a component surrogate, the half of layer `from` it replaces; null for whole layers [from, to). */
  component: SurrogateComponent | null;
  /** Kept KV head groups, one list per layer whose attention the surrogate prunes (none for an FFN surrogate). */
  keptKvGroups: number[][];
  /** Kept FFN channels, one list per layer whose FFN the surrogate prunes (none for an attention surrogate). */
  keptChannels: number[][];
  /** Parameters of the layers (or the component) replaced, and of the surrogate's tensors. */
  params: { block: number; surrogate: number };
  /** 1 − surrogate params / block params. */
  prunedFraction: number;
  /**
   * Mean cosine of the surrogate's output hidden states against the block's on the evaluation data (A18), both from
   * the same real input (for an attention surrogate the output is the residual after attention, `mid`).
   */
  cosine: number;
  /** Median block forward time over the surrogate's (float64 reference forward, this machine). */
  speedup: number;
}

function rowsOf(m: Mat, rows: readonly number[]): Mat {
  const out = mat(rows.length, m.cols);
  rows.forEach((r, i) => out.data.set(m.data.subarray(r * m.cols, (r + 1) * m.cols), i * m.cols));
  return out;
}

function colsOf(m: Mat, cols: readonly number[]): Mat {
  const out = mat(m.rows, cols.length);
  for (let r = 0; r < m.rows; r++) cols.forEach((c, i) => (out.data[r * cols.length + i] = m.data[r * m.cols + c]!));
  return out;
}

function rowNorm2(m: Mat, r: number): number {
  let s = 0;
  for (let c = 0; c < m.cols; c++) s += m.data[r * m.cols + c]! ** 2;
  return s;
}

function colNorm2(m: Mat, c: number): number {
  let s = 0;
  for (let r = 0; r < m.rows; r++) s += m.data[r * m.cols + c]! ** 2;
  return s;
}

/** Indices of the `k` largest scores, in ascending index order (ties: the lower index). */
function topK(scores: readonly number[], k: number): number[] {
  return scores.map((s, i) => [s, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, k).map(([, i]) => i).sort((a, b) => a - b);
}

function meanSquare(m: Mat): number {
  let s = 0;
  for (const v of m.data) s += v * v;
  return m.data.length === 0 ? 0 : s / m.data.length;
}

function sub(a: Mat, b: Mat): Mat {
  const out = mat(a.rows, a.cols);
  for (let i = 0; i < a.data.length; i++) out.data[i] = a.data[i]! - b.data[i]!;
  return out;
}

function paramsOf(mats: Iterable<Mat>): number {
  let n = 0;
  for (const m of mats) n += m.data.length;
  return n;
}

/** a + b, a new matrix. */
function plus(a: Mat, b: Mat): Mat {
  const out = mat(a.rows, a.cols, a.data);
  for (let i = 0; i < out.data.length; i++) out.data[i]! += b.data[i]!;
  return out;
}

interface Settings {
  keep: number;
  lambdaRel: number;
  recover: boolean;
  reps: number;
}

function settingsOf(calibration: CalibrationData, evaluation: CalibrationData, options: SurrogateOptions): Settings {
  const keep = options.keep ?? 0.5;
  if (!(keep > 0 && keep <= 1)) throw new ZooInvalidError(`keep must be in (0, 1], got ${keep}`);
  if (calibration.length === 0 || evaluation.length === 0) throw new ZooInvalidError('a surrogate needs calibration and evaluation sequences');
  const reps = options.timingReps ?? 5;
  if (!Number.isInteger(reps) || reps < 1) throw new ZooInvalidError(`timingReps must be a positive integer, got ${reps}`);
  return { keep, lambdaRel: options.lambda ?? 1e-2, recover: options.recover ?? true, reps };
}

/** Median wall time of `reps` runs of fn, in ms. */
function medianTime(reps: number, fn: () => void): number {
  const t: number[] = [];
  for (let r = 0; r < reps; r++) {
    const s = performance.now();
    fn();
    t.push(performance.now() - s);
  }
  return t.sort((x, y) => x - y)[Math.floor(t.length / 2)]!;
}

type LayerNames = ReturnType<typeof llamaLayerNames>;

/** The attention half's tensors of layer l (projections and input norm). */
function attentionTensors(w: LlamaWeights, n: LayerNames): { q: Mat; k: Mat; v: Mat; o: Mat; norm: Mat } {
  return { q: weight(w, n.q), k: weight(w, n.k), v: weight(w, n.v), o: weight(w, n.o), norm: weight(w, n.inputNorm) };
}

/** The FFN half's tensors of layer l (projections and post-attention norm). */
function ffnTensors(w: LlamaWeights, n: LayerNames): { gate: Mat; up: Mat; down: Mat; norm: Mat } {
  return { gate: weight(w, n.gate), up: weight(w, n.up), down: weight(w, n.down), norm: weight(w, n.postNorm) };
}

/** Kept head groups from keep, at least one. */
function keptGroupCount(a: ArchSig, keep: number): number {
  return Math.max(1, Math.round(a.numKvHeads * keep));
}

/** Kept FFN channels from keep, at least one. */
function keptChannelCount(a: ArchSig, keep: number): number {
  return Math.max(1, Math.round(a.intermediateSize * keep));
}

/**
 * Head groups by weight norm (a KV head and the query heads that read it): the `count` best, and the pruned attention
 * tensors (q, k, v rows and o columns of the kept heads, the input norm as it is) by the source's names.
 */
function pruneAttention(a: ArchSig, n: LayerNames, W: ReturnType<typeof attentionTensors>, count: number): { groups: number[]; tensors: [string, Mat][] } {
  const hd = a.headDim;
  const group = a.numHeads / a.numKvHeads;
  const groupScore = Array.from({ length: a.numKvHeads }, (_, g) => {
    let s = 0;
    for (let r = g * hd; r < (g + 1) * hd; r++) s += rowNorm2(W.k, r) + rowNorm2(W.v, r);
    for (let h = g * group; h < (g + 1) * group; h++) for (let r = h * hd; r < (h + 1) * hd; r++) s += rowNorm2(W.q, r) + colNorm2(W.o, r);
    return s;
  });
  const groups = topK(groupScore, count);
  const qRows = groups.flatMap((g) => Array.from({ length: group * hd }, (_, i) => g * group * hd + i));
  const kvRows = groups.flatMap((g) => Array.from({ length: hd }, (_, i) => g * hd + i));
  return {
    groups,
    tensors: [
      [n.q, rowsOf(W.q, qRows)],
      [n.k, rowsOf(W.k, kvRows)],
      [n.v, rowsOf(W.v, kvRows)],
      [n.o, colsOf(W.o, qRows)],
      [n.inputNorm, W.norm],
    ],
  };
}

/** FFN channels by ‖gate_c‖·‖up_c‖·‖down_:,c‖: the `count` best, and the pruned FFN tensors (the norm as it is). */
function pruneFfn(a: ArchSig, n: LayerNames, W: ReturnType<typeof ffnTensors>, count: number): { channels: number[]; tensors: [string, Mat][] } {
  const channelScore = Array.from({ length: a.intermediateSize }, (_, c) => Math.sqrt(rowNorm2(W.gate, c) * rowNorm2(W.up, c) * colNorm2(W.down, c)));
  const channels = topK(channelScore, count);
  return {
    channels,
    tensors: [
      [n.gate, rowsOf(W.gate, channels)],
      [n.up, rowsOf(W.up, channels)],
      [n.down, colsOf(W.down, channels)],
      [n.postNorm, W.norm],
    ],
  };
}

/**
 * Recovers o_proj of layer l in `pw` (the pruned weights; its o is replaced): the kept heads' contexts on `inputs`
 * → `targetMids` − inputs, by ridge. Returns the recovered residuals after attention, inputs + ctx·oᵀ.
 */
function recoverAttention(pw: LlamaWeights, l: number, inputs: readonly Mat[], targetMids: readonly Mat[], lambdaRel: number): Mat[] {
  const n = llamaLayerNames(l);
  const ctx = inputs.map((x) => attentionContext(pw, l, rmsNorm(x, weight(pw, n.inputNorm), pw.arch.rmsNormEps)));
  const ctxAll = vstack(ctx);
  const target = vstack(targetMids.map((m, i) => sub(m, inputs[i]!)));
  pw.tensors.set(n.o, transpose(ridge(ctxAll, target, lambdaRel * meanSquare(ctxAll))));
  return inputs.map((x, i) => plus(matmulT(ctx[i]!, weight(pw, n.o)), x));
}

/** Recovers down_proj of layer l in `pw` (replaced): the kept channels' activations on `mids` → `targetOuts` − mids. */
function recoverFfn(pw: LlamaWeights, l: number, mids: readonly Mat[], targetOuts: readonly Mat[], lambdaRel: number): void {
  const n = llamaLayerNames(l);
  const acts = mids.map((m) => ffnActivations(pw, l, rmsNorm(m, weight(pw, n.postNorm), pw.arch.rmsNormEps)));
  const actAll = vstack(acts);
  const target = vstack(targetOuts.map((o, i) => sub(o, mids[i]!)));
  pw.tensors.set(n.down, transpose(ridge(actAll, target, lambdaRel * meanSquare(actAll))));
}

/** The attention half of layer l on h: h + o(attention(input_norm(h))), the residual after attention (a new matrix). */
export function runAttentionHalf(w: LlamaWeights, l: number, h: Mat): Mat {
  const n = llamaLayerNames(l);
  const ctx = attentionContext(w, l, rmsNorm(h, weight(w, n.inputNorm), w.arch.rmsNormEps));
  return plus(matmulT(ctx, weight(w, n.o)), h);
}

/** The FFN half of layer l on the residual after attention: mid + down(silu(gate)·up)(post_norm(mid)) (a new matrix). */
export function runFfnHalf(w: LlamaWeights, l: number, mid: Mat): Mat {
  const n = llamaLayerNames(l);
  return plus(matmulT(ffnActivations(w, l, rmsNorm(mid, weight(w, n.postNorm), w.arch.rmsNormEps)), weight(w, n.down)), mid);
}

/** Runs a component surrogate (or the real component) on its input: `runAttentionHalf` or `runFfnHalf`. */
export function runComponentSurrogate(s: LlamaWeights, layer: number, component: SurrogateComponent, h: Mat): Mat {
  return component === 'attention' ? runAttentionHalf(s, layer, h) : runFfnHalf(s, layer, h);
}

/** Builds the surrogate of layers [from, to) of `w`, fitted on `calibration`, judged on `evaluation`. */
export function buildSurrogate(w: LlamaWeights, range: { from: number; to: number }, calibration: CalibrationData, evaluation: CalibrationData, options: SurrogateOptions = {}): Surrogate {
  const { from, to } = range;
  const a = w.arch;
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from >= to || to > a.numLayers) {
    throw new ZooInvalidError(`layers [${from}, ${to}) are not a non-empty range within [0, ${a.numLayers})`);
  }
  const { keep, lambdaRel, recover, reps } = settingsOf(calibration, evaluation, options);
  const group = a.numHeads / a.numKvHeads;
  const keptGroupsN = keptGroupCount(a, keep);
  const keptChannelsN = keptChannelCount(a, keep);

  // Real block inputs (the hidden states entering layer `from`) and the surrogate's own running input.
  const realIn = calibration.map((seq) => runLayers(w, embed(w, seq), 0, from));
  let realX = realIn.map((x) => x);
  let surX = realIn.map((x) => x);

  const tensors = new Map<string, Mat>();
  const keptKvGroups: number[][] = [];
  const keptChannels: number[][] = [];
  let blockParams = 0;
  for (let l = from; l < to; l++) {
    const n = llamaLayerNames(l);
    const WA = attentionTensors(w, n);
    const WF = ffnTensors(w, n);
    blockParams += paramsOf([...Object.values(WA), ...Object.values(WF)]);
    const attn = pruneAttention(a, n, WA, keptGroupsN);
    const ffn = pruneFfn(a, n, WF, keptChannelsN);
    keptKvGroups.push(attn.groups);
    keptChannels.push(ffn.channels);
    const pw: LlamaWeights = { arch: w.arch, tensors: new Map([...attn.tensors, ...ffn.tensors]) };

    // The real layer on the real input: the targets.
    const real = realX.map((x) => layerTrace(w, l, x));
    if (recover) {
      // o_proj on the surrogate's input → the real residual after attention; down_proj on the surrogate's residual
      // → the real layer output.
      const mids = recoverAttention(pw, l, surX, real.map((r) => r.mid), lambdaRel);
      recoverFfn(pw, l, mids, real.map((r) => r.out), lambdaRel);
    }
    for (const [k, v] of pw.tensors) tensors.set(k, v);
    surX = surX.map((x) => layerTrace(pw, l, x).out);
    realX = real.map((r) => r.out);
  }

  const sw: LlamaWeights = { arch: w.arch, tensors };
  // Judge on held-out sequences: block output against surrogate output from the same real input.
  let cos = 0;
  const evalIn = evaluation.map((seq) => runLayers(w, embed(w, seq), 0, from));
  for (const x of evalIn) cos += meanRowCosine(runLayers(w, x, from, to), runSurrogate(sw, x, from, to));
  cos /= evalIn.length;

  const tBlock = medianTime(reps, () => evalIn.forEach((x) => runLayers(w, x, from, to)));
  const tSur = medianTime(reps, () => evalIn.forEach((x) => runSurrogate(sw, x, from, to)));

  const surrogateParams = paramsOf(tensors.values());
  return {
    from,
    to,
    archSig: { ...a, numHeads: keptGroupsN * group, numKvHeads: keptGroupsN, intermediateSize: keptChannelsN },
    tensors,
    component: null,
    keptKvGroups,
    keptChannels,
    params: { block: blockParams, surrogate: surrogateParams },
    prunedFraction: 1 - surrogateParams / blockParams,
    cosine: cos,
    speedup: tBlock / Math.max(tSur, 1e-9),
  };
}

/**
 * Builds the surrogate of one half of one layer of `w` (a component block: `attn(l)` or `ffn(l)`), fitted on
 * `calibration`, judged on `evaluation`. Attention: the kept head groups' q, k, v, o (o recovered so that
 * x + attn(x) matches the real layer's residual after attention) and the input norm; its archSig has fewer heads.
 * FFN: the kept channels' gate, up, down (down recovered so that mid + ffn(mid) matches the real layer's output
 * from the real mid) and the post-attention norm; its archSig has fewer channels. `from` = layer, `to` = layer + 1;
 * params, the pruned fraction, the cosine and the speedup are the component's.
 */
export function buildComponentSurrogate(
  w: LlamaWeights,
  target: { layer: number; component: SurrogateComponent },
  calibration: CalibrationData,
  evaluation: CalibrationData,
  options: SurrogateOptions = {},
): Surrogate {
  const { layer: l, component } = target;
  const a = w.arch;
  if (!Number.isInteger(l) || l < 0 || l >= a.numLayers) throw new ZooInvalidError(`layer ${l} is not a layer within [0, ${a.numLayers})`);
  if (component !== 'attention' && component !== 'ffn') throw new ZooInvalidError(`a component surrogate replaces 'attention' or 'ffn', got ${String(component)}`);
  const { keep, lambdaRel, recover, reps } = settingsOf(calibration, evaluation, options);
  const n = llamaLayerNames(l);

  // The component's real input (x entering layer l for attention, the real mid for the FFN) and real output.
  const io = (seqs: CalibrationData) =>
    seqs.map((seq) => {
      const x = runLayers(w, embed(w, seq), 0, l);
      const t = layerTrace(w, l, x);
      return component === 'attention' ? { input: x, output: t.mid } : { input: t.mid, output: t.out };
    });
  const cal = io(calibration);

  let archSig: ArchSig;
  let blockTensors: Mat[];
  const keptKvGroups: number[][] = [];
  const keptChannels: number[][] = [];
  let pw: LlamaWeights;
  if (component === 'attention') {
    const W = attentionTensors(w, n);
    blockTensors = Object.values(W);
    const count = keptGroupCount(a, keep);
    const pruned = pruneAttention(a, n, W, count);
    keptKvGroups.push(pruned.groups);
    archSig = { ...a, numHeads: count * (a.numHeads / a.numKvHeads), numKvHeads: count };
    pw = { arch: w.arch, tensors: new Map(pruned.tensors) };
    if (recover) recoverAttention(pw, l, cal.map((c) => c.input), cal.map((c) => c.output), lambdaRel);
  } else {
    const W = ffnTensors(w, n);
    blockTensors = Object.values(W);
    const count = keptChannelCount(a, keep);
    const pruned = pruneFfn(a, n, W, count);
    keptChannels.push(pruned.channels);
    archSig = { ...a, intermediateSize: count };
    pw = { arch: w.arch, tensors: new Map(pruned.tensors) };
    if (recover) recoverFfn(pw, l, cal.map((c) => c.input), cal.map((c) => c.output), lambdaRel);
  }

  // Judge on held-out sequences: the real component's output against the surrogate's from the same real input.
  const evalIo = io(evaluation);
  let cos = 0;
  for (const { input, output } of evalIo) cos += meanRowCosine(output, runComponentSurrogate(pw, l, component, input));
  cos /= evalIo.length;

  const tBlock = medianTime(reps, () => evalIo.forEach((e) => runComponentSurrogate(w, l, component, e.input)));
  const tSur = medianTime(reps, () => evalIo.forEach((e) => runComponentSurrogate(pw, l, component, e.input)));

  const blockParams = paramsOf(blockTensors);
  const surrogateParams = paramsOf(pw.tensors.values());
  return {
    from: l,
    to: l + 1,
    archSig,
    tensors: pw.tensors,
    component,
    keptKvGroups,
    keptChannels,
    params: { block: blockParams, surrogate: surrogateParams },
    prunedFraction: 1 - surrogateParams / blockParams,
    cosine: cos,
    speedup: tBlock / Math.max(tSur, 1e-9),
  };
}

/** Runs a surrogate's layers [from, to) on a hidden state. */
export function runSurrogate(s: LlamaWeights, h: Mat, from: number, to: number): Mat {
  let x = h;
  for (let l = from; l < to; l++) x = layerTrace(s, l, x).out;
  return x;
}

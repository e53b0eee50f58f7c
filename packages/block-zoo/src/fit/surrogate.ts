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

export interface Surrogate {
  /** Layers [from, to) of the source model. */
  from: number;
  to: number;
  /** The surrogate's shape: the source's with fewer heads and channels. */
  archSig: ArchSig;
  /** The pruned (and recovered) layer tensors, by the source's tensor names. */
  tensors: Map<string, Mat>;
  keptKvGroups: number[][];
  keptChannels: number[][];
  params: { block: number; surrogate: number };
  /** 1 − surrogate params / block params. */
  prunedFraction: number;
  /** Mean cosine of the surrogate's output hidden states against the block's on the evaluation data (A18). */
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

/** Builds the surrogate of layers [from, to) of `w`, fitted on `calibration`, judged on `evaluation`. */
export function buildSurrogate(w: LlamaWeights, range: { from: number; to: number }, calibration: CalibrationData, evaluation: CalibrationData, options: SurrogateOptions = {}): Surrogate {
  const { from, to } = range;
  const a = w.arch;
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from >= to || to > a.numLayers) {
    throw new ZooInvalidError(`layers [${from}, ${to}) are not a non-empty range within [0, ${a.numLayers})`);
  }
  const keep = options.keep ?? 0.5;
  if (!(keep > 0 && keep <= 1)) throw new ZooInvalidError(`keep must be in (0, 1], got ${keep}`);
  if (calibration.length === 0 || evaluation.length === 0) throw new ZooInvalidError('a surrogate needs calibration and evaluation sequences');
  const lambdaRel = options.lambda ?? 1e-2;
  const recover = options.recover ?? true;
  const hd = a.headDim;
  const group = a.numHeads / a.numKvHeads;
  const keptGroupsN = Math.max(1, Math.round(a.numKvHeads * keep));
  const keptChannelsN = Math.max(1, Math.round(a.intermediateSize * keep));

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
    const W = { q: weight(w, n.q), k: weight(w, n.k), v: weight(w, n.v), o: weight(w, n.o), gate: weight(w, n.gate), up: weight(w, n.up), down: weight(w, n.down) };
    blockParams += paramsOf([...Object.values(W), weight(w, n.inputNorm), weight(w, n.postNorm)]);

    // Head groups by weight norm: a KV head and the query heads that read it.
    const groupScore = Array.from({ length: a.numKvHeads }, (_, g) => {
      let s = 0;
      for (let r = g * hd; r < (g + 1) * hd; r++) s += rowNorm2(W.k, r) + rowNorm2(W.v, r);
      for (let h = g * group; h < (g + 1) * group; h++) for (let r = h * hd; r < (h + 1) * hd; r++) s += rowNorm2(W.q, r) + colNorm2(W.o, r);
      return s;
    });
    const groups = topK(groupScore, keptGroupsN);
    const qRows = groups.flatMap((g) => Array.from({ length: group * hd }, (_, i) => g * group * hd + i));
    const kvRows = groups.flatMap((g) => Array.from({ length: hd }, (_, i) => g * hd + i));
    const channelScore = Array.from({ length: a.intermediateSize }, (_, c) => Math.sqrt(rowNorm2(W.gate, c) * rowNorm2(W.up, c) * colNorm2(W.down, c)));
    const channels = topK(channelScore, keptChannelsN);
    keptKvGroups.push(groups);
    keptChannels.push(channels);

    const pruned = new Map<string, Mat>([
      [n.q, rowsOf(W.q, qRows)],
      [n.k, rowsOf(W.k, kvRows)],
      [n.v, rowsOf(W.v, kvRows)],
      [n.o, colsOf(W.o, qRows)],
      [n.gate, rowsOf(W.gate, channels)],
      [n.up, rowsOf(W.up, channels)],
      [n.down, colsOf(W.down, channels)],
      [n.inputNorm, weight(w, n.inputNorm)],
      [n.postNorm, weight(w, n.postNorm)],
    ]);
    const pw: LlamaWeights = { arch: w.arch, tensors: pruned };

    // The real layer on the real input: the targets.
    const real = realX.map((x) => layerTrace(w, l, x));
    if (recover) {
      // o_proj: the kept heads' contexts on the surrogate's input → the real residual after attention.
      const ctx = surX.map((x) => attentionContext(pw, l, rmsNorm(x, weight(w, n.inputNorm), a.rmsNormEps)));
      const ctxAll = vstack(ctx);
      const attnTarget = vstack(real.map((r, i) => sub(r.mid, surX[i]!)));
      pruned.set(n.o, transpose(ridge(ctxAll, attnTarget, lambdaRel * meanSquare(ctxAll))));
      // down_proj: the kept channels on the surrogate's residual → the real layer output.
      const mids = surX.map((x, i) => {
        const m = matmulT(ctx[i]!, pruned.get(n.o)!);
        for (let j = 0; j < m.data.length; j++) m.data[j]! += x.data[j]!;
        return m;
      });
      const acts = mids.map((m) => ffnActivations(pw, l, rmsNorm(m, weight(w, n.postNorm), a.rmsNormEps)));
      const actAll = vstack(acts);
      const ffnTarget = vstack(real.map((r, i) => sub(r.out, mids[i]!)));
      pruned.set(n.down, transpose(ridge(actAll, ffnTarget, lambdaRel * meanSquare(actAll))));
    }
    for (const [k, v] of pruned) tensors.set(k, v);
    surX = surX.map((x) => layerTrace(pw, l, x).out);
    realX = real.map((r) => r.out);
  }

  const sw: LlamaWeights = { arch: w.arch, tensors };
  // Judge on held-out sequences: block output against surrogate output from the same real input.
  let cos = 0;
  const evalIn = evaluation.map((seq) => runLayers(w, embed(w, seq), 0, from));
  for (const x of evalIn) cos += meanRowCosine(runLayers(w, x, from, to), runSurrogate(sw, x, from, to));
  cos /= evalIn.length;

  const reps = options.timingReps ?? 5;
  const time = (fn: () => void) => {
    const t: number[] = [];
    for (let r = 0; r < reps; r++) {
      const s = performance.now();
      fn();
      t.push(performance.now() - s);
    }
    return t.sort((x, y) => x - y)[Math.floor(t.length / 2)]!;
  };
  const tBlock = time(() => evalIn.forEach((x) => runLayers(w, x, from, to)));
  const tSur = time(() => evalIn.forEach((x) => runSurrogate(sw, x, from, to)));

  const surrogateParams = paramsOf(tensors.values());
  return {
    from,
    to,
    archSig: { ...a, numHeads: keptGroupsN * group, numKvHeads: keptGroupsN, intermediateSize: keptChannelsN },
    tensors,
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

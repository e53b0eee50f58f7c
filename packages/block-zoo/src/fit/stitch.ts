/**
 * Stitching blocks (design note §3.4, algorithm 5.3's CPU path): one Linear (dIn + 1 → dOut) mapping a hidden state
 * of the source family after i layers to the target family's after j layers, the extra input being the stitching
 * position (i + j) / (L_source + L_target). Fitted in closed form by ridge regression of h_T(j) on [h_S(i); pos]
 * over the calibration tokens and every stitching point, in float64.
 */
import { ZooInvalidError } from '../planner/errors.js';
import type { CalibrationData } from './equivalence.js';
import { cosine, type Mat, mat, matmul, ridge, vstack } from './linalg.js';
import { type LlamaWeights, hiddenStates, logitLens, runLayers } from './llama.js';

export interface StitchPoint {
  /** Layers of the source run before the stitch (0 = after the embedding). */
  i: number;
  /** Layers of the target the stitched state stands for (the tail runs layers [j, L_target)). */
  j: number;
}

export interface FittedStitch {
  dIn: number;
  dOut: number;
  sourceLayers: number;
  targetLayers: number;
  /** [(dIn + 1), dOut]: row dIn is the position feature's weights. h_T ≈ [h_S, pos] · weight. */
  weight: Mat;
  /** Ridge strength relative to the mean squared input feature. */
  lambda: number;
  samples: number;
  fitMillis: number;
}

export function positionFeature(i: number, j: number, sourceLayers: number, targetLayers: number): number {
  return (i + j) / (sourceLayers + targetLayers);
}

function checkPoint(p: StitchPoint, s: LlamaWeights, t: LlamaWeights): void {
  if (!Number.isInteger(p.i) || p.i < 0 || p.i > s.arch.numLayers) throw new ZooInvalidError(`stitch point i = ${p.i} is outside [0, ${s.arch.numLayers}]`);
  if (!Number.isInteger(p.j) || p.j < 0 || p.j > t.arch.numLayers) throw new ZooInvalidError(`stitch point j = ${p.j} is outside [0, ${t.arch.numLayers}]`);
}

function withPosition(h: Mat, pos: number): Mat {
  const out = mat(h.rows, h.cols + 1);
  for (let r = 0; r < h.rows; r++) {
    out.data.set(h.data.subarray(r * h.cols, (r + 1) * h.cols), r * out.cols);
    out.data[r * out.cols + h.cols] = pos;
  }
  return out;
}

/** Fits the stitch source → target over `points` and the calibration data. */
export function fitStitch(source: LlamaWeights, target: LlamaWeights, points: readonly StitchPoint[], data: CalibrationData, options: { lambda?: number } = {}): FittedStitch {
  if (points.length === 0) throw new ZooInvalidError('a stitch needs at least one stitching point');
  if (data.length === 0 || data.some((s) => s.length === 0)) throw new ZooInvalidError('calibration data must hold at least one non-empty sequence');
  for (const p of points) checkPoint(p, source, target);
  const lambda = options.lambda ?? 1e-8;
  const started = performance.now();
  const xs: Mat[] = [];
  const ys: Mat[] = [];
  for (const seq of data) {
    const hs = hiddenStates(source, seq);
    const ht = hiddenStates(target, seq);
    for (const p of points) {
      xs.push(withPosition(hs[p.i]!, positionFeature(p.i, p.j, source.arch.numLayers, target.arch.numLayers)));
      ys.push(ht[p.j]!);
    }
  }
  const x = vstack(xs);
  const dIn = source.arch.hiddenSize;
  if (x.rows < dIn + 1) throw new ZooInvalidError(`a ${dIn}+1 → ${target.arch.hiddenSize} stitch needs at least ${dIn + 1} samples, the data gives ${x.rows}`);
  // λ is relative to the mean squared hidden feature, so it means the same shrinkage at any activation scale.
  let ms = 0;
  for (let r = 0; r < x.rows; r++) for (let c = 0; c < dIn; c++) ms += x.data[r * x.cols + c]! ** 2;
  ms /= x.rows * dIn;
  const weight = ridge(x, vstack(ys), lambda * ms, { unpenalised: [dIn] });
  return {
    dIn,
    dOut: target.arch.hiddenSize,
    sourceLayers: source.arch.numLayers,
    targetLayers: target.arch.numLayers,
    weight,
    lambda,
    samples: x.rows,
    fitMillis: performance.now() - started,
  };
}

/** The stitch on source hidden states [T, dIn] at point (i, j): [T, dOut]. */
export function applyStitch(stitch: FittedStitch, h: Mat, point: StitchPoint): Mat {
  if (h.cols !== stitch.dIn) throw new ZooInvalidError(`the stitch takes ${stitch.dIn}-wide states, got ${h.cols}`);
  return matmul(withPosition(h, positionFeature(point.i, point.j, stitch.sourceLayers, stitch.targetLayers)), stitch.weight);
}

/**
 * Table 3's quality metric: the LM-head cosine of the stitched chain (source layers [0, i), the stitch, target
 * layers [j, L)) against the target model alone, averaged over every position of the data.
 */
export function stitchedCosine(stitch: FittedStitch, source: LlamaWeights, target: LlamaWeights, point: StitchPoint, data: CalibrationData): number {
  checkPoint(point, source, target);
  let sum = 0;
  let count = 0;
  for (const seq of data) {
    const head = hiddenStates(source, seq)[point.i]!;
    const tail = runLayers(target, applyStitch(stitch, head, point), point.j, target.arch.numLayers);
    const got = logitLens(target, tail);
    const want = logitLens(target, hiddenStates(target, seq)[target.arch.numLayers]!);
    for (let t = 0; t < got.rows; t++) sum += cosine(got.data, want.data, t * got.cols, t * want.cols, got.cols);
    count += got.rows;
  }
  return sum / count;
}

/** The stitch as a Linear weight in HF layout [dOut, dIn + 1], f32, for the zoo's tensor store. */
export function stitchTensor(stitch: FittedStitch): { name: string; dtype: 'f32'; shape: [number, number]; data: Float32Array } {
  const { weight: w } = stitch;
  const data = new Float32Array(w.cols * w.rows);
  for (let r = 0; r < w.rows; r++) for (let c = 0; c < w.cols; c++) data[c * w.rows + r] = w.data[r * w.cols + c]!;
  return { name: 'stitch.linear.weight', dtype: 'f32', shape: [w.cols, w.rows], data };
}

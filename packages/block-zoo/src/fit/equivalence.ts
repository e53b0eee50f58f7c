/**
 * The equivalence score (design note §3.3, algorithm 5.2): feed the same token ids through two models, read each
 * one's hidden state at the segment end through its own final norm and LM head (the logit lens), and average the
 * cosine of the two vocabulary distributions over every position of every sequence. Works across hidden sizes
 * because both sides live in vocabulary space; needs a shared vocabulary.
 *
 * The §8.1 rules for fixtures: random weights give near-uniform distributions that score ≈ 1 against anything, so
 * a fixture must be peaky (logit standard deviation ≈ 3–6, {@link logitStd}), and an unrelated model (a negative
 * control) must score below the threshold ({@link checkNegativeControl}) before any score is trusted.
 */
import { ZooInvalidError } from '../planner/errors.js';
import { jsonHash } from '../planner/ids.js';
import { DEFAULT_EQUIVALENCE_THRESHOLD } from '../planner/zoo.js';
import { cosine, type Mat } from './linalg.js';
import { type LlamaWeights, headLogits, hiddenStates, logitLens, runLayers } from './llama.js';

/** Calibration token sequences (the same ids go into both models). */
export type CalibrationData = readonly (readonly number[])[];

/** The hash an equivalence edge records for its calibration data (design note A29). */
export function calibrationHash(data: CalibrationData): string {
  return jsonHash(data);
}

function checkData(data: CalibrationData): void {
  if (data.length === 0 || data.some((s) => s.length === 0)) throw new ZooInvalidError('calibration data must hold at least one non-empty sequence');
}

function checkVocab(a: LlamaWeights, b: LlamaWeights): void {
  if (a.arch.vocabSize !== b.arch.vocabSize) {
    throw new ZooInvalidError(`the logit lens needs a shared vocabulary: ${a.arch.vocabSize} vs ${b.arch.vocabSize} tokens`);
  }
}

/** Mean row cosine of two probability matrices. */
function meanCosine(pa: Mat, pb: Mat): { sum: number; count: number } {
  let sum = 0;
  for (let t = 0; t < pa.rows; t++) sum += cosine(pa.data, pb.data, t * pa.cols, t * pb.cols, pa.cols);
  return { sum, count: pa.rows };
}

/**
 * Logit-lens cosine of A after `layerA` layers against B after `layerB` layers (0 = the embeddings; the default,
 * numLayers, is the whole model). Symmetric, and exactly 1 for identical models.
 */
export function vocabCosine(a: LlamaWeights, b: LlamaWeights, data: CalibrationData, options: { layerA?: number; layerB?: number } = {}): number {
  checkData(data);
  checkVocab(a, b);
  const la = options.layerA ?? a.arch.numLayers;
  const lb = options.layerB ?? b.arch.numLayers;
  for (const [w, l, side] of [[a, la, 'layerA'], [b, lb, 'layerB']] as const) {
    if (!Number.isInteger(l) || l < 0 || l > w.arch.numLayers) throw new ZooInvalidError(`${side} ${l} is outside [0, ${w.arch.numLayers}]`);
  }
  let sum = 0;
  let count = 0;
  for (const seq of data) {
    const ha = hiddenStates(a, seq)[la]!;
    const hb = hiddenStates(b, seq)[lb]!;
    const r = meanCosine(logitLens(a, ha), logitLens(b, hb));
    sum += r.sum;
    count += r.count;
  }
  return sum / count;
}

/**
 * Per-layer scores of a same-shape model against its base (the input of the FF branch of lazy partitioning).
 *
 * - 'cumulative' (the paper's, default): entry l compares each model's own chain through layer l, so a layer's
 *   score also carries every earlier layer's drift.
 * - 'substitution' (the note's stricter mode, algorithm 5.2): entry l feeds the base's hidden state entering layer
 *   l into layer l of both models and compares the outputs through the base's head: the swap actually performed
 *   when one layer stands in for the other.
 */
export function layerScores(base: LlamaWeights, model: LlamaWeights, data: CalibrationData, options: { mode?: 'cumulative' | 'substitution' } = {}): number[] {
  checkData(data);
  checkVocab(base, model);
  if (base.arch.numLayers !== model.arch.numLayers || base.arch.hiddenSize !== model.arch.hiddenSize) {
    throw new ZooInvalidError(`layer scores need the same shape: ${base.arch.numLayers}×${base.arch.hiddenSize} vs ${model.arch.numLayers}×${model.arch.hiddenSize}`);
  }
  const mode = options.mode ?? 'cumulative';
  const L = base.arch.numLayers;
  const sums = new Float64Array(L);
  let count = 0;
  for (const seq of data) {
    const hb = hiddenStates(base, seq);
    if (mode === 'cumulative') {
      const hm = hiddenStates(model, seq);
      for (let l = 0; l < L; l++) sums[l]! += meanCosine(logitLens(base, hb[l + 1]!), logitLens(model, hm[l + 1]!)).sum;
    } else {
      for (let l = 0; l < L; l++) sums[l]! += meanCosine(logitLens(base, hb[l + 1]!), logitLens(base, runLayers(model, hb[l]!, l, l + 1))).sum;
    }
    count += seq.length;
  }
  return Array.from(sums, (s) => s / count);
}

/** Scores of proportional-depth groups of two models (cross-size siblings): cosine at each group's end. */
export function groupScores(
  a: LlamaWeights,
  b: LlamaWeights,
  groups: readonly { a: { from: number; to: number }; b: { from: number; to: number } }[],
  data: CalibrationData,
): { a: { from: number; to: number }; b: { from: number; to: number }; score: number }[] {
  checkData(data);
  checkVocab(a, b);
  const sums = new Float64Array(groups.length);
  let count = 0;
  for (const seq of data) {
    const ha = hiddenStates(a, seq);
    const hb = hiddenStates(b, seq);
    groups.forEach((g, i) => {
      sums[i]! += meanCosine(logitLens(a, ha[g.a.to]!), logitLens(b, hb[g.b.to]!)).sum;
    });
    count += seq.length;
  }
  return groups.map((g, i) => ({ a: { ...g.a }, b: { ...g.b }, score: sums[i]! / count }));
}

/** Standard deviation of the model's final logits over the data (a fixture is peaky at ≈ 3–6). */
export function logitStd(w: LlamaWeights, data: CalibrationData): number {
  checkData(data);
  let s = 0;
  let ss = 0;
  let n = 0;
  for (const seq of data) {
    const logits = headLogits(w, hiddenStates(w, seq)[w.arch.numLayers]!);
    for (const v of logits.data) {
      s += v;
      ss += v * v;
      n++;
    }
  }
  const mean = s / n;
  return Math.sqrt(Math.max(0, ss / n - mean * mean));
}

/**
 * The negative-control rule of §8.1: an unrelated model must score below the threshold against the reference,
 * or the metric cannot tell equivalent from unrelated on this data and every edge it would draw is meaningless.
 * Returns the control's score; throws ZooInvalidError naming it when the control passes.
 */
export function checkNegativeControl(reference: LlamaWeights, control: LlamaWeights, data: CalibrationData, threshold = DEFAULT_EQUIVALENCE_THRESHOLD): number {
  const score = vocabCosine(reference, control, data);
  if (score >= threshold) {
    throw new ZooInvalidError(
      `the negative control scores ${score.toFixed(4)} ≥ ${threshold} against the reference: the logit lens cannot discriminate on this data (are the distributions near uniform? logit std ${logitStd(reference, data).toFixed(2)}, want ≈ 3–6)`,
    );
  }
  return score;
}

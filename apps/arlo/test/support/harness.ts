/**
 * What the app tests share: a tiny generated encoder (BertForSequenceClassification, 128 positions) in a temp
 * directory, the engine's own unpadded forward as the reference for the served logits, and the comparison.
 *
 * Metric: normwise relative error max|served − reference| / max|reference| over one request's logits. The native
 * runtime runs the same kernels on `padTo` rows (attention never reads the pad rows), so it lands at f32 rounding
 * (the batch's row count changes the GEMM blocking, so not bit-exact); ORT is an independent f32 implementation
 * through 2 layers. Both are held to 1e-4 (the engine's ONNX cross-check tolerance).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type EncoderModel, generateModel, loadEncoder } from '@tessera/engine';
import { randomInts } from '@tessera/test-utils';

export const TOLERANCE = 1e-4;
export const LENGTHS = [32, 64, 128] as const;

export function tinyEncoder(seed = 7): { dir: string; modelDir: string; vocabSize: number; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-arlo-'));
  const model = generateModel(join(dir, 'model'), { family: 'encoder', size: 'tiny', seed });
  return { dir, modelDir: join(dir, 'model'), vocabSize: model.config.vocabSize, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A request of `length` ids: [CLS]-like first id 2, then seeded ids in [5, vocab). */
export function requestIds(length: number, seed: number, vocabSize: number): number[] {
  return [2, ...Array.from(randomInts(length - 1, seed, 5, vocabSize))];
}

/** The engine's forward of one sequence, packed (no padding at all): the reference logits. */
export function referenceLogits(model: EncoderModel, ids: readonly number[]): Float32Array {
  const out = model.forward([{ ids }], { outputs: { hidden: false, logits: true, pooled: false } });
  try {
    return out.logits!.toArray() as Float32Array;
  } finally {
    out.logits!.dispose();
  }
}

export function relativeError(got: readonly number[], want: Float32Array): number {
  let diff = 0;
  let scale = 0;
  want.forEach((w, i) => {
    diff = Math.max(diff, Math.abs(got[i]! - w));
    scale = Math.max(scale, Math.abs(w));
  });
  return diff / scale;
}

export { loadEncoder };

/**
 * Numerical equivalence (pets.md §9 behaviour 5, the core correctness property): one task of each of the seven PET
 * types in ONE mixed macro-batch (several queries per task, ragged lengths) through PetEngine, against onnxruntime
 * running each task's own merged model (mergePetIntoWeights → exportEncoderOnnx with adapter/prefix extensions):
 * the two share no kernel and no graph.
 *
 * Tolerance: normwise relative error max|engine − ort| / max|ort| over each query's logits ≤ 1e-4. Both sides are
 * f32 with different summation orders and a different algebra (X·W + X·δ vs X·(W + δ); W − W⊙M̄ vs W⊙M; an SGMV
 * pair vs a merged W + s·BA), each good to ~1e-7 relative per op; two layers of LayerNorm-normalized activations,
 * the pooler and the head keep the difference below 1e-6 (observed ≤ 6e-7), so 1e-4 leaves margin, while each PET
 * moves its task's logits by more than 20× the tolerance (observed: from 6e-3 for MaskBert's 5% mask and 8e-3
 * for the 8-long prefix up to 0.18 for the adapter) — checked below against the task's head on the plain shared model, so a
 * missing or misplaced PET op cannot pass.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PetEngine } from '../src/engine/pet-engine.js';
import { PetTaskOnnxModel, sharedHostWeights } from '../src/engine/reference-run.js';
import { headTensorNames } from '../src/operators/modules.js';
import { PET_TYPES, type PetParams } from '../src/types.js';
import { type EngineFixture, TAG, engineFixture, normwiseError, queriesFor } from './engine-fixture.js';

const TOLERANCE = 1e-4;
const LENGTHS = [[5, 17, 9], [33, 2, 12, 21], [7, 40], [1, 16, 25], [11, 3, 30], [19, 8], [6, 27, 14]];

let fx: EngineFixture;
const oracles = new Map<string, PetTaskOnnxModel>();
const plainHeads = new Map<string, PetTaskOnnxModel>();

/** The task's head alone (a STANDARD task): what its queries would give if its PET ops did nothing. */
function headOnly(p: PetParams, names: { weight: string; bias: string }): PetParams {
  return { type: 'standard', config: { labels: p.config.labels }, tensors: new Map([...p.tensors].filter(([n]) => n === names.weight || n === names.bias)) };
}

beforeAll(async () => {
  fx = engineFixture(PET_TYPES);
  const host = sharedHostWeights(fx.shared);
  const names = headTensorNames(fx.shared.config);
  for (const id of fx.ids) {
    const p = fx.params.get(id)!;
    oracles.set(id, await PetTaskOnnxModel.create(host, fx.shared.config, p, { threads: 1 }));
    if (p.type !== 'standard') plainHeads.set(id, await PetTaskOnnxModel.create(host, fx.shared.config, headOnly(p, names), { threads: 1 }));
  }
}, 60_000);

afterAll(async () => {
  for (const m of [...oracles.values(), ...plainHeads.values()]) await m.release();
  fx?.dispose();
});

describe('PetEngine vs each task’s merged model in onnxruntime (all seven types, one macro-batch)', () => {
  for (const layout of ['padded', 'packed'] as const) {
    it(`matches within ${TOLERANCE} normwise, ${layout} layout`, async () => {
      const vocab = fx.shared.config.vocabSize;
      const miniBatches = fx.ids.map((taskId, k) => ({ taskId, queries: queriesFor(taskId, LENGTHS[k]!, vocab, 100 + k, k % 2 === 0) }));
      const engine = new PetEngine(fx.tasks, TAG, { layout });
      const { results, timing } = engine.run({ miniBatches });
      expect(timing.segments).toBe(7);
      expect(results.map((r) => r.length)).toEqual(LENGTHS.map((l) => l.length));
      const tokens = LENGTHS.flat().reduce((a, b) => a + b, 0);
      expect(timing.rows).toBe(tokens);
      expect(timing.paddedRows).toBe(layout === 'padded' ? LENGTHS.flat().length * 40 : tokens);

      for (const [k, mb] of miniBatches.entries()) {
        const want = await oracles.get(mb.taskId)!.logits(mb.queries);
        const type = fx.types.get(mb.taskId)!;
        results[k]!.forEach((r, j) => {
          expect(r.taskId).toBe(mb.taskId);
          expect(r.logits.length).toBe(fx.params.get(mb.taskId)!.config.labels.length);
          const err = normwiseError(r.logits, want[j]!);
          expect(err, `${type} query ${j}: normwise error ${err}`).toBeLessThan(TOLERANCE);
          expect(r.label).toBe(fx.params.get(mb.taskId)!.config.labels[r.labelIndex]);
        });
        // The PET ops matter: the head on the plain shared model is far from the task's model.
        const plain = plainHeads.get(mb.taskId);
        if (plain) {
          const base = await plain.logits(mb.queries);
          const moved = Math.max(...base.map((b, j) => normwiseError(b, want[j]!)));
          expect(moved, `${type}: the PET changes the logits by only ${moved}`).toBeGreaterThan(20 * TOLERANCE);
        }
      }
    }, 30_000);
  }
});

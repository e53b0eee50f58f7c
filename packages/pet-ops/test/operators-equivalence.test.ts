/**
 * pets.md §9 behaviour 5 (and 6, 7): the unified execution — the shared encoder's GEMMs plus each task's PetOps at
 * the hook sites, LoRA through SGMV, prefixes through the attention hook, the task head on the pooled output —
 * equals the merged per-task model (float64 reference forward) for every PET type, in one mixed batch where tasks
 * appear in several segments. PetOps run through the host interpreter and, once the native PET kernels exist,
 * through petSiteRun too.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EncoderLinearSite, type EncoderNormSite, type LinearSiteCall, type ModelDelta, type NormSiteCall, type AttentionSiteCall, generateModel } from '@tessera/engine';
import * as native from '@tessera/native';
import { type PetOp, type Tensor, getBackend } from '@tessera/native';
import { addLora } from '@tessera/sgmv-kernel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type LoadedPet,
  PET_TYPES,
  type PetParams,
  type PetType,
  SharedEncoder,
  defaultPetRegistry,
  generatePetParams,
  mergePetIntoWeights,
  referenceEncoderForward,
  referencePetSiteRun,
} from '../src/index.js';

type SiteRunner = (ops: readonly PetOp[]) => void;

/** Applies loaded tasks at every hook site, one segment (row range) at a time, keyed by the sequence's task id. */
class PetTestDelta implements ModelDelta {
  constructor(private readonly pets: ReadonlyMap<string, LoadedPet>, private readonly run: SiteRunner) {}

  linear(call: LinearSiteCall): void {
    for (const seg of call.layout.segments) {
      const pet = seg.key === null ? undefined : this.pets.get(seg.key);
      if (!pet) continue;
      const rows = { start: seg.start, seqs: 1, stride: seg.count, tokens: seg.count };
      this.run(pet.linearOps({ layer: call.layer, site: call.site as EncoderLinearSite, x: call.x, outputs: call.outputs, rows }));
    }
    for (const out of call.outputs) {
      const proj = (seg: { key: string | null }) => (seg.key === null ? undefined : this.pets.get(seg.key)?.lora?.projections.get(out.slice));
      const a = call.layout.segments.map((s) => proj(s)?.a ?? null);
      const b = call.layout.segments.map((s) => proj(s)?.b ?? null);
      if (a.some((t) => t !== null)) addLora(out.y, call.x, a, b, call.layout, call.layer);
    }
  }

  norm(call: NormSiteCall): void {
    for (const seg of call.layout.segments) {
      const pet = seg.key === null ? undefined : this.pets.get(seg.key);
      if (!pet) continue;
      const rows = { start: seg.start, seqs: 1, stride: seg.count, tokens: seg.count };
      this.run(pet.normOps({ layer: call.layer, site: call.site as EncoderNormSite, x: call.x, y: call.y, rows }));
    }
  }

  attentionPrefix(call: AttentionSiteCall) {
    return call.key === null ? null : (this.pets.get(call.key)?.attentionPrefix(call.layer) ?? null);
  }
}

function headLogits(pooled: Float32Array, row: number, hidden: number, head: { weight: Tensor; bias: Tensor }): Float64Array {
  const w = head.weight.toArray() as Float32Array;
  const b = head.bias.toArray() as Float32Array;
  const n = b.length;
  const out = new Float64Array(n);
  for (let o = 0; o < n; o++) {
    let acc = b[o]!;
    for (let j = 0; j < hidden; j++) acc += pooled[row * hidden + j]! * w[o * hidden + j]!;
    out[o] = acc;
  }
  return out;
}

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const petSiteRun = (native as unknown as { petSiteRun?: (ops: readonly PetOp[], options?: { numStreams?: number }) => void }).petSiteRun;

describe('unified PET execution equals the merged per-task model', () => {
  let dir: string;
  let shared: SharedEncoder;
  const registry = defaultPetRegistry();
  const params = new Map<PetType, PetParams>();
  const sharedHost = new Map<string, Float32Array>();

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'pet-equiv-'));
    generateModel(dir, { family: 'encoder', size: 'tiny', seed: 11 });
    shared = SharedEncoder.load('tiny', { dir }, getBackend());
    for (const name of shared.model.weights.tensors.keys()) sharedHost.set(name, shared.hostWeight(name));
    PET_TYPES.forEach((type, i) => {
      params.set(type, generatePetParams(type, shared.config, { seed: 100 + i, labels: ['w', 'x', 'y', 'z'].slice(0, 2 + (i % 3)), shared: (n) => shared.hostWeight(n) }));
    });
  });

  afterAll(() => {
    shared?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Two ragged sequences per task, interleaved so each task has two segments; plus one base-model sequence. */
  function batch(): { ids: number[]; key: string | null }[] {
    const seqs: { ids: number[]; key: string | null }[] = [];
    let s = 1;
    const ids = (n: number) => Array.from({ length: n }, (_, i) => (i === 0 ? 2 : 5 + ((s * 37 + i * 11) % 1000)));
    for (let round = 0; round < 2; round++) {
      for (const type of PET_TYPES) {
        s++;
        seqs.push({ ids: ids(3 + ((s * 5) % 9)), key: type });
      }
    }
    seqs.push({ ids: ids(6), key: null });
    return seqs;
  }

  function runUnified(run: SiteRunner): { pooled: Float32Array; logits: Map<number, Float64Array> } {
    const pets = new Map<string, LoadedPet>();
    try {
      for (const type of PET_TYPES) pets.set(type, registry.get(type).load(shared, params.get(type)!, getBackend()));
      const seqs = batch();
      const out = shared.model.forward(seqs, { deltas: [new PetTestDelta(pets, run)], outputs: { hidden: false, pooled: true, logits: false } });
      const pooled = out.pooled!.toArray() as Float32Array;
      out.pooled!.dispose();
      const logits = new Map<number, Float64Array>();
      seqs.forEach((q, i) => {
        if (q.key !== null) logits.set(i, headLogits(pooled, i, shared.config.hiddenSize, pets.get(q.key)!.head));
      });
      return { pooled, logits };
    } finally {
      for (const p of pets.values()) p.dispose();
    }
  }

  function checkAgainstMerged(logits: Map<number, Float64Array>): void {
    const seqs = batch();
    for (const type of PET_TYPES) {
      const merged = mergePetIntoWeights(sharedHost, shared.config, params.get(type)!);
      const mine = seqs.map((q, i) => ({ q, i })).filter(({ q }) => q.key === type);
      const ref = referenceEncoderForward(merged.config, merged.weights, mine.map(({ q }) => q), merged.extensions);
      mine.forEach(({ i }, k) => {
        const got = logits.get(i)!;
        const want = ref.logits[k]!;
        expect(maxDiff(got, want), `${type}, sequence ${i}`).toBeLessThan(2e-5 + 1e-4 * maxAbs(want));
      });
    }
  }

  it('with the host PetOp interpreter, for all seven types in one mixed batch', () => {
    checkAgainstMerged(runUnified(referencePetSiteRun).logits);
  });

  it.skipIf(!petSiteRun)('with the native petSiteRun kernels, one stream and several', () => {
    checkAgainstMerged(runUnified((ops) => petSiteRun!(ops)).logits);
    checkAgainstMerged(runUnified((ops) => petSiteRun!(ops, { numStreams: 3 })).logits);
  });

  // The random shared model's residual stream dominates its sublayers, so a PET moves the logits by tenths of a
  // percent to a few percent: "measurable" here means far above the equivalence tolerance (so a PET applied with
  // the wrong sign, to the wrong rows or not at all fails the test above).
  it('every PET type measurably changes the logits against the shared model with the same head', () => {
    const seqs = batch().filter((q) => q.key === 'standard').slice(0, 1);
    for (const type of PET_TYPES) {
      if (type === 'standard') continue;
      const merged = mergePetIntoWeights(sharedHost, shared.config, params.get(type)!);
      const plain = mergePetIntoWeights(sharedHost, shared.config, { type: 'standard', config: { labels: params.get(type)!.config.labels }, tensors: new Map([...params.get(type)!.tensors].filter(([n]) => n.startsWith('classifier.'))) });
      const a = referenceEncoderForward(merged.config, merged.weights, seqs, merged.extensions).logits[0]!;
      const b = referenceEncoderForward(plain.config, plain.weights, seqs).logits[0]!;
      expect(maxDiff(a, b), type).toBeGreaterThan(10 * (2e-5 + 1e-4 * maxAbs(b)));
    }
  });

  it("a sequence's result does not depend on the rest of the batch (batch invariance)", () => {
    const full = runUnified(referencePetSiteRun).logits;
    const seqs = batch();
    // The diff task's first sequence alone.
    const i = seqs.findIndex((q) => q.key === 'diff');
    const pet = registry.get('diff').load(shared, params.get('diff')!, getBackend());
    try {
      const out = shared.model.forward([seqs[i]!], { deltas: [new PetTestDelta(new Map([['diff', pet]]), referencePetSiteRun)], outputs: { hidden: false, pooled: true, logits: false } });
      const alone = headLogits(out.pooled!.toArray() as Float32Array, 0, shared.config.hiddenSize, pet.head);
      out.pooled!.dispose();
      expect(maxDiff(alone, full.get(i)!)).toBeLessThan(1e-5);
    } finally {
      pet.dispose();
    }
  });
});

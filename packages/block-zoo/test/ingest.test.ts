/**
 * Ingest end to end on generated models (no downloads): an HF Llama foundation, two PEFT LoRA adapters of it and a
 * full fine-tune, read unchanged; deduplication counts on disk and on the device (behaviour 2); the measured shared
 * fraction against the analytic one; the full fine-tune scored, partitioned and given a linked surrogate; the zoo
 * saved and reloaded.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateLoraAdapter, SafetensorsFile } from '@tessera/engine';
import { allocatorStats } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';

import { buildSurrogate } from '../src/fit/index.js';
import { describeHfLlama, ingestFoundation, ingestFullFineTune, ingestLora, storeSurrogate, weightsFromStore } from '../src/ingest/index.js';
import { BlockZoo, peParamCount, sharedParamFraction, tensorId, ZooBudgetError, ZooIntegrityError, ZooInvalidError } from '../src/planner/index.js';
import { DevicePool, DiskTensorStore } from '../src/store/index.js';
import { calibration, FIXTURE_OVERRIDES, fullFineTune, generatePeaky, writeLlamaDir } from './support/fixtures.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-zoo-ingest-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Distinct tensors by raw content over safetensors files (hashed here independently of the zoo). */
function distinctContent(files: readonly (readonly [string, string])[]): { count: number; bytes: number } {
  const seen = new Map<string, number>();
  for (const [dir, file] of files) {
    const f = SafetensorsFile.open(join(dir, file));
    try {
      for (const name of f.names()) {
        const info = f.info(name);
        const host = f.readHost(name);
        const key = createHash('sha256').update(`${info.dtype}|${info.shape.join(',')}|`).update(new Uint8Array(host.buffer, host.byteOffset, host.byteLength)).digest('hex');
        seen.set(key, info.byteLength);
      }
    } finally {
      f.close();
    }
  }
  return { count: seen.size, bytes: [...seen.values()].reduce((a, b) => a + b, 0) };
}

/** SHA-256 of every file under a directory: the "unchanged" check. */
function fingerprint(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of readdirSync(dir).sort()) out[f] = createHash('sha256').update(readFileSync(join(dir, f))).digest('hex');
  return out;
}

const F = generatePeaky(root, 'llama', 1);
const loraDirs = [1, 2].map((seed) => generateLoraAdapter(join(root, `lora-${seed}`), { base: F.config, rank: 8, seed }).dir);
// A full fine-tune that froze its embeddings, head and norm gains (byte-identical to the foundation's) and moved its
// late layers far: layers 0–1 stay equivalent, 2–3 do not.
const ffWeights = fullFineTune(F.weights, [0.001, 0.001, 0.03, 0.03], 21, 0);
const ffDir = writeLlamaDir(join(root, 'vicuna'), ffWeights, F.config);
const fileBytes = (dir: string, file: string) => {
  const f = SafetensorsFile.open(join(dir, file));
  try {
    return f.names().reduce((n, name) => n + f.info(name).byteLength, 0);
  } finally {
    f.close();
  }
};
const foundationBytes = fileBytes(F.dir, 'model.safetensors');
const adapterBytes = loraDirs.map((d) => fileBytes(d, 'adapter_model.safetensors'));

const before = [F.dir, ...loraDirs, ffDir].map(fingerprint);
const store = DiskTensorStore.open(join(root, 'zoo'));
const zoo = new BlockZoo();

describe('ingest of an HF Llama directory and two PEFT LoRA adapters', () => {
  it('stores the foundation once: stored bytes = foundation + Σ adapters, nothing more', () => {
    ingestFoundation(zoo, store, F.dir, { id: 'llama' });
    ingestLora(zoo, store, loraDirs[0]!, { id: 'lora-a', base: 'llama' });
    ingestLora(zoo, store, loraDirs[1]!, { id: 'lora-b', base: 'llama' });
    // Content addressing also folds identical tensors inside one checkpoint: the generator's norm gains are all 1,
    // so the foundation's 8 layer norms are one stored tensor (7 dedup hits, 7 × 128 bytes saved).
    const distinct = distinctContent([[F.dir, 'model.safetensors'], ...loraDirs.map((d) => [d, 'adapter_model.safetensors'] as const)]);
    const s = store.stats();
    expect(s.uniqueTensors).toBe(distinct.count);
    expect(s.uniqueTensors).toBe(39 - 7 + 2 * 16);
    expect(s.storedBytes).toBe(foundationBytes + adapterBytes[0]! + adapterBytes[1]! - 7 * 32 * 4);
    expect(s.storedBytes).toBe(distinct.bytes);
    expect(s.dedupHits).toBe(7);
    const z = zoo.storage();
    expect(z.uniqueBytes).toBe(s.storedBytes);
    // Per-model provisioning would hold the foundation three times, every tensor by name.
    expect(z.logicalBytes).toBe(3 * foundationBytes + adapterBytes[0]! + adapterBytes[1]!);
    expect(z.redundancy).toBeCloseTo(1 - z.uniqueBytes / z.logicalBytes, 15);
  });

  it('the chains are LoRA-fused attention blocks around shared foundation blocks', () => {
    const f = zoo.chain('llama').blocks;
    const a = zoo.chain('lora-a').blocks;
    const b = zoo.chain('lora-b').blocks;
    expect(a.map((x) => (x.pe ? `${x.kind}+lora` : x.kind))).toEqual(['embedding', 'attention+lora', 'ffn', 'attention+lora', 'ffn', 'attention+lora', 'ffn', 'attention+lora', 'layerRange']);
    for (let i = 0; i < f.length; i++) {
      expect(a[i]!.blockId === f[i]!.blockId).toBe(a[i]!.pe === null);
      expect(b[i]!.blockId === f[i]!.blockId).toBe(b[i]!.pe === null);
    }
    expect(zoo.usersOf(f[2]!.blockId)).toEqual(['llama', 'lora-a', 'lora-b']);
    expect(a[1]!.pe).toEqual({ method: 'lora', config: { r: 8, loraAlpha: 16, targetModules: ['q_proj', 'v_proj'], useRslora: false } });
  });

  it('leaves the directories unchanged, and the store gives back their exact bytes', () => {
    expect([F.dir, ...loraDirs, ffDir].map(fingerprint)).toEqual(before);
    const file = SafetensorsFile.open(join(F.dir, 'model.safetensors'));
    try {
      for (const block of zoo.chain('llama').blocks) {
        for (const t of block.tensors) {
          const want = file.readHost(t.name);
          const got = store.read(t.id, { verify: true });
          expect(Buffer.from(got.bytes).equals(Buffer.from(want.buffer, want.byteOffset, want.byteLength))).toBe(true);
          expect(got.shape).toEqual(file.info(t.name).shape);
        }
      }
    } finally {
      file.close();
    }
  });

  it('the measured shared fraction equals Table 1’s analytic one for the tiny shape', () => {
    const shape = { style: 'llama', vocabSize: 512, hiddenSize: 32, numLayers: 4, intermediateSize: 88, kvSize: 16, tieWordEmbeddings: false } as const;
    const pe = { method: 'lora', rank: 8, targets: ['q', 'v'] } as const;
    const measured = zoo.sharedFraction('lora-a');
    expect(measured.params - measured.sharedParams).toBe(peParamCount(shape, pe));
    expect(measured.fraction).toBeCloseTo(sharedParamFraction(shape, pe), 14);
    expect(zoo.sharedFraction('llama').fraction).toBe(1);
  });

  it('a corrupt tensor on disk is caught on a verified read', () => {
    const t = zoo.chain('lora-a').blocks[1]!.tensors.find((x) => x.name.includes('lora_A'))!;
    const scratch = DiskTensorStore.open(join(root, 'scratch'));
    const data = Float32Array.from({ length: 4 }, (_, i) => i);
    const { id } = scratch.put({ dtype: 'f32', shape: [4] }, data);
    expect(scratch.put({ dtype: 'f32', shape: [4] }, new Float32Array(data))).toEqual({ id, stored: false });
    expect(scratch.stats()).toMatchObject({ uniqueTensors: 1, puts: 2, dedupHits: 1, storedBytes: 16, bytesPut: 32 });
    const hex = id.slice(7);
    const path = join(root, 'scratch', 'tensors', hex.slice(0, 2), hex, 'data.bin');
    const bytes = readFileSync(path);
    bytes[3] = bytes[3]! ^ 1;
    writeFileSync(path, bytes);
    expect(() => scratch.read(id, { verify: true })).toThrow(ZooIntegrityError);
    expect(DiskTensorStore.open(join(root, 'scratch')).stats().uniqueTensors).toBe(1);
    expect(t.id).toBe(tensorId({ dtype: t.dtype, shape: t.shape }, store.read(t.id).bytes));
  });
});

describe('device residency of the chains (native tensors under the allocator’s budget)', () => {
  it('holds each shared tensor once; native bytes equal the unique bytes; release frees everything', () => {
    const inUse = allocatorStats().inUse;
    const pool = new DevicePool(store);
    const chains = ['llama', 'lora-a', 'lora-b'].map((app) => zoo.chain(app).blocks);
    const held = chains.flatMap((c) => c.map((b) => ({ b, tensors: pool.acquire(b) })));
    const s = pool.stats();
    expect(s.residentBytes).toBe(zoo.storage().uniqueBytes);
    expect(s.nativeBytes).toBe(s.residentBytes);
    expect(allocatorStats().inUse - inUse).toBeGreaterThanOrEqual(s.residentBytes);
    // One Tensor object behind the shared FFN in all three chains, and the fused blocks see the foundation's q_proj.
    const ffn = held.filter((h) => h.b.blockId === chains[0]![2]!.blockId).map((h) => h.tensors.get('model.layers.0.mlp.down_proj.weight'));
    expect(ffn).toHaveLength(3);
    expect(ffn[1]).toBe(ffn[0]);
    const qF = held[1]!.tensors.get('model.layers.0.self_attn.q_proj.weight')!;
    const qA = pool.tensorsOf(chains[1]![1]!.blockId).get('model.layers.0.self_attn.q_proj.weight')!;
    expect(qA).toBe(qF);
    expect(Array.from(qA.toArray() as Float32Array).slice(0, 4)).toEqual(Array.from(F.weights.tensors.get('model.layers.0.self_attn.q_proj.weight')!.data.subarray(0, 4), Math.fround));
    for (const h of held) pool.release(h.b.blockId);
    expect(pool.stats()).toMatchObject({ residentBytes: 0, nativeBytes: 0, tensors: 0, blocks: 0 });
    expect(allocatorStats().inUse).toBe(inUse);
  });

  it('a block over the budget is refused and nothing stays allocated', () => {
    const inUse = allocatorStats().inUse;
    const first = zoo.chain('llama').blocks[0]!;
    const pool = new DevicePool(store, { budgetBytes: first.paramBytes - 1 });
    expect(() => pool.acquire(first)).toThrow(ZooBudgetError);
    expect(pool.stats().residentBytes).toBe(0);
    expect(allocatorStats().inUse).toBe(inUse);
    pool.dispose();
  });
});

describe('a full fine-tune against its foundation', () => {
  const data = calibration(4, 16, 512, 3);
  let scores: number[] = [];

  it('is scored by the logit lens, partitioned at the cut, and dedups its frozen tensors', () => {
    const unrelated = generatePeaky(root, 'unrelated', 2).weights;
    const hitsBefore = store.stats().dedupHits;
    const r = ingestFullFineTune(zoo, store, ffDir, { id: 'vicuna', base: 'llama', calibration: data, negativeControl: unrelated });
    scores = r.scores;
    expect(scores.map((s) => s >= 0.98)).toEqual([true, true, false, false]);
    // Embedding, head and the 9 norm gains are byte-identical to the foundation's.
    expect(store.stats().dedupHits - hitsBefore).toBe(2 + 2 * FIXTURE_OVERRIDES.numLayers! + 1);
    expect(zoo.partition('vicuna').map((b) => [b.span!.start, b.span!.end])).toEqual([[0, 5], [5, 10]]);
    const edge = zoo.equivalences().find((e) => e.a.model === 'vicuna')!;
    expect(edge).toMatchObject({ b: { model: 'llama', span: { start: 0, end: 5 } }, requiresStitch: false, method: 'logit-lens-cosine/cumulative' });
    expect(edge.score).toBeCloseTo((scores[0]! + scores[1]!) / 2, 12);
    // The LoRA chains follow the new foundation cut at layer 2 and stay whole.
    for (const app of ['lora-a', 'lora-b']) expect(zoo.chain(app).blocks.at(-1)!.span).toEqual({ start: 8, end: 10 });
    expect(zoo.realize(edge.b).map((b) => b.kind)).toEqual(['embedding', 'attention', 'ffn', 'attention', 'ffn']);
  });

  it('the negative-control rule refuses a control that scores as equivalent', () => {
    expect(() => ingestFullFineTune(zoo, store, ffDir, { id: 'vicuna-2', base: 'llama', calibration: data, negativeControl: F.weights })).toThrow(ZooInvalidError);
    expect(zoo.hasModel('vicuna-2')).toBe(false);
  });

  it('gets a surrogate for its late block, stored and linked', () => {
    const w = weightsFromStore(zoo, store, 'vicuna');
    expect(w.tensors.get('model.layers.3.mlp.up_proj.weight')!.data).toEqual(ffWeights.tensors.get('model.layers.3.mlp.up_proj.weight')!.data.map(Math.fround));
    const target = zoo.partition('vicuna')[1]!;
    const s = buildSurrogate(w, { from: 2, to: 4 }, calibration(16, 24, 512, 7), calibration(2, 16, 512, 8));
    const sur = storeSurrogate(zoo, store, target.blockId, s);
    expect(sur.kind).toBe('surrogate');
    // The pruned layers in the shapes of the surrogate's own signature (norm gains 1-D), the head lent by the target.
    const byName = new Map(sur.tensors.map((t) => [t.name, t]));
    expect(byName.get('model.layers.2.self_attn.q_proj.weight')!.shape).toEqual([s.archSig.numHeads * s.archSig.headDim, 32]);
    expect(byName.get('model.layers.3.mlp.down_proj.weight')!.shape).toEqual([32, s.archSig.intermediateSize]);
    expect(byName.get('model.layers.2.input_layernorm.weight')!.shape).toEqual([32]);
    for (const name of ['model.norm.weight', 'lm_head.weight']) expect(byName.get(name)!.id).toBe(target.tensors.find((t) => t.name === name)!.id);
    expect(sur.tensors).toHaveLength(s.tensors.size + 2);
    expect(sur.span).toEqual(target.span);
    expect(zoo.surrogatesOf(target.blockId)).toEqual([{ target: target.blockId, surrogate: sur.blockId, cosine: s.cosine, speedup: s.speedup, prunedFraction: s.prunedFraction }]);
    expect(sur.paramBytes).toBeLessThan(target.paramBytes);
  });

  it('the zoo saves with its manifests and reloads to the same chains, edges and links', () => {
    store.saveZoo(zoo);
    const again = DiskTensorStore.open(join(root, 'zoo'));
    const loaded = again.loadZoo();
    expect(loaded.chains().map((c) => c.blocks.map((b) => b.blockId))).toEqual(zoo.chains().map((c) => c.blocks.map((b) => b.blockId)));
    expect(loaded.equivalences()).toEqual(zoo.equivalences());
    expect(loaded.surrogatesOf(zoo.partition('vicuna')[1]!.blockId)).toHaveLength(1);
    const any = zoo.chain('lora-b').blocks[3]!;
    expect(again.getManifest(any.blockId)).toEqual(any);
    expect(statSync(join(root, 'zoo', 'zoo.json')).size).toBeGreaterThan(0);
    // Describing the directory again (no store) gives the same ids the zoo holds.
    const byName = (refs: readonly { name: string; id: string }[]) => Object.fromEntries(refs.map((r) => [r.name, r.id]));
    expect(byName(describeHfLlama(F.dir, { id: 'x' }).description.tensors)).toEqual(byName(zoo.chain('llama').blocks.flatMap((b) => b.tensors)));
  });
});

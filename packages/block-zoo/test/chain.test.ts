/**
 * Chain execution on the staged engine (design note §7: "chain == whole model bit for bit"; "per-block batching
 * across applications sharing a block equals separate runs"). Models come from the project's generator; the
 * reference is the engine's own DecoderModel forward over the checkpoint read from disk (not from the zoo's pool)
 * with the same KV settings, the fine-tune applied the engine's way (LoraDelta from the PEFT directory, the merged
 * weights, the FF checkpoint, or the PE delta over the whole model).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import {
  type DecoderModel,
  type DecoderSequence,
  generateLoraAdapter,
  KvCacheExhaustedError,
  loadDecoder,
  loadLoraAdapter,
  LoraDelta,
  mergeLoraIntoWeights,
  type ModelDelta,
  PagedKvCache,
} from '@tessera/engine';
import { scatterRows, Tensor } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';

import { AdapterDelta, BitFitDelta, type BlockRun, ChainExecutor, type ChainSequence } from '../src/chain/index.js';
import { ingestFoundation, ingestFullFineTune, ingestLora } from '../src/ingest/index.js';
import { BlockZoo, formatBlock, type TensorRef, ZooNotFoundError } from '../src/planner/index.js';
import { DevicePool, DiskTensorStore } from '../src/store/index.js';
import { calibration, fullFineTune, generatePeaky, normals, writeLlamaDir } from './support/fixtures.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-zoo-chain-'));
const disposers: (() => void)[] = [];
afterAll(() => {
  for (const d of disposers.reverse()) d();
  rmSync(root, { recursive: true, force: true });
});

const F = generatePeaky(root, 'llama', 1);
const { config } = F;
const kvDim = config.numKvHeads * config.headDim;
const loraSql = generateLoraAdapter(join(root, 'sql'), { base: config, rank: 8, seed: 1 }).dir;
const loraChat = generateLoraAdapter(join(root, 'chat'), { base: config, rank: 4, seed: 2, targets: ['q_proj', 'v_proj', 'up_proj', 'down_proj'] }).dir;
// Layers 0–1 equivalent to the foundation, 2–3 not: the FF's chain is two blocks, `embed layers(0,2)` | `layers(2,4) head`.
const ffDir = writeLlamaDir(join(root, 'vicuna'), fullFineTune(F.weights, [0.001, 0.001, 0.03, 0.03], 21, 0), config);

const store = DiskTensorStore.open(join(root, 'zoo'));

/** A random f32 tensor into the store, with its ref. */
function put(name: string, shape: number[], seed: number, std: number): TensorRef & { data: Float32Array } {
  const data = Float32Array.from(normals(shape.reduce((a, b) => a * b, 1), seed), (x) => x * std);
  const { id } = store.put({ dtype: 'f32', shape }, data);
  return { name, id, dtype: 'f32', shape, data };
}

// Zoo A: the foundation, two LoRAs (every component fused for one of them), the full fine-tune, and a prefix.
const zoo = new BlockZoo();
ingestFoundation(zoo, store, F.dir, { id: 'llama' });
ingestLora(zoo, store, loraSql, { id: 'sql', base: 'llama' });
ingestLora(zoo, store, loraChat, { id: 'chat', base: 'llama' });
ingestFullFineTune(zoo, store, ffDir, { id: 'vicuna', base: 'llama', calibration: calibration(4, 16, config.vocabSize, 3) });
const PREFIX = 3;
const prefixTensors = Array.from({ length: config.numLayers }, (_, l) => put(`prefix.layers.${l}.kv`, [2, PREFIX, kvDim], 100 + l, 0.5));
zoo.addPeFineTune({ id: 'prefix', base: 'llama', method: 'prefix', config: { tokens: PREFIX }, tensors: prefixTensors.map((t, l) => ({ ...t, component: 1 + 2 * l })) });

// Zoo B: the foundation cut lazily by a BitFit on attn(1) and an adapter on ffn(2) only, so its blocks have every
// shape the engine stages can take: `embed layer(0)`, `attn(1)`, `ffn(1) attn(2)`, `ffn(2)`, `layer(3) head`.
const zooB = new BlockZoo();
ingestFoundation(zooB, store, F.dir, { id: 'llama' });
const bitfitBias = put('model.layers.1.self_attn.q_proj.bias', [config.numHeads * config.headDim], 200, 0.5);
zooB.addPeFineTune({ id: 'bitfit', base: 'llama', method: 'bitfit', config: {}, tensors: [bitfitBias] });
const BOTTLENECK = 4;
const adapterDown = put('adapter.layers.2.ffn.down', [BOTTLENECK, config.hiddenSize], 300, 0.3);
const adapterUp = put('adapter.layers.2.ffn.up', [config.hiddenSize, BOTTLENECK], 301, 0.3);
zooB.addPeFineTune({ id: 'adapter', base: 'llama', method: 'adapter', config: { bottleneck: BOTTLENECK }, tensors: [adapterDown, adapterUp].map((t) => ({ ...t, component: 6 })) });

const pool = new DevicePool(store);
disposers.push(() => pool.dispose());
function executor(z: BlockZoo, options: ConstructorParameters<typeof ChainExecutor>[2] = {}): ChainExecutor {
  const ex = new ChainExecutor(z, pool, { kvPages: 16, ...options });
  disposers.push(() => ex.dispose());
  return ex;
}
const chains = executor(zoo);
const chainsB = executor(zooB);

const host = (t: Tensor): Float32Array => t.toArray() as Float32Array;
const tensorOf = (t: { data: Float32Array; shape: readonly number[] }) => {
  const x = Tensor.from(t.data, t.shape);
  disposers.push(() => x.dispose());
  return x;
};

const p1 = calibration(1, 11, config.vocabSize, 41)[0]!;
const p2 = calibration(1, 6, config.vocabSize, 42)[0]!;
/** Two prefills of ragged length, then decode steps (one with two new tokens, one with the order swapped). */
const STEPS: { id: string; tokens: number[] }[][] = [
  [{ id: 'a', tokens: p1 }, { id: 'b', tokens: p2 }],
  [{ id: 'a', tokens: [17] }, { id: 'b', tokens: [250] }],
  [{ id: 'b', tokens: [3] }, { id: 'a', tokens: [99] }],
  [{ id: 'a', tokens: [7, 480] }, { id: 'b', tokens: [64] }],
  [{ id: 'b', tokens: [1] }, { id: 'a', tokens: [2] }],
];

/**
 * The whole model: one DecoderModel forward per step over a cache of every layer, logits of every row, split per
 * sequence. A prefix is written into each sequence's first positions of every layer before its prompt.
 */
function wholeModel(model: DecoderModel, app: string, deltas: readonly ModelDelta[], prefix?: readonly { data: Float32Array }[]): Float32Array[][] {
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: 16 }, model.backend);
  try {
    return STEPS.map((step) => {
      if (prefix) {
        for (const s of step) {
          if (cache.hasSequence(s.id)) continue;
          cache.addSequence(s.id);
          cache.reserve(s.id, PREFIX);
          const slots = Tensor.from(cache.slotsFor(s.id, 0, PREFIX), [PREFIX]);
          prefix.forEach((p, l) => {
            const k = Tensor.from(p.data.subarray(0, PREFIX * kvDim), [PREFIX, kvDim]);
            const v = Tensor.from(p.data.subarray(PREFIX * kvDim), [PREFIX, kvDim]);
            scatterRows(k, slots, cache.layerRows(l).k);
            scatterRows(v, slots, cache.layerRows(l).v);
            k.dispose();
            v.dispose();
          });
          slots.dispose();
          cache.commit(s.id, PREFIX);
        }
      }
      const seqs: DecoderSequence[] = step.map((s) => ({ id: s.id, tokens: s.tokens, key: app }));
      const out = model.forward(seqs, { cache, deltas, logits: 'all' });
      const all = host(out.logits!);
      out.logits!.dispose();
      out.layout.dispose();
      const V = config.vocabSize;
      return step.map((s, b) => all.slice(out.offsets[b]! * V, out.offsets[b + 1]! * V));
    });
  } finally {
    cache.dispose();
  }
}

/** The same steps through the app's chain (sequence ids made unique per app), logits of every row per sequence. */
function chainRun(ex: ChainExecutor, app: string): Float32Array[][] {
  const out = STEPS.map((step) => ex.step(step.map((s): ChainSequence => ({ app, id: `${app}:${s.id}`, tokens: s.tokens })), { logits: 'all' }));
  for (const s of STEPS[0]!) ex.release(`${app}:${s.id}`);
  return out;
}

function loaded(dir: string): DecoderModel {
  const m = loadDecoder(dir);
  disposers.push(() => m.dispose());
  return m;
}

describe('a chain of blocks equals the whole model, bit for bit (prefill and decode steps)', () => {
  const base = loaded(F.dir);
  const foundation = wholeModel(base, 'llama', []);

  const cases: { name: string; zoo: () => ChainExecutor; app: string; chain: string; whole: () => Float32Array[][] }[] = [
    {
      name: 'foundation, cut at every half layer by the LoRAs',
      zoo: () => chains,
      app: 'llama',
      chain: 'embed | attn(0) | ffn(0) | attn(1) | ffn(1) | attn(2) | ffn(2) | attn(3) | ffn(3) | head',
      whole: () => foundation,
    },
    {
      name: 'foundation, blocks of every stage shape (embed + layers, attention, ffn + attention, ffn, layers + head)',
      zoo: () => chainsB,
      app: 'llama',
      chain: 'embed layer(0) | attn(1) | ffn(1) attn(2) | ffn(2) | layer(3) head',
      whole: () => foundation,
    },
    {
      name: 'PEFT LoRA on q, v (LoraDelta on the fused attention blocks)',
      zoo: () => chains,
      app: 'sql',
      chain: 'embed | attn(0)+lora | ffn(0) | attn(1)+lora | ffn(1) | attn(2)+lora | ffn(2) | attn(3)+lora | ffn(3) | head',
      whole: () => {
        const adapter = loadLoraAdapter(loraSql, { base: config });
        const delta = new LoraDelta(new Map([['sql', adapter]]));
        try {
          return wholeModel(base, 'sql', [delta]);
        } finally {
          delta.dispose();
          adapter.dispose();
        }
      },
    },
    {
      name: 'PEFT LoRA on q, v, up, down (attention and FFN blocks fused)',
      zoo: () => chains,
      app: 'chat',
      chain: 'embed | attn(0)+lora | ffn(0)+lora | attn(1)+lora | ffn(1)+lora | attn(2)+lora | ffn(2)+lora | attn(3)+lora | ffn(3)+lora | head',
      whole: () => {
        const adapter = loadLoraAdapter(loraChat, { base: config });
        const delta = new LoraDelta(new Map([['chat', adapter]]));
        try {
          return wholeModel(base, 'chat', [delta]);
        } finally {
          delta.dispose();
          adapter.dispose();
        }
      },
    },
    {
      name: 'PEFT LoRA merged into the fused blocks (against mergeLoraIntoWeights on the whole model)',
      zoo: () => executor(zoo, { lora: 'merged' }),
      app: 'chat',
      chain: 'embed | attn(0)+lora | ffn(0)+lora | attn(1)+lora | ffn(1)+lora | attn(2)+lora | ffn(2)+lora | attn(3)+lora | ffn(3)+lora | head',
      whole: () => {
        const merged = loaded(F.dir);
        const adapter = loadLoraAdapter(loraChat, { base: config });
        mergeLoraIntoWeights(merged.weights, adapter);
        adapter.dispose();
        return wholeModel(merged, 'chat', []);
      },
    },
    {
      name: 'full fine-tune (its own blocks, cut where its layers stop being equivalent)',
      zoo: () => chains,
      app: 'vicuna',
      chain: 'embed layers(0,2) | layers(2,4) head',
      whole: () => wholeModel(loaded(ffDir), 'vicuna', []),
    },
    {
      name: 'prefix-tuning (prefix K/V in every fused attention block)',
      zoo: () => chains,
      app: 'prefix',
      chain: 'embed | attn(0)+prefix | ffn(0) | attn(1)+prefix | ffn(1) | attn(2)+prefix | ffn(2) | attn(3)+prefix | ffn(3) | head',
      whole: () => wholeModel(base, 'prefix', [], prefixTensors),
    },
    {
      name: 'BitFit (a trained q_proj bias in its attention block)',
      zoo: () => chainsB,
      app: 'bitfit',
      chain: 'embed layer(0) | attn(1)+bitfit | ffn(1) attn(2) | ffn(2) | layer(3) head',
      whole: () => {
        const delta = new BitFitDelta(new Map([['bitfit', new Map([[bitfitBias.name, tensorOf(bitfitBias)]])]]));
        try {
          return wholeModel(base, 'bitfit', [delta]);
        } finally {
          delta.dispose();
        }
      },
    },
    {
      name: 'bottleneck adapter (after the FFN of layer 2, fused with it)',
      zoo: () => chainsB,
      app: 'adapter',
      chain: 'embed layer(0) | attn(1) | ffn(1) attn(2) | ffn(2)+adapter | layer(3) head',
      whole: () => wholeModel(base, 'adapter', [new AdapterDelta(new Map([['adapter', [{ layer: 2, component: 'ffn', adapter: { down: tensorOf(adapterDown), up: tensorOf(adapterUp) } }]]]))]),
    },
  ];

  for (const c of cases) {
    it(c.name, () => {
      const ex = c.zoo();
      expect(ex.blocksOf(c.app).map(formatBlock).join(' | ')).toBe(c.chain);
      const want = c.whole();
      const got = chainRun(ex, c.app);
      got.forEach((step, i) => step.forEach((logits, b) => expect(logits, `step ${i}, sequence ${STEPS[i]![b]!.id}`).toEqual(want[i]![b])));
      // The fine-tune really changes the model (the equality is not the foundation's twice).
      if (c.app !== 'llama') expect(want[0]![0]).not.toEqual(foundation[0]![0]);
      // Every sequence released from every block.
      for (const rt of ex.load(c.app)) expect(rt.cache?.sequenceIds() ?? []).toEqual([]);
    });
  }
});

describe('per-block batching', () => {
  it('a mixed batch runs each shared block once over the rows of every application using it, on views (no copies)', () => {
    const runs: BlockRun[] = [];
    const ex = executor(zoo, { onBlockRun: (r) => runs.push(r) });
    ex.step([
      { app: 'sql', id: 's1', tokens: p1 },
      { app: 'chat', id: 'c1', tokens: p2 },
      { app: 'sql', id: 's2', tokens: p2 },
      { app: 'llama', id: 'l1', tokens: p1 },
    ]);
    const ran = runs.map((r) => [formatBlock(r.block), r.apps.join('+'), r.rows, r.copiedRows]);
    // Grouped by application in order of first appearance: sql (s1, s2), chat, llama.
    expect(ran.slice(0, 4)).toEqual([
      ['embed', 'sql+chat+llama', 2 * p1.length + 2 * p2.length, 0],
      ['attn(0)+lora', 'sql', p1.length + p2.length, 0],
      ['attn(0)+lora', 'chat', p2.length, 0],
      ['attn(0)', 'llama', p1.length, 0],
    ]);
    // sql and llama share the foundation's FFNs: one call over both applications' rows, gathered once (sql's
    // rows and llama's are not adjacent: chat's lie between them).
    const ffn0 = runs.filter((r) => formatBlock(r.block) === 'ffn(0)');
    expect(ffn0.map((r) => [r.apps, r.sequences, r.rows, r.copiedRows])).toEqual([[['sql', 'llama'], ['s1', 's2', 'l1'], 2 * p1.length + p2.length, 2 * p1.length + p2.length]]);
    expect(runs.filter((r) => formatBlock(r.block) === 'head').map((r) => r.apps)).toEqual([['sql', 'chat', 'llama']]);
    // After the gather, sql and llama stay together: the later shared FFNs run on the gathered tensor.
    expect(runs.filter((r) => formatBlock(r.block) === 'ffn(3)').map((r) => r.copiedRows)).toEqual([0]);
    for (const id of ['s1', 'c1', 's2', 'l1']) ex.release(id);
  });

  it('a single application never copies its hidden state between blocks', () => {
    const runs: BlockRun[] = [];
    const ex = executor(zooB, { onBlockRun: (r) => runs.push(r) });
    ex.step([{ app: 'bitfit', id: 'x', tokens: p1 }, { app: 'bitfit', id: 'y', tokens: p2 }]);
    expect(runs.map((r) => r.copiedRows)).toEqual([0, 0, 0, 0, 0]);
    expect(runs.map((r) => r.rows)).toEqual(Array(5).fill(p1.length + p2.length));
    ex.release('x');
    ex.release('y');
  });

  it('greedy tokens of applications sharing blocks, batched together, equal each application run alone', () => {
    const prompts = calibration(5, 9, config.vocabSize, 77);
    const requests = [
      { app: 'bitfit', prompt: prompts[0]!, maxTokens: 8 },
      { app: 'adapter', prompt: prompts[1]!, maxTokens: 6 },
      { app: 'llama', prompt: prompts[2]!.slice(0, 5), maxTokens: 8 },
      { app: 'adapter', prompt: prompts[3]!, maxTokens: 3 },
      { app: 'bitfit', prompt: prompts[4]!.slice(0, 7), maxTokens: 5 },
    ];
    const runs: BlockRun[] = [];
    const batched = executor(zooB, { onBlockRun: (r) => runs.push(r) }).generate(requests);
    const alone = requests.map((r) => executor(zooB).generate([r])[0]!);
    expect(batched).toEqual(alone);
    expect(batched.map((r) => r.tokens.length)).toEqual([8, 6, 8, 3, 5]);
    // The shared blocks ran every application in one batch: `embed layer(0)` (a layers(0, 1) call over its own
    // cache) with the rows of all three, prefill and every decode step.
    const first = runs.filter((r) => formatBlock(r.block) === 'embed layer(0)');
    expect(first[0]!.apps).toEqual(['bitfit', 'adapter', 'llama']);
    expect(first[0]!.rows).toBe(9 + 9 + 5 + 9 + 7);
    expect(first.map((r) => r.sequences.length)).toEqual([5, 5, 5, 4, 4, 3, 2, 2]);
    const shared = runs.filter((r) => formatBlock(r.block) === 'ffn(1) attn(2)');
    expect(shared[0]!.apps).toEqual(['bitfit', 'adapter', 'llama']);
    expect(shared).toHaveLength(8);
  });

  it('batched decoding across the LoRA applications equals separate runs too (LoraDelta and merged)', () => {
    const prompts = calibration(3, 8, config.vocabSize, 91);
    const requests = [
      { app: 'sql', prompt: prompts[0]!, maxTokens: 5 },
      { app: 'chat', prompt: prompts[1]!, maxTokens: 5 },
      { app: 'vicuna', prompt: prompts[2]!, maxTokens: 5 },
      { app: 'prefix', prompt: prompts[0]!, maxTokens: 5 },
    ];
    for (const lora of ['delta', 'merged'] as const) {
      const batched = executor(zoo, { lora }).generate(requests);
      expect(batched).toEqual(requests.map((r) => executor(zoo, { lora }).generate([r])[0]!));
    }
  });
});

describe('the executor', () => {
  it('holds every shared tensor once in the pool', () => {
    const p = new DevicePool(store);
    const ex = new ChainExecutor(zoo, p, { kvPages: 2 });
    for (const app of ['llama', 'sql', 'chat', 'vicuna']) ex.load(app);
    const unique = new Map<string, number>();
    for (const app of ['llama', 'sql', 'chat', 'vicuna']) for (const b of zoo.chain(app).blocks) for (const t of b.tensors) unique.set(t.id, t.shape.reduce((a, c) => a * c, 4));
    expect(p.stats().nativeBytes).toBe([...unique.values()].reduce((a, b) => a + b, 0));
    ex.dispose();
    expect(p.stats().nativeBytes).toBe(0);
    p.dispose();
  });

  it('refuses an unknown application, a sequence under two applications, and a step its KV pages cannot hold, leaving every cache as it was', () => {
    const ex = executor(zoo, { kvPages: 1 });
    expect(() => ex.step([{ app: 'nope', id: 'q', tokens: [1] }])).toThrow(ZooNotFoundError);
    ex.step([{ app: 'sql', id: 'q', tokens: p2 }]);
    expect(() => ex.step([{ app: 'chat', id: 'q', tokens: [1] }])).toThrow(/sequence q belongs to sql, not chat/);
    expect(() => ex.step([{ app: 'sql', id: 'q', tokens: [1] }, { app: 'sql', id: 'q', tokens: [2] }])).toThrow(/appears twice/);
    // 16 tokens per page: the second sequence does not fit the one page of each block.
    const lengths = () => ex.load('sql').map((rt) => rt.cache?.sequenceIds().map((id) => [id, rt.cache!.length(id)]) ?? null);
    const before = lengths();
    expect(() => ex.step([{ app: 'sql', id: 'q', tokens: [1] }, { app: 'chat', id: 'r', tokens: p1 }, { app: 'sql', id: 'big', tokens: calibration(1, 17, config.vocabSize, 5)[0]! }])).toThrow(KvCacheExhaustedError);
    expect(lengths()).toEqual(before);
    // Two new sequences that each fit alone but not together (the page left in chat's blocks).
    expect(() => ex.step([{ app: 'chat', id: 'r', tokens: p1 }, { app: 'chat', id: 'r2', tokens: p2 }])).toThrow(/this step needs 2 new pages there \(sequence r2 included\) but 1 of 1 are free/);
    expect(lengths()).toEqual(before);
    expect(ex.load('chat').every((rt) => (rt.cache?.sequenceIds() ?? []).every((id) => id === 'q'))).toBe(true);
    expect(ex.length('q')).toBe(p2.length);
    expect(ex.length('r')).toBeNull();
    ex.release('q');
    expect(ex.length('q')).toBeNull();
  });

  it('rolls back every block a failed step already ran: no pages kept, no position moved', () => {
    // Positions are checked where a block holds KV: the shared embedding runs, sql's attention block runs (and
    // reserves pages), then llama's attention block refuses a prompt longer than maxPositions.
    const ex = executor(zoo, { maxPositions: 12 });
    ex.step([{ app: 'sql', id: 'old', tokens: p2 }]);
    const caches = () => [...new Set([...ex.load('sql'), ...ex.load('llama')])].map((rt) => rt.cache?.sequenceIds().map((id) => [id, rt.cache!.length(id), rt.cache!.pages(id).length]) ?? null);
    const before = caches();
    const runs: string[] = [];
    const spy = executor(zoo, { maxPositions: 12, onBlockRun: (r) => runs.push(`${formatBlock(r.block)}:${r.apps.join('+')}`) });
    expect(() => spy.step([{ app: 'sql', id: 'new', tokens: p2 }, { app: 'llama', id: 'long', tokens: p1.concat(p1) }])).toThrow(/would reach 22 tokens, more than the model's 12 positions/);
    expect(runs).toEqual(['embed:sql+llama', 'attn(0)+lora:sql']);
    expect(() => ex.step([{ app: 'sql', id: 'old', tokens: [5] }, { app: 'sql', id: 'new', tokens: p2 }, { app: 'llama', id: 'long', tokens: p1.concat(p1) }])).toThrow(/more than the model's 12 positions/);
    expect(caches()).toEqual(before);
    expect(ex.length('old')).toBe(p2.length);
    // The executor goes on as if the failed step never happened.
    ex.step([{ app: 'sql', id: 'old', tokens: [5] }]);
    expect(ex.length('old')).toBe(p2.length + 1);
  });
});

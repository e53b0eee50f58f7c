/**
 * SimulatedDecoder keeps the KV cache exactly as the real DecoderModel does (same lengths, same pages, same
 * free count after every forward, same refusal when pages run out), and under a real ContinuousBatcher its
 * requests generate the documented deterministic tokens and give every page back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContinuousBatcher, type FinishedRequest } from '@tessera/batcher';
import { type DecoderModel, type DecoderSequence, KvCacheExhaustedError, PagedKvCache, generateModel, loadDecoder } from '@tessera/engine';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIMULATED_KV_SHAPE, SimulatedDecoder, simulatedDecode, simulatedGeneration, simulatedPrompt } from '../src/index.js';

let root: string;
let real: DecoderModel;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'tessera-sim-'));
  generateModel(join(root, 'decoder'), { family: 'decoder', size: 'tiny', seed: 3 });
  real = loadDecoder(join(root, 'decoder'));
});
afterAll(() => {
  real.dispose();
  rmSync(root, { recursive: true, force: true });
});

const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (salt + i * 7) % 14);

describe('SimulatedDecoder KV bookkeeping', () => {
  it('matches DecoderModel.forward call for call: lengths, page lists, free pages', () => {
    const realCache = PagedKvCache.create({ ...real.kvShape, numPages: 24 }, real.backend);
    const simCache = PagedKvCache.create({ ...SIMULATED_KV_SHAPE, numPages: 24 });
    const sim = new SimulatedDecoder({ maxPositions: real.config.maxPositions });
    const forwards: DecoderSequence[][] = [
      [{ id: 'a', tokens: tokens(20, 1), key: 'x' }],
      [{ id: 'a', tokens: [3] }, { id: 'b', tokens: tokens(15, 2) }],
      // A prompt continued in a chunk (start > 0, several tokens), and a fresh one-token prompt.
      [{ id: 'b', tokens: tokens(17, 3) }, { id: 'c', tokens: [5] }],
      ...Array.from({ length: 20 }, (_, i): DecoderSequence[] => [{ id: 'a', tokens: [i % 14] }, { id: 'b', tokens: [1] }, { id: 'c', tokens: [2] }]),
    ];
    for (const batch of forwards) {
      real.forward(batch, { cache: realCache, logits: 'last' }).logits?.dispose();
      sim.forward(batch, { cache: simCache, logits: 'last' }).logits?.dispose();
      expect(simCache.freePages).toBe(realCache.freePages);
      expect(simCache.sequenceIds()).toEqual(realCache.sequenceIds());
      for (const id of realCache.sequenceIds()) {
        expect(simCache.length(id)).toBe(realCache.length(id));
        expect(simCache.pages(id)).toEqual(realCache.pages(id));
      }
    }
    expect(sim.last).toEqual({ batchSize: 3, prefillTokens: 0, decodeRows: 3, kvTokens: 41 + 52 + 21 });

    // Out of pages: both refuse the whole forward and change nothing.
    const greedy: DecoderSequence[] = [{ id: 'd', tokens: tokens(250, 4) }];
    expect(() => real.forward(greedy, { cache: realCache })).toThrow(KvCacheExhaustedError);
    expect(() => sim.forward(greedy, { cache: simCache })).toThrow(KvCacheExhaustedError);
    expect(simCache.freePages).toBe(realCache.freePages);
    expect(simCache.hasSequence('d')).toBe(false);
    realCache.dispose();
    simCache.dispose();
  });

  it('one-hot logits: greedy picks simulatedNextToken of the last token at its position', () => {
    const cache = PagedKvCache.create({ ...SIMULATED_KV_SHAPE, numPages: 4 });
    const sim = new SimulatedDecoder();
    const prompt = simulatedPrompt(9, 4);
    const out = sim.forward([{ id: 's', tokens: prompt }], { cache });
    const row = out.logits!.toArray() as Float32Array;
    expect(row.length).toBe(sim.config.vocabSize);
    expect(row.indexOf(1)).toBe(simulatedGeneration(prompt, 1)[0]);
    expect(row.reduce((a, b) => a + b, 0)).toBe(1);
    cache.dispose();
  });
});

describe('SimulatedDecoder under a ContinuousBatcher', () => {
  const run = (numPages: number, kvExhaustion: 'requeue' | 'evict') => {
    const model = new SimulatedDecoder();
    const cache = PagedKvCache.create({ ...SIMULATED_KV_SHAPE, numPages });
    const batcher = new ContinuousBatcher({ model, cache, maxBatch: 8, kvExhaustion, decode: simulatedDecode });
    const finished = new Map<string, FinishedRequest>();
    const evicted = new Map<string, number[]>();
    const prompts = new Map<string, number[]>();
    for (let i = 0; i < 12; i++) {
      const id = `r${i}`;
      const prompt = simulatedPrompt(5 + i, i);
      prompts.set(id, prompt);
      batcher.submit({ id, adapter: i % 2 ? 'lora-a' : null, prompt, maxTokens: 30 + 3 * i, ignoreEos: true }, {
        onFinish: (r) => finished.set(id, r),
        onEvicted: (g) => evicted.set(id, g),
      });
    }
    let steps = 0;
    while (batcher.step()) steps++;
    return { cache, batcher, finished, evicted, prompts, steps };
  };

  it('generates the deterministic tokens to maxTokens and frees every page at the end', () => {
    const { cache, batcher, finished, prompts } = run(256, 'requeue');
    expect(finished.size).toBe(12);
    for (const [id, r] of finished) {
      expect(r.finishReason).toBe('length');
      expect(r.tokens).toEqual(simulatedGeneration(prompts.get(id)!, r.tokens.length));
      expect(r.tokens.length).toBe(30 + 3 * Number(id.slice(1)));
    }
    expect(cache.usedPages).toBe(0);
    expect(cache.sequenceIds()).toEqual([]);
    expect(batcher.stats()).toMatchObject({ running: 0, queued: 0, kvPagesUsed: 0, preemptions: 0 });
    cache.dispose();
  });

  it("a small cache with kvExhaustion 'evict': the newest are evicted with their tokens so far, pages freed", () => {
    const { cache, finished, evicted, prompts } = run(20, 'evict');
    expect(evicted.size).toBeGreaterThan(0);
    expect(finished.size + evicted.size).toBe(12);
    for (const [id, generated] of evicted) expect(generated).toEqual(simulatedGeneration(prompts.get(id)!, generated.length));
    expect(cache.usedPages).toBe(0);
    cache.dispose();
  });
});

/**
 * SimulatedRunner executes the batcher Scheduler's plans the way the engine's StepRunner does, on a bare KV page
 * allocator: its requests generate the documented deterministic tokens (also across preemption by recompute and
 * eviction), it reports each step's shape for the latency model, and every page comes back.
 */
import type { FinishedRequest } from '@tessera/batcher';
import { EngineLoop } from '@tessera/cluster';
import { KvPageAllocator } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import { SimulatedRunner, simulatedDecode, simulatedGeneration, simulatedNextToken, simulatedPrompt } from '../src/index.js';

describe('SimulatedRunner on a plan', () => {
  it('one token per sampled sequence: simulatedNextToken of its last input at its last position; the shape of the step', () => {
    const runner = new SimulatedRunner();
    const prompt = simulatedPrompt(9, 4);
    runner.open({ id: 's', maxTokens: 3, ignoreEos: true });
    runner.open({ id: 't', maxTokens: 1, ignoreEos: true });
    const outcome = runner.run({
      step: 1,
      sequences: [
        { requestId: 's', seqId: 's:1', adapter: null, kind: 'prefill', tokens: prompt, position: 0 },
        { requestId: 't', seqId: 't:1', adapter: 'x', kind: 'decode', tokens: [3], position: 20 },
      ],
      segments: [
        { key: null, start: 0, count: 9 },
        { key: 'x', start: 9, count: 1 },
      ],
      rows: 10,
      reserved: [],
      released: [],
    });
    expect(outcome.results).toEqual([
      { kind: 'token', requestId: 's', token: simulatedGeneration(prompt, 1)[0], text: expect.any(String), finish: null },
      { kind: 'token', requestId: 't', token: simulatedNextToken(3, 20), text: expect.any(String), finish: 'length' },
    ]);
    expect(runner.last).toEqual({ batchSize: 2, prefillTokens: 9, decodeRows: 1, kvTokens: 9 + 21 });
    expect(runner.text('s')).toBe(simulatedDecode(simulatedGeneration(prompt, 1)));
    expect(() => runner.open({ id: 'u', maxTokens: 2, stop: ['a'] })).toThrow(/stop strings/);
  });
});

describe('SimulatedRunner under the Scheduler (EngineLoop)', () => {
  const run = (numPages: number, kvExhaustion: 'requeue' | 'evict') => {
    const pages = new KvPageAllocator(numPages);
    const loop = new EngineLoop({ runner: new SimulatedRunner(), pages, maxBatch: 8, kvExhaustion });
    const finished = new Map<string, FinishedRequest>();
    const evicted = new Map<string, number[]>();
    const streamed = new Map<string, number[]>();
    const prompts = new Map<string, number[]>();
    for (let i = 0; i < 12; i++) {
      const id = `r${i}`;
      const prompt = simulatedPrompt(5 + i, i);
      prompts.set(id, prompt);
      streamed.set(id, []);
      loop.submit({ id, adapter: i % 2 ? 'lora-a' : null, prompt, maxTokens: 30 + 3 * i, ignoreEos: true }, {
        onToken: (t) => streamed.get(id)!.push(t),
        onFinish: (r) => finished.set(id, r),
        onEvicted: (g) => evicted.set(id, g),
      });
    }
    let steps = 0;
    while (loop.step()) steps++;
    return { pages, loop, finished, evicted, streamed, prompts, steps };
  };

  it('generates the deterministic tokens to maxTokens and frees every page at the end', () => {
    const { pages, loop, finished, prompts } = run(256, 'requeue');
    expect(finished.size).toBe(12);
    for (const [id, r] of finished) {
      expect(r.finishReason).toBe('length');
      expect(r.tokens).toEqual(simulatedGeneration(prompts.get(id)!, r.tokens.length));
      expect(r.tokens.length).toBe(30 + 3 * Number(id.slice(1)));
      expect(r.text).toBe(simulatedDecode(r.tokens));
    }
    expect(pages.usedPages).toBe(0);
    expect(pages.sequenceIds()).toEqual([]);
    expect(loop.stats()).toMatchObject({ running: 0, queued: 0, kvPagesUsed: 0, preemptions: 0 });
  });

  it('a small cache with requeue: preempted requests recompute and still produce the unpreempted tokens', () => {
    const { pages, loop, finished, streamed, prompts } = run(20, 'requeue');
    expect(loop.stats().preemptions).toBeGreaterThan(0);
    expect(finished.size).toBe(12);
    for (const [id, r] of finished) {
      expect(r.tokens).toEqual(simulatedGeneration(prompts.get(id)!, r.tokens.length));
      expect(streamed.get(id)).toEqual(r.tokens);
    }
    expect(pages.usedPages).toBe(0);
  });

  it("a small cache with kvExhaustion 'evict': the newest are evicted with their tokens so far, pages freed", () => {
    const { pages, finished, evicted, prompts } = run(20, 'evict');
    expect(evicted.size).toBeGreaterThan(0);
    expect(finished.size + evicted.size).toBe(12);
    for (const [id, generated] of evicted) expect(generated).toEqual(simulatedGeneration(prompts.get(id)!, generated.length));
    expect(pages.usedPages).toBe(0);
  });
});

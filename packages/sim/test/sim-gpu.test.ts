/**
 * SimGpu's timing contract: a step's tokens and finishes reach the cluster when the step ends (t + latency), a
 * placement made mid-step joins the next step, evictions are reported when the step starts, and the GPU keeps
 * the busy/idle and batch-time accounts the timeline is built from.
 */
import type { HostEvent, Placement } from '@tessera/cluster';
import { describe, expect, it } from 'vitest';
import { EventQueue, LinearLatencyModel, SimGpu, simulatedGeneration, simulatedPrompt } from '../src/index.js';

const everyStep10ms = new LinearLatencyModel({ interceptMs: 10, perDecodeRowMs: 0, perPrefillTokenMs: 0, perKvTokenMs: 0 });

const placement = (id: string, promptTokens: number, maxTokens: number, salt = 0): Placement => ({
  request: { id, adapter: 'lora-0000', prompt: simulatedPrompt(promptTokens, salt), maxTokens, sampling: {}, stop: [], ignoreEos: true },
  generated: [],
  attempt: 0,
});

function harness(kvTokens: number) {
  const queue = new EventQueue();
  const gpu = new SimGpu({ id: 'gpu-0', queue, latency: everyStep10ms, kvTokens, maxBatch: 4 });
  const log: { t: number; event: HostEvent }[] = [];
  const submit = (p: Placement) => gpu.submit(p, (event) => log.push({ t: queue.now(), event }));
  return { queue, gpu, log, submit };
}

describe('SimGpu', () => {
  it('delivers each step’s events at its end; a mid-step placement joins the next step', () => {
    const { queue, gpu, log, submit } = harness(1024);
    submit(placement('a', 5, 3));
    queue.schedule(5, () => {
      submit(placement('b', 4, 2, 1));
      // Mid-step: the load already lists b (queued), the step in flight is a alone.
      expect(gpu.load().requests.map((r) => r.id)).toEqual(['a', 'b']);
      expect(gpu.currentBatch).toBe(1);
    });
    // Mid-step 2 (a + b, 10–20): 10 ms of batch 1, then 5 of batch 2 so far, and the whole step by its end.
    queue.schedule(15, () => {
      expect(gpu.batchMsUntil(15)).toBe(10 + 2 * 5);
      expect(gpu.batchMsUntil(20)).toBe(10 + 2 * 10);
    });
    queue.run();
    const at = (id: string) => log.filter((l) => l.event.id === id).map((l) => `${l.event.kind}@${l.t}`);
    expect(at('a')).toEqual(['token@10', 'token@20', 'token@30', 'finish@30']);
    expect(at('b')).toEqual(['token@20', 'token@30', 'finish@30']);
    const tokensOf = (id: string) => log.filter((l) => l.event.id === id && l.event.kind === 'token').map((l) => (l.event as { token: number }).token);
    expect(tokensOf('a')).toEqual(simulatedGeneration(simulatedPrompt(5, 0), 3));
    // Steps: a (batch 1) 0–10, a+b 10–20, a+b 20–30; then idle.
    expect(gpu.steps).toBe(3);
    expect(gpu.busyMs).toBe(30);
    expect(gpu.batchMsUntil(30)).toBe(10 + 20 + 20);
    expect(gpu.tokens).toBe(5);
    expect(gpu.idlePeriods).toEqual([{ startMs: 0, endMs: 0 }, { startMs: 30, endMs: null }]);
    expect(gpu.cache.usedPages).toBe(0);
    gpu.dispose();
  });

  it('reports an eviction when the step starts, before that step’s tokens', () => {
    // 3 pages of 16 tokens: two 15-token prompts grow until the newest must go.
    const { queue, gpu, log, submit } = harness(48);
    submit(placement('old', 15, 30));
    submit(placement('new', 15, 30, 1));
    queue.run();
    const eviction = log.find((l) => l.event.kind === 'evicted')!;
    expect(eviction.event.id).toBe('new');
    expect(eviction.t % 10).toBe(0);
    const generated = (eviction.event as Extract<HostEvent, { kind: 'evicted' }>).generated;
    expect(generated).toEqual(simulatedGeneration(simulatedPrompt(15, 1), generated.length));
    // The step that started when 'new' was evicted ran 'old' alone; its token arrives one step later.
    const next = log.find((l) => l.event.id === 'old' && l.t > eviction.t)!;
    expect(next.t).toBe(eviction.t + 10);
    expect(log.filter((l) => l.event.id === 'new' && l.t > eviction.t)).toEqual([]);
    expect(log.filter((l) => l.event.id === 'old' && l.event.kind === 'token').length).toBe(30);
    expect(gpu.evictions).toBe(1);
    expect(gpu.cache.usedPages).toBe(0);
    gpu.dispose();
  });
});

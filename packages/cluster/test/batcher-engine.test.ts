/**
 * batcherEngine's admin side, over a fake loop: the requests it holds, retiring an adapter (refused at once,
 * released once its requests ended), unknown adapters refused, and the sample of queues and steps.
 */
import type { BatcherRequest, BatcherStats, RequestListener } from '@tessera/batcher';
import { UnknownAdapterError } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { batcherEngine, type HostEvent, type HostableLoop, type Placement } from '../src/index.js';

function fakeLoop() {
  const listeners = new Map<string, RequestListener>();
  let histogram = new Map<number, number>();
  let steps = 0;
  const loop: HostableLoop = {
    submit: (request: BatcherRequest, listener: RequestListener = {}) => void listeners.set(request.id, listener),
    cancel: (id) => listeners.delete(id),
    stats: () => ({ running: 1, queued: 2, steps, preemptions: 3, batchSizeHistogram: histogram }) as unknown as BatcherStats,
  };
  const step = (sizes: number[]) => {
    histogram = new Map(histogram);
    for (const s of sizes) histogram.set(s, (histogram.get(s) ?? 0) + 1);
    steps += sizes.length;
  };
  return { loop, listeners, step };
}

const placement = (id: string, adapter: string | null): Placement => ({
  request: { id, adapter, prompt: [1], maxTokens: 4, sampling: {}, stop: [], ignoreEos: false },
  attempt: 0,
  generated: [],
});

describe('batcherEngine', () => {
  it('retires an adapter: new placements refused at once, released after its last request ended', async () => {
    const { loop, listeners } = fakeLoop();
    const known = new Set(['a', 'b']);
    const engine = batcherEngine(loop, { adapters: { names: () => [...known], isResident: () => true, has: (n) => known.has(n) } });
    const events: HostEvent[] = [];
    engine.submit(placement('r1', 'a'), (e) => events.push(e));
    engine.submit(placement('r2', 'b'), (e) => events.push(e));
    expect(() => engine.submit(placement('r3', 'zzz'), () => {})).toThrow(UnknownAdapterError);
    listeners.get('r1')!.onToken!(7, 'x');
    expect(engine.requests()).toEqual([
      { id: 'r1', attempt: 0, adapter: 'a', tokens: 1 },
      { id: 'r2', attempt: 0, adapter: 'b', tokens: 0 },
    ]);

    let released = false;
    const retired = engine.retire('a', () => {
      known.delete('a');
      released = true;
    });
    expect(engine.retiring('a')).toBe(true);
    expect(() => engine.submit(placement('r4', 'a'), () => {})).toThrow(UnknownAdapterError);
    await Promise.resolve();
    expect(released).toBe(false);
    listeners.get('r1')!.onFinish!({ id: 'r1', tokens: [7], text: 'x', finishReason: 'length', promptTokens: 1, completionTokens: 1 });
    await retired;
    expect(released).toBe(true);
    expect(engine.retiring('a')).toBe(false);
    expect(events.map((e) => e.kind)).toEqual(['token', 'finish']);
  });

  it('samples its queues, the adapters running and waiting, and the steps since the previous sample', () => {
    const { loop, listeners, step } = fakeLoop();
    const engine = batcherEngine(loop);
    engine.submit(placement('r1', 'a'), () => {});
    engine.submit(placement('r2', 'b'), () => {});
    listeners.get('r2')!.onToken!(1, 'y');
    step([1, 2, 2]);
    expect(engine.sample()).toEqual({ running: 1, waiting: 2, runningAdapters: ['b'], waitingAdapters: ['a'], steps: 3, batchSizes: [1, 2, 2], preemptions: 3 });
    step([4]);
    expect(engine.sample()).toMatchObject({ steps: 1, batchSizes: [4] });
  });
});

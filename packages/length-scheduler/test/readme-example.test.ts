/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { LengthEstimator, makeRuntimeProfile, MultiLevelDispatcher, RuntimeScheduler, uniformLengths } from '@tessera/length-scheduler';

// Eight static-shape runtimes (64 … 512 tokens) with their profiled service times; SLO 150 ms.
const lengths = uniformLengths(512, 8);
const profiles = lengths.map((l) => makeRuntimeProfile({ maxLength: l, serviceMs: 0.6 + l / 110, overheadMs: 0.8, sloMs: 150 }));
// The first allocation needs a prior: Q_i, requests per SLO window by ideal runtime (here 1 000 req/s, mostly short).
const estimator = new LengthEstimator(lengths, { sloMs: 150, prior: { q: [90, 40, 10, 5, 2, 1, 1, 1] } });
const runtimeScheduler = new RuntimeScheduler({ profiles, estimator, instances: 10 });
const { result } = await runtimeScheduler.solveNow(); // then runtimeScheduler.poll() every few seconds: it re-solves every 120 s
console.log(result.instances, result.solver, result.meanLatencyMs.toFixed(2));

// One dispatcher level per runtime, filled with the allocated instances.
const dispatcher = new MultiLevelDispatcher({ lengths, capacities: profiles.map((p) => p.capacity) });
result.instances.forEach((n, runtime) => { for (let k = 0; k < n; k++) dispatcher.add(`gpu-${runtime}-${k}`, runtime); });
for (const length of [20, 70, 300]) {
  estimator.observe(length); // feeds the next allocation
  const instance = dispatcher.dispatch(length); // enqueue there, padded to lengths[instance.runtime]
  console.log(length, '->', instance.id, lengths[instance.runtime]);
}
dispatcher.complete('gpu-0-0'); // when a request on that instance finishes
// #endregion readme-example

describe('README example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const found = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(found).toBe(region);
  });

  it('allocates the ten instances by length and dispatches each request at or above its length', () => {
    expect(printed[0]).toEqual([[4, 3, 1, 0, 1, 0, 0, 1], 'dp', '2.82']);
    expect(printed.slice(1)).toEqual([
      [20, '->', 'gpu-0-0', 64],
      [70, '->', 'gpu-1-0', 128],
      [300, '->', 'gpu-4-0', 320],
    ]);
    expect(dispatcher.instance('gpu-0-0').outstanding).toBe(0);
    expect(estimator.peek().counts).toEqual([1, 1, 0, 0, 1, 0, 0, 0]);
  });
});

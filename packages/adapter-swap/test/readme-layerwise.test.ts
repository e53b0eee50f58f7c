/**
 * The README's layer-wise staging example, run: its ```ts block (the second of the README) is, character for
 * character, the `// #region readme-layerwise` block below (readme-example.test.ts checks both blocks).
 */
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
const spy = vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-layerwise
import { LayerwisePipeline, simulateLayerwisePipeline } from '@tessera/adapter-swap';

const pipeline = new LayerwisePipeline({ layers: 6, slots: 4 }); // mode 'fine' (default), 'coarse', 'synchronized'
pipeline.submit(); // a full batch arrived: batch 0
const first = pipeline.next('cpu'); // its retrieval; then its gather, its copies and its layers

// The same rules under virtual time, with stage times (measured or assumed):
const times = { retrieve: 6, gather: 2, copy: 1.5, compute: 2.5 };
const run = simulateLayerwisePipeline({ layers: 6, slots: 4, arrivalsMs: [0, 0, 0], durationMs: (a) => times[a.kind] });
console.log(first, run.makespanMs); // after the first retrieval, gather and copy, the compute never waits
// #endregion readme-layerwise

spy.mockRestore();

describe('README: layer-wise staging', () => {
  it('prints the first action and the makespan its comments describe', () => {
    expect(printed).toEqual([[{ kind: 'retrieve', batch: 0, slot: 0 }, 6 + 2 + 1.5 + 3 * 6 * 2.5]]);
  });
});

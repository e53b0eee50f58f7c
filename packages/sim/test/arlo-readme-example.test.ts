/**
 * The README's Arlo example, run. Its ```ts block is, character for character, the `// #region arlo-example`
 * block below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region arlo-example
import { generateArloTrace, runArloSimulation } from '@tessera/sim';

// 10 simulated GPUs, 20 simulated seconds of Twitter-Bursty load (MMPP) at 900 req/s, BERT-Base on TensorRT
// (the paper's §10.6 latencies, dynamic shapes penalised as on a GPU); the allocation is re-solved every 5 s.
const trace = generateArloTrace({ kind: 'bursty', ratePerSec: 900, durationMs: 20_000, seed: 1 });
for (const scheme of ['st', 'dt', 'arlo'] as const) {
  const r = await runArloSimulation({ scheme, instances: 10, trace, profile: 'bert-base', periodMs: 5_000 });
  const { meanMs, p98Ms } = r.latency;
  console.log(scheme, meanMs.toFixed(2), p98Ms.toFixed(2), r.paddingWaste.toFixed(2), r.allocations.at(-1)!.instances);
}
// #endregion arlo-example

describe('README Arlo example', () => {
  it('is the code the README shows', () => {
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = source.split('// #region arlo-example\n')[1]!.split('// #endregion arlo-example')[0]!;
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    expect(readme).toContain('```ts\n' + region + '```');
  });

  it('prints one line per scheme, Arlo fastest and ST padding most', () => {
    expect(printed.map((p) => p[0])).toEqual(['st', 'dt', 'arlo']);
    const mean = (i: number) => Number(printed[i]![1]);
    expect(mean(2)).toBeLessThan(mean(1));
    expect(mean(1)).toBeLessThan(mean(0));
    expect(Number(printed[0]![3])).toBeGreaterThan(Number(printed[2]![3]));
    process.stdout.write(`${printed.map((p) => p.map((x) => (Array.isArray(x) ? `[${x.join(', ')}]` : String(x))).join(' ')).join('\n')}\n`);
  });
});

/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { rampProfile, runClusterSimulation } from '@tessera/sim';

// 4 simulated A100s for 2 simulated minutes: Poisson arrivals ramping to 40 requests/s and back, zipf-1.5 over
// 100 adapters, Llama-2 7B step latencies (Punica Fig. 1), 4,000 KV tokens per GPU so some requests migrate.
const durationMs = 120_000;
const result = runClusterSimulation({
  gpus: 4,
  durationMs,
  arrivals: rampProfile({ peakPerSec: 40, durationMs }),
  lengths: { kind: 'punica-synthetic', maxLength: 256 },
  kvTokensPerGpu: 4_000,
  sampleEveryMs: 10_000,
  seed: 1,
});
const { requests, tokens, migrations, meanBusyBatch, tokenCheck } = result.totals;
console.log({ requests, tokens, migrations, meanBusyBatch: meanBusyBatch.toFixed(1), exact: tokenCheck.exact });
for (const s of result.timeline) {
  console.log(`${s.tMs / 1000}s  ${s.arrivalsPerSec.toFixed(1)} req/s  ${s.tokensPerSec.toFixed(0)} tok/s  batches ${s.batch.map((b) => b.toFixed(0)).join(' ')}`);
}
// #endregion readme-example

describe('README example', () => {
  it('is the code the README shows', () => {
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = source.split('// #region readme-example\n')[1]!.split('// #endregion readme-example')[0]!;
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    expect(readme).toContain('```ts\n' + region + '```');
  });

  it('runs: every request finishes with exactly its tokens, some migrate, one timeline line per 10 s', () => {
    expect(result.totals.completed).toBe(result.totals.requests);
    expect(result.totals.tokenCheck.exact).toBe(result.totals.requests);
    expect(result.totals.migrations).toBeGreaterThan(0);
    expect(printed.length).toBe(1 + result.timeline.length);
    expect(printed[0]![0]).toMatchObject({ requests: result.totals.requests, exact: result.totals.requests });
  });
});

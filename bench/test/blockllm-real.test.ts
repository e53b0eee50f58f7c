/**
 * The real miniature at a toy size: two BlockLLM servers (BlockLLM's provisioning, then per-model) from the app's
 * sources, the same trace over HTTP. Checked: the structure of the rows and ratios, that both sides produced every
 * token the trace asked for, at the same per-device memory, and that BlockLLM's side batched across applications
 * while PM's never did. Throughput and latency are results, not asserted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { runBlockllmRealMiniature } from '../src/benches/blockllm-real.js';
import { quickContext as ctx } from './quick-context.js';

const demoDir = mkdtempSync(join(tmpdir(), 'tessera-blockllm-real-'));
afterAll(() => rmSync(demoDir, { recursive: true, force: true }));

describe('blockllm real miniature (toy size)', () => {
  it('serves one trace with per-model provisioning and with BlockLLM at equal memory', async () => {
    const out = await runBlockllmRealMiniature(ctx, { quick: true, apps: 3, requests: 9, rate: 200, output: [2, 4], rounds: 2, demoSize: 'tiny', demoDir });
    expect(out.rows.map((r) => r.config)).toEqual(['PM', 'BlockLLM']);
    const [pm, blocks] = out.rows;
    for (const r of out.rows) {
      expect(r.requests).toBe(9);
      expect(r.rounds).toBe(2);
      expect(r.apps).toBe(3);
      expect(r.devices).toBe(2);
      expect(r.tokens as number).toBeGreaterThanOrEqual(9 * 2);
      expect(r.tokens_per_s as number).toBeGreaterThan(0);
      expect(r.p95_ms as number).toBeGreaterThanOrEqual(r.p50_ms as number);
    }
    expect(pm!.tokens).toBe(blocks!.tokens);
    expect(pm!.device_mb).toBe(blocks!.device_mb);
    expect(pm!.shared_batches).toBe(0);
    expect(blocks!.shared_batches as number).toBeGreaterThan(0);
    for (const v of Object.values(out.ratios)) expect(Number.isFinite(v) && v > 0).toBe(true);
    expect(out.notes.join('\n')).toMatch(/target ≥ 1\.3/);
    expect(out.notes.join('\n')).toMatch(/greedy outputs identical/);
  }, 240_000);
});

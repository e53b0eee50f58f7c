/**
 * The train bench at its --quick size (tiny models): four rows (decoder and encoder, full and LoRA) with their
 * FLOP accounting, the forward/backward/optimizer split adding up to the step, the ratios finite, and
 * well-formed SVGs. Timing values are not asserted: they are measurements, not behaviour.
 */
import { describe, expect, it } from 'vitest';
import { trainBench } from '../src/benches/train.js';
import { findAll, parseXml } from './xml.js';
import { fixedRoofline, quickContext as ctx } from './quick-context.js';

describe('train bench (--quick)', () => {
  it('measures full and LoRA training of both families and reports full_mfu and lora_vs_full_tokens_per_s', async () => {
    const out = await trainBench.run(ctx);
    expect(out.rows.map((r) => `${r.family} ${r.kind}`)).toEqual(['decoder full', 'decoder lora', 'encoder full', 'encoder lora']);
    for (const r of out.rows) {
      const n = r.matmul_params as number;
      expect(r.flops_per_token).toBe(r.kind === 'full' ? 6 * n : 4 * n + 6 * (r.trainable_params as number));
      if (r.kind === 'full') expect(r.trainable_params).toBe(r.params);
      else expect(r.trainable_params as number).toBeLessThan((r.params as number) / 5);
      expect(r.tokens_per_s as number).toBeGreaterThan(0);
      expect(r.mfu as number).toBeCloseTo(((r.flops_per_token as number) * (r.tokens_per_s as number)) / (fixedRoofline.peakGflops * 1e9), 12);
      for (const k of ['forward_ms', 'backward_ms', 'optimizer_ms']) expect(r[k] as number).toBeGreaterThanOrEqual(0);
      expect(Number.isFinite(r.loss as number)).toBe(true);
    }
    // The tiny decoder: 2 layers of q,k,v,o,gate,up,down (64·64·2 + 32·64·2 + 176·64·3 each) and its untied LM head.
    expect(out.rows[0]!.matmul_params).toBe(2 * (64 * 64 * 2 + 32 * 64 * 2 + 176 * 64 * 3) + 1024 * 64);
    for (const key of ['full_mfu', 'lora_vs_full_tokens_per_s', 'full_mfu_decoder', 'full_mfu_encoder', 'lora_vs_full_tokens_per_s_decoder', 'lora_vs_full_tokens_per_s_encoder']) {
      expect(Number.isFinite(out.ratios[key]), key).toBe(true);
      expect(out.ratios[key]!, key).toBeGreaterThan(0);
    }
    expect(out.ratios.full_mfu).toBe(Math.min(out.ratios.full_mfu_decoder!, out.ratios.full_mfu_encoder!));
    for (const svg of [out.svg, ...Object.values(out.moreSvgs ?? {})]) {
      expect(findAll(parseXml(svg), 'rect').length).toBeGreaterThan(0);
    }
  }, 60_000);
});

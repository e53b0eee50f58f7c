/**
 * `weights: 'int8'`: the decoder's linear weights (and LM head) held as Q8_0 int8 (llama.cpp's layout), quantized at
 * load. Accuracy against the f32 model on the generated mini decoder (the bench's: seed 0, logits sharpened 8×):
 *   - greedy generation, 4 prompts × 32 tokens: the fraction of generated tokens equal to the f32 model's, position by
 *     position (stated in the log; asserted >= 0.75 — a random-weight model has close runner-ups, so an early
 *     divergence changes the rest of a sequence);
 *   - teacher-forced on the f32 model's sequences: argmax agreement per position (asserted >= 0.9) and the max
 *     |Δlogit| over every position (stated; asserted below 5% of the logits' range, so a broken scale shows).
 * LoRA deltas stay f32 on top of the int8 base: the delta an adapter adds to the logits is the same, within the
 * int8 error, on the f32 and the int8 base (tiny decoder, whose FFN width 176 also exercises a down projection left in
 * f32 because 176 is not a multiple of 32).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError, isQ8Weight } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import { loadLoraAdapter } from '../src/formats/peft.js';
import { generateLoraAdapter, generateModel } from '../src/gen/index.js';
import { LoraDelta, mergeLoraIntoWeights } from '../src/hooks/lora-delta.js';
import { DecoderModel } from '../src/models/decoder.js';
import { loadDecoder, loadEncoder } from '../src/models/load.js';
import { decoderInt8WeightNames } from '../src/models/quantized.js';
import { agreementWithF32, allLogits, describeAgreement } from './accuracy.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-int8-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("weights: 'int8' on the mini decoder", () => {
  const dir = join(root, 'mini');
  const { config } = generateModel(dir, { family: 'decoder', size: 'mini', seed: 0, sharpen: 8 });
  const f32 = loadDecoder(dir);
  const int8 = loadDecoder(dir, { weights: 'int8' });
  afterAll(() => {
    f32.dispose();
    int8.dispose();
  });

  it('holds the linears and the tied LM head as Q8_0, about a quarter of the f32 bytes', () => {
    for (const name of decoderInt8WeightNames(config)) expect(isQ8Weight(int8.weights.get(name)), name).toBe(true);
    expect(isQ8Weight(int8.weights.get('model.norm.weight'))).toBe(false);
    const ratio = int8.weights.nbytes / f32.weights.nbytes;
    expect(ratio).toBeGreaterThan(0.26);
    expect(ratio).toBeLessThan(0.28); // 34 / 128 of the quantized weights, plus the f32 norms
    // hostF32 dequantizes: within half a step of the f32 weight
    const name = 'model.layers.0.mlp.up_proj.weight';
    const a = f32.weights.hostF32(name), b = int8.weights.hostF32(name);
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
    expect(worst).toBeGreaterThan(0);
    expect(worst).toBeLessThan(0.01);
  });

  it('generates greedily like the f32 model (agreement and max |Δlogit| stated)', () => {
    const a = agreementWithF32(f32, int8, config);
    console.log(describeAgreement('int8 vs f32', a));
    expect(a.forced).toBeGreaterThanOrEqual(0.9);
    expect(a.freeRunning).toBeGreaterThanOrEqual(0.75);
    expect(a.maxDelta).toBeGreaterThan(0);
    expect(a.maxDelta).toBeLessThan(0.05 * (a.hi - a.lo));
  });
});

describe("weights: 'int8' with LoRA and the refusals", () => {
  const dir = join(root, 'tiny');
  const { config } = generateModel(dir, { family: 'decoder', size: 'tiny', seed: 5, sharpen: 4 });
  generateLoraAdapter(join(root, 'lora'), { base: config, rank: 8, seed: 6, bStd: 0.05, targets: ['q_proj', 'v_proj', 'gate_proj', 'down_proj'] });

  it('keeps LoRA deltas in f32 on top of the int8 base', () => {
    const f32 = loadDecoder(dir);
    const int8 = loadDecoder(dir, { weights: 'int8' });
    try {
      // FFN 176 is not a multiple of 32: down_proj stays f32, the rest is Q8_0
      expect(isQ8Weight(int8.weights.get('model.layers.0.mlp.down_proj.weight'))).toBe(false);
      expect(isQ8Weight(int8.weights.get('model.layers.0.mlp.up_proj.weight'))).toBe(true);
      const lora = new LoraDelta(new Map([['a', loadLoraAdapter(join(root, 'lora'), { base: config })]]));
      const tokens = [config.bosTokenId, 5, 9, 200, 17, 3, 88, 41];
      const base32 = allLogits(f32, tokens), with32 = allLogits(f32, tokens, [lora], 'a');
      const base8 = allLogits(int8, tokens), with8 = allLogits(int8, tokens, [lora], 'a');
      let deltaNorm = 0, diffNorm = 0, int8Err = 0;
      for (let i = 0; i < base32.length; i++) {
        const d32 = with32[i]! - base32[i]!, d8 = with8[i]! - base8[i]!;
        deltaNorm = Math.max(deltaNorm, Math.abs(d32));
        diffNorm = Math.max(diffNorm, Math.abs(d8 - d32));
        int8Err = Math.max(int8Err, Math.abs(base8[i]! - base32[i]!));
      }
      expect(deltaNorm).toBeGreaterThan(0.05); // the adapter changes the logits
      // The adapter's effect on the int8 base matches its effect on the f32 base to within the int8 error itself.
      expect(diffNorm).toBeLessThan(Math.max(0.25 * deltaNorm, 2 * int8Err));
      lora.dispose();
    } finally {
      f32.dispose();
      int8.dispose();
    }
  });

  it('merges a LoRA into the int8 base by dequantizing the targeted weights (the merge equals the hooked delta)', () => {
    const f32 = loadDecoder(dir);
    const int8 = loadDecoder(dir, { weights: 'int8' });
    const merged = loadDecoder(dir, { weights: 'int8' });
    const adapter = loadLoraAdapter(join(root, 'lora'), { base: config });
    const lora = new LoraDelta(new Map([['a', adapter]]));
    try {
      const q = 'model.layers.0.self_attn.q_proj.weight';
      expect(isQ8Weight(merged.weights.get(q))).toBe(true);
      mergeLoraIntoWeights(merged.weights, adapter);
      // Targeted weights are f32 now; the rest stay Q8_0.
      expect(merged.weights.get(q).dtype).toBe('f32');
      expect(isQ8Weight(merged.weights.get('model.layers.0.mlp.up_proj.weight'))).toBe(true);
      const mergedModel = new DecoderModel(config, merged.weights);
      const tokens = [config.bosTokenId, 5, 9, 200, 17, 3, 88, 41];
      const hooked = allLogits(int8, tokens, [lora], 'a'), viaMerge = allLogits(mergedModel, tokens);
      const base = allLogits(int8, tokens), base32 = allLogits(f32, tokens);
      let err = 0, effect = 0, int8Err = 0;
      for (let i = 0; i < hooked.length; i++) {
        err = Math.max(err, Math.abs(hooked[i]! - viaMerge[i]!));
        effect = Math.max(effect, Math.abs(hooked[i]! - base[i]!));
        int8Err = Math.max(int8Err, Math.abs(base[i]! - base32[i]!));
      }
      expect(effect).toBeGreaterThan(0.05);
      // The merged weights multiply f32 activations, the hooked int8 path quantizes them per block of 32: the two
      // differ by the int8 error, and by far less than the adapter's effect (a garbage merge would not).
      expect(err).toBeLessThan(2 * int8Err);
      expect(err).toBeLessThan(0.1 * effect);
    } finally {
      lora.dispose();
      for (const m of [f32, int8, merged]) m.dispose();
    }
  });

  it('refuses an unknown format and int8 on an encoder with typed errors', () => {
    expect(() => loadDecoder(dir, { weights: 'int4' as never })).toThrow(InvalidArgumentError);
    const enc = join(root, 'enc');
    generateModel(enc, { family: 'encoder', size: 'tiny', seed: 1 });
    expect(() => loadEncoder(enc, { weights: 'int8' })).toThrow(/decoder family/);
  });
});

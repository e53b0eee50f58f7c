/**
 * `compute: 'bf16'` (or TESSERA_COMPUTE=bf16): linear weights held as bf16 and every linear layer run with its
 * activations rounded to bf16 and f32 sums. Accuracy against the f32 model on the generated mini decoder (the
 * bench's: seed 0, logits sharpened 8×), measured as for int8 weights (accuracy.ts): free-running greedy agreement
 * over 4 prompts × 32 tokens (asserted >= 0.75), teacher-forced argmax agreement (>= 0.9) and the max |Δlogit| (stated;
 * asserted below 5% of the logits' span). The encoder in bf16 stays within the same bound of its f32 logits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError } from '@tessera/native';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { generateModel } from '../src/gen/index.js';
import { loadDecoder, loadEncoder } from '../src/models/load.js';
import { decoderInt8WeightNames } from '../src/models/quantized.js';
import { agreementWithF32, describeAgreement } from './accuracy.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-bf16-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("compute: 'bf16' on the mini decoder", () => {
  const dir = join(root, 'mini');
  const { config } = generateModel(dir, { family: 'decoder', size: 'mini', seed: 0, sharpen: 8 });
  const f32 = loadDecoder(dir);
  const bf16 = loadDecoder(dir, { compute: 'bf16' });
  afterAll(() => {
    f32.dispose();
    bf16.dispose();
  });

  it('holds the linears and the tied LM head as bf16, norms as f32, half the bytes of the converted weights', () => {
    expect(bf16.weights.compute).toBe('bf16');
    expect(f32.weights.compute).toBe('f32');
    for (const name of decoderInt8WeightNames(config)) expect(bf16.weights.get(name).dtype, name).toBe('bf16');
    expect(bf16.weights.get('model.norm.weight').dtype).toBe('f32');
    const ratio = bf16.weights.nbytes / f32.weights.nbytes;
    expect(ratio).toBeGreaterThan(0.49);
    expect(ratio).toBeLessThan(0.51);
  });

  it('generates greedily like the f32 model (agreement and max |Δlogit| stated)', () => {
    const a = agreementWithF32(f32, bf16, config);
    console.log(describeAgreement('bf16 compute vs f32', a));
    expect(a.forced).toBeGreaterThanOrEqual(0.9);
    expect(a.freeRunning).toBeGreaterThanOrEqual(0.75);
    expect(a.maxDelta).toBeGreaterThan(0);
    expect(a.maxDelta).toBeLessThan(0.05 * (a.hi - a.lo));
  });
});

describe("compute: 'bf16' on the encoder, from the environment, and the refusals", () => {
  const enc = join(root, 'enc');
  generateModel(enc, { family: 'encoder', size: 'tiny', seed: 3 });
  const dec = join(root, 'dec');
  generateModel(dec, { family: 'decoder', size: 'tiny', seed: 4 });
  const saved = process.env.TESSERA_COMPUTE;
  afterEach(() => {
    if (saved === undefined) delete process.env.TESSERA_COMPUTE;
    else process.env.TESSERA_COMPUTE = saved;
  });

  it('runs the encoder layers in bf16 within 5% of the f32 hidden states span (pooler and classifier stay f32)', () => {
    const f32 = loadEncoder(enc);
    const bf16 = loadEncoder(enc, { compute: 'bf16' });
    try {
      expect(bf16.weights.get('bert.encoder.layer.0.attention.self.query.weight').dtype).toBe('bf16');
      expect(bf16.weights.get('bert.pooler.dense.weight').dtype).toBe('f32');
      const seqs = [{ ids: [2, 17, 99, 5, 300, 41, 7] }, { ids: [2, 8, 9] }];
      const run = (m: typeof f32): Float32Array => {
        const out = m.forward(seqs, { outputs: { hidden: true } });
        out.layout.dispose();
        try {
          return out.hidden!.toArray() as Float32Array;
        } finally {
          out.hidden!.dispose();
        }
      };
      const a = run(f32), b = run(bf16);
      let maxDelta = 0, lo = Infinity, hi = -Infinity;
      for (let i = 0; i < a.length; i++) {
        maxDelta = Math.max(maxDelta, Math.abs(a[i]! - b[i]!));
        lo = Math.min(lo, a[i]!);
        hi = Math.max(hi, a[i]!);
      }
      expect(maxDelta).toBeGreaterThan(0);
      expect(maxDelta).toBeLessThan(0.05 * (hi - lo));
    } finally {
      f32.dispose();
      bf16.dispose();
    }
  });

  it('takes the default from TESSERA_COMPUTE; an explicit option wins', () => {
    process.env.TESSERA_COMPUTE = 'bf16';
    const fromEnv = loadDecoder(dec);
    const explicit = loadDecoder(dec, { compute: 'f32' });
    try {
      expect(fromEnv.weights.compute).toBe('bf16');
      expect(explicit.weights.compute).toBe('f32');
    } finally {
      fromEnv.dispose();
      explicit.dispose();
    }
  });

  it('refuses an unknown mode, bf16 with int8 weights, with typed errors naming the source', () => {
    expect(() => loadDecoder(dec, { compute: 'fp8' as never })).toThrow(/option compute must be 'f32' or 'bf16', got fp8/);
    process.env.TESSERA_COMPUTE = 'half';
    expect(() => loadDecoder(dec)).toThrow(InvalidArgumentError);
    expect(() => loadDecoder(dec)).toThrow(/TESSERA_COMPUTE must be 'f32' or 'bf16', got half/);
    expect(() => loadDecoder(dec, { compute: 'bf16', weights: 'int8' })).toThrow(/exclude each other/);
  });
});

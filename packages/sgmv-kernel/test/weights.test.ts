/**
 * PEFT adapter → SGMV layout, with real adapter directories from the engine's seeded generator: the packed
 * stacks are checked element by element against the PEFT tensors, and bad adapters fail with typed errors.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ConfigError,
  type LoraAdapter,
  type LoraModule,
  TensorShapeError,
  decoderLinearModules,
  generateLoraAdapter,
  loadLoraAdapter,
  presetConfig,
} from '@tessera/engine';
import { BudgetExceededError, Tensor, allocatorStats, getCpuBackend, setBudget } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import { LoraWeightSet, UnsupportedAdapterError, loraAdapterSource, loraSites, packLoraForSgmv, readLoraForSgmv } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'sgmv-weights-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const decoder = presetConfig('decoder', 'tiny'); // hidden 64, 2 layers, k/v 32 wide (GQA), FFN 176
const encoder = presetConfig('encoder', 'tiny');

// Ranks differ by module: q has rank 8 in layer 0 and 4 in layer 1; v rank 8; down rank 6 (alpha_pattern too).
const mixed = generateLoraAdapter(join(root, 'mixed'), {
  base: decoder,
  rank: 8,
  alpha: 16,
  targets: ['q_proj', 'v_proj', 'down_proj'],
  rankPattern: { 'layers.1.self_attn.q_proj': 4, down_proj: 6 },
  alphaPattern: { down_proj: 3 },
  seed: 11,
});

function f32(t: Tensor): Float32Array {
  return t.toArray() as Float32Array;
}

describe('loraSites', () => {
  it('maps every per-layer Linear to its layer, engine slice name and [in, out]', () => {
    const sites = loraSites(decoder);
    expect(sites.size).toBe(7 * decoder.numLayers);
    expect(sites.get('model.layers.1.self_attn.k_proj')).toEqual({ layer: 1, slice: 'k', inFeatures: 64, outFeatures: 32 });
    expect(sites.get('model.layers.0.mlp.down_proj')).toEqual({ layer: 0, slice: 'down', inFeatures: 176, outFeatures: 64 });
    const enc = loraSites(encoder);
    const slices = new Set([...enc.values()].map((s) => s.slice));
    expect(slices).toEqual(new Set(['query', 'key', 'value', 'attn_out', 'ffn_in', 'ffn_out']));
    expect(enc.get('bert.encoder.layer.1.attention.self.value')?.layer).toBe(1);
  });
});

describe('packLoraForSgmv', () => {
  const adapter = loadLoraAdapter(mixed.dir, { base: decoder });
  afterAll(() => adapter.dispose());

  it('stacks A [L, r, in] as stored and B [L, r, out] transposed and scaled, zero-padding ranks', () => {
    const host = packLoraForSgmv(adapter, decoder);
    expect(host.name).toBe('mixed');
    expect(host.numLayers).toBe(2);
    expect([...host.projections.keys()].sort()).toEqual(['down', 'q', 'v']);
    expect(host.rank).toBe(8);
    const q = host.projections.get('q')!;
    expect(q).toMatchObject({ r: 8, inFeatures: 64, outFeatures: 64 });
    const down = host.projections.get('down')!;
    expect(down).toMatchObject({ r: 6, inFeatures: 176, outFeatures: 64 });
    let bytes = 0;
    for (const p of host.projections.values()) bytes += p.a.byteLength + p.b.byteLength;
    expect(host.nbytes).toBe(bytes);

    for (const [slice, p] of host.projections) {
      for (let layer = 0; layer < 2; layer++) {
        const name = decoderLinearModules(layer)[slice as 'q' | 'v' | 'down'];
        const m = adapter.modules.get(name)!;
        const a = f32(m.a);
        const b = f32(m.b);
        for (let j = 0; j < p.r; j++) {
          for (let k = 0; k < p.inFeatures; k++) {
            expect(p.a[(layer * p.r + j) * p.inFeatures + k]).toBe(j < m.r ? a[j * p.inFeatures + k] : 0);
          }
          for (let o = 0; o < p.outFeatures; o++) {
            expect(p.b[(layer * p.r + j) * p.outFeatures + o]).toBe(j < m.r ? Math.fround(b[o * m.r + j]! * m.scale) : 0);
          }
        }
      }
    }
    // The rank pattern really produced two ranks for q, and the alpha pattern a different scale for down.
    expect(adapter.modules.get('model.layers.1.self_attn.q_proj')!.r).toBe(4);
    expect(adapter.modules.get('model.layers.0.mlp.down_proj')!.scale).toBeCloseTo(3 / 6, 12);
  });

  it('leaves layers the adapter does not target at zero', () => {
    const onlyLayer0 = generateLoraAdapter(join(root, 'layer0'), { base: decoder, rank: 4, targets: 'model\\.layers\\.0\\.mlp\\.up_proj', seed: 3 });
    const a = loadLoraAdapter(onlyLayer0.dir);
    try {
      const p = packLoraForSgmv(a, decoder).projections.get('up')!;
      const half = p.a.length / 2;
      expect(p.a.subarray(0, half).some((v) => v !== 0)).toBe(true);
      expect(p.a.subarray(half).every((v) => v === 0)).toBe(true);
      expect(p.b.subarray(p.b.length / 2).every((v) => v === 0)).toBe(true);
    } finally {
      a.dispose();
    }
  });

  it('packs encoder adapters under the encoder slice names', () => {
    const enc = generateLoraAdapter(join(root, 'enc'), { base: encoder, rank: 4, targets: ['query', 'value', 'dense'], seed: 5 });
    const a = loadLoraAdapter(enc.dir, { base: encoder });
    try {
      const host = packLoraForSgmv(a, encoder);
      expect([...host.projections.keys()].sort()).toEqual(['attn_out', 'ffn_in', 'ffn_out', 'query', 'value']);
      expect(host.projections.get('ffn_in')).toMatchObject({ inFeatures: encoder.hiddenSize, outFeatures: encoder.intermediateSize });
    } finally {
      a.dispose();
    }
  });

  it('rejects an adapter made for another model, naming the tensor (TensorShapeError)', () => {
    const wider = { ...decoder, intermediateSize: 200 };
    expect(() => packLoraForSgmv(adapter, wider)).toThrow(TensorShapeError);
    expect(() => packLoraForSgmv(adapter, wider)).toThrow(/base_model\.model\.model\.layers\.0\.mlp\.down_proj\.lora_A\.weight/);
    const shallow = { ...decoder, numLayers: 1 };
    expect(() => packLoraForSgmv(adapter, shallow)).toThrow(UnsupportedAdapterError);
    expect(() => packLoraForSgmv(adapter, shallow)).toThrow(/model\.layers\.1\..*not a per-layer hook site/);
  });

  /** The adapter above with one field replaced (adapters are plain data; the tensors are the loaded ones). */
  function variant(changes: Partial<LoraAdapter>): LoraAdapter {
    return { ...adapter, ...changes, dispose() {} };
  }

  it('refuses trained biases, modules_to_save and LoRA on the LM head (UnsupportedAdapterError, a ConfigError)', () => {
    const bias = Tensor.from(new Float32Array(64), [64]);
    try {
      const withBias = variant({ biases: new Map([['model.layers.0.self_attn.q_proj.bias', bias]]) });
      expect(() => packLoraForSgmv(withBias, decoder)).toThrow(UnsupportedAdapterError);
      expect(() => packLoraForSgmv(withBias, decoder)).toThrow(/trained biases.*q_proj\.bias/);
      const withSaved = variant({ savedModules: new Map([['lm_head.weight', bias]]) });
      expect(() => packLoraForSgmv(withSaved, decoder)).toThrow(/modules_to_save: lm_head\.weight/);
      expect(() => packLoraForSgmv(withSaved, decoder)).toThrow(ConfigError);
    } finally {
      bias.dispose();
    }
    const q = adapter.modules.get('model.layers.0.self_attn.q_proj')!;
    const head: LoraModule = { ...q, module: 'lm_head' };
    const withHead = variant({ modules: new Map([...adapter.modules, ['lm_head', head]]) });
    expect(() => packLoraForSgmv(withHead, decoder)).toThrow(/lm_head\.lora_A\.weight adapts lm_head, which is not a per-layer hook site/);
  });
});

describe('readLoraForSgmv', () => {
  it('reads, validates and packs like loadLoraAdapter + packLoraForSgmv, freeing the temporaries', async () => {
    const cpu = getCpuBackend();
    const before = allocatorStats(cpu).inUse;
    const host = await readLoraForSgmv(mixed.dir, decoder, { name: 'tenant-7' });
    expect(allocatorStats(cpu).inUse).toBe(before);
    expect(host.name).toBe('tenant-7');
    const adapter = loadLoraAdapter(mixed.dir);
    try {
      const direct = packLoraForSgmv(adapter, decoder);
      for (const [slice, p] of direct.projections) {
        expect(host.projections.get(slice)!.a).toEqual(p.a);
        expect(host.projections.get(slice)!.b).toEqual(p.b);
      }
    } finally {
      adapter.dispose();
    }
    expect((await readLoraForSgmv(mixed.dir, decoder)).name).toBe('mixed');
  });

  it('rejects an adapter for another model before reading tensors, and a missing directory', async () => {
    const before = allocatorStats(getCpuBackend()).inUse;
    await expect(readLoraForSgmv(mixed.dir, { ...decoder, hiddenSize: 96, headDim: 24 })).rejects.toThrow(TensorShapeError);
    await expect(readLoraForSgmv(join(root, 'nope'), decoder)).rejects.toThrow(ConfigError);
    expect(allocatorStats(getCpuBackend()).inUse).toBe(before);
  });
});

describe('LoraWeightSet', () => {
  it('uploads every projection as [L, r, in] / [L, r, out] f32 tensors and frees them on dispose', async () => {
    const host = await readLoraForSgmv(mixed.dir, decoder);
    const before = allocatorStats().inUse;
    const set = LoraWeightSet.upload(host);
    expect(set.name).toBe('mixed');
    expect(set.rank).toBe(8);
    expect(set.numLayers).toBe(2);
    const down = set.projections.get('down')!;
    expect(down.a.shape).toEqual([2, 6, 176]);
    expect(down.b.shape).toEqual([2, 6, 64]);
    expect(f32(down.b)).toEqual(host.projections.get('down')!.b);
    expect(set.nbytes).toBe(host.nbytes);
    expect(allocatorStats().inUse).toBeGreaterThanOrEqual(before + host.nbytes);
    set.dispose();
    set.dispose();
    expect(set.disposed).toBe(true);
    expect(down.a.disposed).toBe(true);
    expect(allocatorStats().inUse).toBe(before);

    const asyncSet = await LoraWeightSet.uploadAsync(host);
    expect(f32(asyncSet.projections.get('q')!.a)).toEqual(host.projections.get('q')!.a);
    asyncSet.dispose();
    expect(allocatorStats().inUse).toBe(before);
  });

  it('frees what it copied when the byte budget runs out midway (nothing lost, nothing leaked)', async () => {
    const host = await readLoraForSgmv(mixed.dir, decoder);
    const stats = allocatorStats();
    const budget = stats.budget;
    // Room for about half the adapter.
    setBudget(stats.inUse + Math.floor(host.nbytes / 2));
    try {
      expect(() => LoraWeightSet.upload(host)).toThrow(BudgetExceededError);
      expect(allocatorStats().inUse).toBe(stats.inUse);
      await expect(LoraWeightSet.uploadAsync(host)).rejects.toThrow(BudgetExceededError);
      expect(allocatorStats().inUse).toBe(stats.inUse);
    } finally {
      setBudget(budget);
    }
  });
});

describe('loraAdapterSource', () => {
  it('is an adapter source: disk → host → device, with byte counts', async () => {
    const source = loraAdapterSource(decoder);
    const host = await source.readHost('tenant-a', mixed.dir);
    expect(host.name).toBe('tenant-a');
    expect(source.hostBytes(host)).toBe(host.nbytes);
    const before = allocatorStats().inUse;
    const device = source.upload(host);
    expect(source.deviceBytes(device)).toBe(device.nbytes);
    expect(device.projections.get('v')!.a.shape).toEqual([2, 8, 64]);
    expect(device.projections.get('v')!.b.shape).toEqual([2, 8, 32]);
    source.disposeDevice(device);
    expect(allocatorStats().inUse).toBe(before);
  });
});

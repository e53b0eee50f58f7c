/**
 * The whole loading path on real files: the generator writes Hugging Face directories and PEFT adapters, the
 * engine loads them back, runs them, and the adapter gives the same logits at the hook sites as merged.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelTensors } from '../src/formats/model-dir.js';
import { loadLoraAdapter } from '../src/formats/peft.js';
import { SafetensorsFile, writeSafetensors } from '../src/formats/safetensors.js';
import { TextTokenizer } from '../src/formats/tokenizer.js';
import { generateLoraAdapter, generateModel } from '../src/gen/index.js';
import { generateBatch } from '../src/generate.js';
import { LoraDelta, mergeLoraIntoWeights } from '../src/hooks/lora-delta.js';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import { loadDecoder, loadEncoder, loadModel } from '../src/models/load.js';
import { OrtModel, exportDecoderOnnx, runDecoderOrt } from '../src/onnx/index.js';
import { normwiseError } from './support/numerics.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-files-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));


describe('generated decoder directory', () => {
  const dir = join(root, 'llama');
  const adapterDir = join(root, 'llama-lora');
  const gen = generateModel(dir, { family: 'decoder', size: 'tiny', seed: 3, sharpen: 4 });
  generateLoraAdapter(adapterDir, { base: gen.config, rank: 8, alpha: 16, targets: ['q_proj', 'v_proj', 'down_proj'], seed: 5 });

  it('loads, and its weights write back to the same bytes', () => {
    const model = loadDecoder(dir);
    expect(model.config).toEqual(gen.config);
    const out = join(root, 'rewritten.safetensors');
    const source = ModelTensors.open(dir);
    const metadata = SafetensorsFile.open(join(dir, 'model.safetensors')).metadata;
    source.close();
    writeSafetensors(out, [...model.weights.tensors].map(([name, t]) => [name, { dtype: t.dtype, shape: t.shape, data: t }] as const), metadata);
    expect(readFileSync(out).equals(readFileSync(join(dir, 'model.safetensors')))).toBe(true);
    model.dispose();
    expect(loadModel(dir)).toBeInstanceOf(Object);
  });

  it('agrees with onnxruntime on the same files', async () => {
    const model = loadDecoder(dir);
    const tok = TextTokenizer.fromDir(dir);
    const ids = tok.encode('The river carried the boats down to the sea.');
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
    const ours = model.forward([{ id: 0, tokens: ids }], { cache, logits: 'all' }).logits!.toArray() as Float32Array;
    const session = await OrtModel.create(exportDecoderOnnx(model.config, (n) => model.weights.hostF32(n)));
    const theirs = await runDecoderOrt(session, ids);
    await session.release();
    expect(normwiseError(ours, theirs)).toBeLessThan(1e-4);
    cache.dispose();
    model.dispose();
  });

  it('a PEFT adapter from disk: hook sites = merged weights; it changes the greedy tokens', () => {
    const model = loadDecoder(dir);
    const adapter = loadLoraAdapter(adapterDir, { base: model.config });
    expect(adapter.modules.size).toBe(3 * model.config.numLayers);
    const tok = TextTokenizer.fromDir(dir);
    const prompt = tok.encode('Rivers and boats');
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 32 }, model.backend);
    const delta = new LoraDelta(new Map([['lora', adapter]]));
    const hooked = model.forward([{ id: 'h', tokens: prompt, key: 'lora' }], { cache, deltas: [delta] }).logits!.toArray() as Float32Array;

    const merged = loadDecoder(dir);
    mergeLoraIntoWeights(merged.weights, adapter);
    const viaMerge = merged.forward([{ id: 'm', tokens: prompt }], { cache }).logits!.toArray() as Float32Array;
    expect(normwiseError(hooked, viaMerge)).toBeLessThan(1e-5);
    cache.release('h');
    cache.release('m');

    const request = { prompt, maxTokens: 12, ignoreEos: true };
    const decode = (ids: number[]) => tok.decode(ids);
    const [base, withLora] = generateBatch(model, [request, { ...request, key: 'lora' }], { cache, deltas: [delta], decode });
    const [mergedOut] = generateBatch(merged, [request], { cache, decode });
    expect(withLora!.tokens).toEqual(mergedOut!.tokens);
    expect(withLora!.tokens).not.toEqual(base!.tokens);
    expect(typeof base!.text).toBe('string');

    // Stop strings end generation and are cut from the text.
    expect(base!.text.length).toBeGreaterThan(6);
    const stopAt = base!.text.slice(3, 6);
    const [stopped] = generateBatch(model, [{ ...request, stop: [stopAt] }], { cache, decode });
    expect(stopped!.finishReason).toBe('stop');
    expect(stopped!.text).toBe(base!.text.slice(0, base!.text.indexOf(stopAt)));
    expect(cache.stats().usedPages).toBe(0);
    adapter.dispose();
    delta.dispose();
    cache.dispose();
    model.dispose();
    merged.dispose();
  });
});

describe('generated encoder directory', () => {
  const dir = join(root, 'bert');
  const adapterDir = join(root, 'bert-lora');
  const gen = generateModel(dir, { family: 'encoder', size: 'tiny', seed: 4, sharpen: 4 });
  generateLoraAdapter(adapterDir, { base: gen.config, rank: 4, alpha: 8, targets: ['query', 'value', 'dense'], seed: 6 });

  it('classifies tokenized text; a PEFT adapter at the hook sites equals the merged model', () => {
    const model = loadEncoder(dir);
    const tok = TextTokenizer.fromDir(dir);
    const texts = ['the boats came home', 'a quiet river at night', 'go'];
    const seqs = texts.map((t) => ({ ids: tok.encode(t), key: 'lora' }));
    expect(seqs[0]!.ids[0]).toBe(tok.specialTokenIds.cls);
    const adapter = loadLoraAdapter(adapterDir, { base: model.config });
    // 'dense' matches attention.output.dense, intermediate.dense and output.dense of every layer.
    expect(adapter.modules.size).toBe(5 * gen.config.numLayers);
    const delta = new LoraDelta(new Map([['lora', adapter]]));
    const hooked = model.forward(seqs, { deltas: [delta] });

    const merged = loadEncoder(dir);
    mergeLoraIntoWeights(merged.weights, adapter);
    const viaMerge = merged.forward(seqs.map(({ ids }) => ({ ids })));
    expect(normwiseError(hooked.hidden!.toArray() as Float32Array, viaMerge.hidden!.toArray() as Float32Array)).toBeLessThan(1e-5);
    expect(normwiseError(hooked.logits!.toArray() as Float32Array, viaMerge.logits!.toArray() as Float32Array)).toBeLessThan(1e-5);
    expect(hooked.logits!.shape).toEqual([3, gen.config.numLabels]);
    adapter.dispose();
    delta.dispose();
    model.dispose();
    merged.dispose();
  });
});

/**
 * The README's examples, run. Every ```ts block of README.md is, character for character, one of the
 * `// #region readme-…` blocks below (in order; the first test checks it), so the README shows exactly the code
 * this file runs and cannot drift from the API. The Quick start runs at module load, as a reader's script would;
 * the tests then check what it printed and produced, and exercise the custom delta it defines.
 */
import { readFileSync, rmSync } from 'node:fs';
import { Tensor as NativeTensor } from '@tessera/native';
import { afterAll, describe, expect, it, vi } from 'vitest';
import type { GenerateResult } from '@tessera/engine';

// The Quick start prints its results: keep them (and the test output clean). Copied out of the spy because the
// shared vitest config restores mocks, and with them their recorded calls, before each test.
const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-quick-start
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  LoraDelta, PagedKvCache, TextTokenizer, generateBatch, generateLoraAdapter, generateModel,
  loadDecoder, loadEncoder, loadLoraAdapter,
} from '@tessera/engine';

const root = mkdtempSync(join(tmpdir(), 'tessera-'));
const dir = (name: string) => join(root, name);

// A tiny seeded Llama-style decoder and a LoRA adapter for it, written in Hugging Face / PEFT layout, loaded back.
const { config } = generateModel(dir('decoder'), { family: 'decoder', size: 'tiny', seed: 0 });
generateLoraAdapter(dir('lora'), { base: config, rank: 8, seed: 1 });
const decoder = loadDecoder(dir('decoder'));
const adapter = loadLoraAdapter(dir('lora'), { base: config });
const tokenizer = TextTokenizer.fromDir(dir('decoder'));

// One batch, two tenants: rows keyed 'tenant-a' get the adapter at every hook site, the others run the base model.
const cache = PagedKvCache.create({ ...decoder.kvShape, numPages: 64 });
const prompt = tokenizer.encode('The morning train to the coast');
const results = generateBatch(decoder, [{ prompt, maxTokens: 8, key: 'tenant-a' }, { prompt, maxTokens: 8 }], {
  cache,
  deltas: [new LoraDelta(new Map([['tenant-a', adapter]]))],
  decode: (ids) => tokenizer.decode(ids),
});
// Random weights: the text is gibberish, but the same on every run.
for (const r of results) console.log(r.finishReason, r.tokens, JSON.stringify(r.text));

// A tiny BERT-style classifier: a ragged batch of token ids in, logits [batch, numLabels] out.
generateModel(dir('encoder'), { family: 'encoder', size: 'tiny' });
const encoder = loadEncoder(dir('encoder'));
const wordpiece = TextTokenizer.fromDir(dir('encoder'));
const texts = ['a quiet library', 'the storm is coming'];
const logits = encoder.forward(texts.map((text) => ({ ids: wordpiece.encode(text) }))).logits!;
console.log(logits.shape, logits.toArray(), encoder.config.labels); // [2, 3], 2 × 3 scores, the 3 labels

for (const owner of [logits, cache, adapter, decoder, encoder]) owner.dispose(); // frees native memory now
// #endregion readme-quick-start

// #region readme-custom-delta
import { add, type Tensor } from '@tessera/native';
import type { LinearSiteCall, ModelDelta } from '@tessera/engine';

/** y += bias[tenant] on the rows of each tenant that has a bias, at the encoder's attn_out site. */
class AttnOutBias implements ModelDelta {
  constructor(readonly biases: ReadonlyMap<string, Tensor>) {} // tenant key → f32 [hidden]
  linear(call: LinearSiteCall): void {
    if (call.site !== 'attn_out') return;
    for (const { key, start, count } of call.layout.segments) {
      const bias = key === null ? undefined : this.biases.get(key);
      if (!bias || count === 0) continue;
      const y = call.outputs[0]!.y.rows(start, count); // a view of this tenant's rows
      add(y, bias, { out: y });
      y.dispose();
    }
  }
}
// #endregion readme-custom-delta

// #region readme-stages
import type { LayerBoundaryCall } from '@tessera/engine'; // ModelDelta: imported above

// One decoder step in stages, its layers in two pieces: the same bits as one forward.
const staged = loadDecoder(dir('decoder'));
const kv = PagedKvCache.create({ ...staged.kvShape, numPages: 16 });
const step = staged.prepare([{ id: 'r1', tokens: prompt }], { cache: kv }); // checks, reserves KV pages
const hidden = staged.embed(step); // f32 [rows, hidden], the caller's
staged.layers(0, 1, hidden, step); // layer 0 …
staged.layers(1, staged.config.numLayers, hidden, step); // … then the rest
step.commit(); // the new tokens' K/V may now be read by later steps
const lastLogits = staged.head(hidden, step); // [1, vocab]: the last token's
step.dispose(); // frees the scratch (an uncommitted step would give its pages back)

/** Waits before each layer until that layer's adapters are resident (HMI's layer-wise staging). */
class LayerStaging implements ModelDelta {
  constructor(readonly resident: (layer: number) => Promise<void>) {}
  beforeLayer(call: LayerBoundaryCall): Promise<void> {
    return this.resident(call.layer);
  }
}
const waited: number[] = [];
const staging = new LayerStaging(async (layer) => void waited.push(layer));
const again = await staged.forwardAsync([{ id: 'r2', tokens: prompt }], { cache: kv, deltas: [staging] });
// waited is [0, 1]; again.logits equals lastLogits bit for bit.
// #endregion readme-stages

// #region readme-training
import { writeFileSync } from 'node:fs';
import { trainLora } from '@tessera/engine';

// Teach a tiny decoder 8 key → value pairs with a LoRA (sharpen: logits that can become confident).
generateModel(dir('recall-base'), { family: 'decoder', seed: 1, sharpen: 10 });
const pairs = ['river', 'stone', 'cloud', 'maple', 'tiger', 'ocean', 'ember', 'frost']
  .map((value, i) => ({ prompt: `key ${i} ->`, completion: ` ${value}` }));
writeFileSync(dir('recall.jsonl'), pairs.map((p) => JSON.stringify(p)).join('\n')); // or {"text": …} lines, packed
const losses: number[] = [];
const run = trainLora({
  model: dir('recall-base'), data: dir('recall.jsonl'), out: dir('recall-lora'), // out: a PEFT adapter directory
  steps: 60, lr: 1e-2, warmupSteps: 6, batchSize: 8, gradAccum: 1, maxGradNorm: 1, seed: 3,
  lora: { r: 8, alpha: 16 }, // targetModules (default: every Linear), useRslora, dropout
  onProgress: (p) => losses.push(p.loss), // also p.step, p.lr, p.gradNorm, p.tokens, p.evalLoss (with evalData)
});

// Serve the adapter it wrote, as any PEFT adapter: greedy answers through LoraDelta.
const recall = loadLoraAdapter(dir('recall-lora'), { base: run.model.config });
const recallCache = PagedKvCache.create({ ...run.model.kvShape, numPages: 64 });
const answers = generateBatch(run.model,
  pairs.map((p) => ({ prompt: run.tokenizer.encode(p.prompt), maxTokens: 8, key: 'recall' })),
  { cache: recallCache, deltas: [new LoraDelta(new Map([['recall', recall]]))], decode: (ids) => run.tokenizer.decode(ids) });
// answers[i].text === pairs[i].completion
for (const owner of [recall, recallCache, run]) owner.dispose();
// #endregion readme-training

// #region readme-reduced-precision
// Reduced precision, on the quick start's decoder (loadDecoder: imported above).
const int8 = loadDecoder(dir('decoder'), { weights: 'int8' }); // Q8_0 linear weights, int8 activations per block of 32
const bf16 = loadDecoder(dir('decoder'), { compute: 'bf16' }); // bf16 linear weights, activations rounded to bf16, f32 sums
// #endregion readme-reduced-precision

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('README examples', () => {
  it('every ```ts block of the README is a region of this file, in order', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
    const regions = [...source.matchAll(/^\/\/ #region (readme-[\w-]+)\n([\s\S]*?)^\/\/ #endregion \1$/gm)].map((m) => m[2]);
    expect(regions).toHaveLength(5);
    expect(blocks).toEqual(regions);
  });

  it('quick start: generates on the base model and through the adapter, and the adapter changes the tokens', () => {
    const [tuned, base] = results as [GenerateResult, GenerateResult];
    expect(printed).toHaveLength(3);
    for (const r of results) {
      expect(r.promptTokens).toBe(prompt.length);
      expect(r.tokens.length).toBeGreaterThanOrEqual(1);
      expect(r.tokens.length).toBeLessThanOrEqual(8);
      expect(r.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < config.vocabSize)).toBe(true);
      expect(r.finishReason === 'length' ? r.tokens.length === 8 : r.finishReason === 'eos').toBe(true);
      // The text is what the tokenizer makes of the tokens (an ending EOS adds none).
      expect(typeof r.text).toBe('string');
      expect(r.text).toBe(tokenizer.decode(r.finishReason === 'eos' ? r.tokens.slice(0, -1) : r.tokens));
    }
    results.forEach((r, i) => expect(printed[i]).toEqual([r.finishReason, r.tokens, JSON.stringify(r.text)]));
    // The tokenizer's template starts the prompt with the model's BOS.
    expect(prompt[0]).toBe(config.bosTokenId);
    expect(tuned.tokens).not.toEqual(base.tokens);
  });

  it('quick start: classifies a ragged batch into finite logits [batch, numLabels]', () => {
    const [shape, values, labels] = printed[2]! as [number[], Float32Array, string[]];
    expect(shape).toEqual([2, 3]);
    expect(values).toBeInstanceOf(Float32Array);
    expect(values).toHaveLength(6);
    expect(values.every(Number.isFinite)).toBe(true);
    expect([...values.subarray(0, 3)]).not.toEqual([...values.subarray(3, 6)]);
    expect(labels).toEqual(['negative', 'neutral', 'positive']);
  });

  it('quick start: disposes the logits, the cache, the adapter and both models', () => {
    expect(logits.disposed).toBe(true);
    expect(() => cache.layer(0)).toThrow(/disposed/);
    expect([...adapter.modules.values()].every((m) => m.a.disposed && m.b.disposed)).toBe(true);
    for (const model of [decoder, encoder]) expect([...model.weights.tensors.values()].every((t) => t.disposed)).toBe(true);
  });

  it('stages: two pieces of layers give the forward\'s bits; forwardAsync awaits each layer boundary in order', () => {
    expect(waited).toEqual([0, 1]);
    expect(again.logits!.toArray()).toEqual(lastLogits.toArray());
    const whole = staged.forward([{ id: 'r3', tokens: prompt }], { cache: kv });
    expect(whole.logits!.toArray()).toEqual(lastLogits.toArray());
    expect(kv.length('r1')).toBe(prompt.length);
    for (const owner of [whole.logits!, again.logits!, lastLogits, hidden, kv, staged]) owner.dispose();
  });

  it('custom delta: changes only the rows of the tenant it has a bias for', () => {
    const model = loadEncoder(dir('encoder'));
    const hidden = model.config.hiddenSize;
    const bias = NativeTensor.from(new Float32Array(hidden).fill(0.5), [hidden]);
    const ids = wordpiece.encode('the garden was planted in spring');
    const sequences = [{ ids, key: 'tenant-b' }, { ids }, { ids, key: 'tenant-c' }];
    const plain = model.forward(sequences);
    const biased = model.forward(sequences, { deltas: [new AttnOutBias(new Map([['tenant-b', bias]]))] });
    const [p, b] = [plain.logits!.toArray() as Float32Array, biased.logits!.toArray() as Float32Array];
    expect([...b.subarray(0, 3)]).not.toEqual([...p.subarray(0, 3)]);
    // Rows of other tenants are untouched, in the same batch: bitwise equal.
    expect([...b.subarray(3, 9)]).toEqual([...p.subarray(3, 9)]);
    for (const t of [bias, plain.hidden!, plain.pooled!, plain.logits!, biased.hidden!, biased.pooled!, biased.logits!]) t.dispose();
    model.dispose();
  });

  it('reduced precision: the int8 model holds Q8_0 weights, the bf16 model bf16 weights and compute', () => {
    expect(bf16.weights.compute).toBe('bf16');
    expect(bf16.weights.get('model.layers.0.self_attn.q_proj.weight').dtype).toBe('bf16');
    expect(int8.weights.get('model.layers.0.self_attn.q_proj.weight').dtype).toBe('u8');
    for (const m of [int8, bf16]) m.dispose();
  });

  it('training: the LoRA learns every pair and the adapter it wrote serves the answers', () => {
    expect(losses).toHaveLength(60);
    expect(losses[59]!).toBeLessThan(losses[0]! / 5);
    expect(answers.map((a) => a.text)).toEqual(pairs.map((p) => p.completion));
    expect(answers.every((a) => a.finishReason === 'eos')).toBe(true);
  });
});

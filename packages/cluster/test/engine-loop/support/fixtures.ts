/**
 * A tiny generated Llama-style decoder (Hugging Face directory, seeded) and real PEFT LoRA adapters for it on
 * all seven projections, loaded through the engine's one loading path. Sharpened logits keep greedy margins
 * wide, so token-exact comparisons test the batching, not float noise.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type DecoderModel,
  type GenerateRequest,
  LoraDelta,
  type LoraAdapter,
  PagedKvCache,
  TextTokenizer,
  generateBatch,
  generateLoraAdapter,
  generateModel,
  loadDecoder,
  loadLoraAdapter,
} from '@tessera/engine';
import { randomInts } from '@tessera/test-utils';

export const ALL_PROJECTIONS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

export interface Fixture {
  root: string;
  modelDir: string;
  model: DecoderModel;
  tokenizer: TextTokenizer;
  /** Adapter name → PEFT directory. */
  adapterDirs: Map<string, string>;
  /** Every adapter loaded (for tests that need them all resident). */
  loaded: Map<string, LoraAdapter>;
  delta: LoraDelta;
  decode: (ids: number[]) => string;
  newCache(numPages?: number): PagedKvCache;
  /** Ordinary token ids (no bos/eos), seeded. */
  prompt(length: number, seed: number): number[];
  /** The request run alone with generateBatch (its own cache): the reference every batched run must equal. */
  alone(request: GenerateRequest & { key: string | null }): number[];
  dispose(): void;
}

export function makeFixture(adapterCount: number, options: { seed?: number } = {}): Fixture {
  const root = mkdtempSync(join(tmpdir(), 'tessera-batcher-'));
  const modelDir = join(root, 'model');
  const gen = generateModel(modelDir, { family: 'decoder', size: 'tiny', seed: options.seed ?? 11, sharpen: 4 });
  const adapterDirs = new Map<string, string>();
  for (let i = 0; i < adapterCount; i++) {
    const name = `lora-${String(i).padStart(2, '0')}`;
    const dir = join(root, name);
    generateLoraAdapter(dir, { base: gen.config, rank: 8, alpha: 16, targets: ALL_PROJECTIONS, seed: 100 + i });
    adapterDirs.set(name, dir);
  }
  const model = loadDecoder(modelDir);
  const tokenizer = TextTokenizer.fromDir(modelDir);
  const loaded = new Map<string, LoraAdapter>();
  for (const [name, dir] of adapterDirs) loaded.set(name, loadLoraAdapter(dir, { base: model.config, name }));
  const delta = new LoraDelta(loaded);
  const decode = (ids: number[]) => tokenizer.decode(ids);
  const newCache = (numPages = 256) => PagedKvCache.create({ ...model.kvShape, numPages }, model.backend);
  const vocab = model.config.vocabSize;
  return {
    root,
    modelDir,
    model,
    tokenizer,
    adapterDirs,
    loaded,
    delta,
    decode,
    newCache,
    prompt: (length, seed) => Array.from(randomInts(length, seed, 0, vocab - 2)),
    alone(request) {
      const cache = newCache();
      try {
        return generateBatch(model, [request], { cache, deltas: [delta], decode })[0]!.tokens;
      } finally {
        cache.dispose();
      }
    },
    dispose() {
      delta.dispose();
      for (const a of loaded.values()) a.dispose();
      model.dispose();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/**
 * The demo: a tiny seeded Llama-style foundation and its fine-tunes of every kind the zoo serves, generated once
 * (real Hugging Face and PEFT files from the engine's generator) into a block zoo and reused on later starts:
 *
 *   sql-lora      PEFT LoRA on q_proj, v_proj                 (ingested from its directory, unchanged)
 *   chat-lora     PEFT LoRA on q_proj, v_proj, up_proj        (ingested from its directory)
 *   summarizer    Houlsby bottleneck adapter after the last FFN (zoo PE description)
 *   classifier    BitFit: a q_proj bias in layer 0             (zoo PE description)
 *   persona       prefix-tuning, 4 virtual tokens per layer    (zoo PE description)
 *   vicuna        a full fine-tune (the foundation perturbed), scored layer by layer with the logit lens: its first
 *                 half of layers barely moved (equivalent to the foundation's, score ≥ 0.98, yet not bit-identical:
 *                 adaptive serving's alternative), its second half far (its own blocks)
 *
 * The files are generated on the HTTP thread (generateDemoFiles); the zoo is built from them by the engine worker on
 * its first start (populateDemoZoo) and saved beside its tensor store, so later starts load it.
 */
import { join } from 'node:path';

import type { BlockZoo, TensorRef } from '@tessera/block-zoo';
import { loadLlamaWeights } from '@tessera/block-zoo/fit';
import { decoderConfigOf, ingestFullFineTune, ingestLora } from '@tessera/block-zoo/ingest';
import type { DiskTensorStore } from '@tessera/block-zoo/store';
import { mulberry32 } from '@tessera/core';
import { type DecoderConfig, generateLoraAdapter, generateModel, type SafetensorsEntry, toHfConfigJson, writeSafetensors } from '@tessera/engine';
import { ensureGenerated, generatedDirectory } from '@tessera/server-kit';
import { mkdirSync, writeFileSync } from 'node:fs';

/** Bump when the demo's recipe changes, so a cached demo from an older recipe is regenerated. */
export const DEMO_VERSION = 2;
export const DEMO_MODEL_NAME = 'tessera-tiny-llama';
const SEED = 20_241_117;
/** The final norm's gain: logits with a standard deviation of a few units, so greedy tokens and equivalence scores mean something (§8.1). */
const SHARPEN = 24;

/**
 * The demo foundation's size: 'tiny' (hidden 64, 2 layers: 0.9 MB per model, per-call overheads dominate),
 * 'small' (hidden 256, 4 layers, 8 heads over 4 KV heads, FFN 688: 14 MB per model in f32, where compute dominates,
 * as the real miniature of the bench needs) or 'medium' (hidden 768, 4 layers, 12 heads over 4 KV heads, FFN 2048:
 * 104 MB per model, more than a CPU's last-level cache, so the weights stream from memory). The vocabulary (1024,
 * the generator's tokenizer) is the same.
 */
export type DemoSize = 'tiny' | 'small' | 'medium';
export const DEMO_SIZES: readonly DemoSize[] = ['tiny', 'small', 'medium'];
const SIZE_OVERRIDES: Record<DemoSize, Partial<DecoderConfig>> = {
  tiny: {},
  small: { hiddenSize: 256, numLayers: 4, numHeads: 8, numKvHeads: 4, headDim: 32, intermediateSize: 688 },
  medium: { hiddenSize: 768, numLayers: 4, numHeads: 12, numKvHeads: 4, headDim: 64, intermediateSize: 2048 },
};
/**
 * The noise on the attention output projection (o_proj) of the first half of vicuna's layers: small enough that
 * their logit-lens scores stay above the zoo's 0.98 (tiny: 0.991; small: 0.996, 0.990), large enough that greedy
 * tokens through them differ from the foundation's within a few tokens. One matrix per layer, so vicuna adds few
 * bytes of its own there (16 KiB on the tiny demo); its other tensors there stay the foundation's. The second half
 * gets 0.02 on every matrix (scores 0.3 and below).
 */
const NEAR_STD: Record<DemoSize, number> = { tiny: 0.003, small: 0.0006, medium: 0.0003 };

export interface Demo {
  dir: string;
  modelDir: string;
  modelName: string;
  zooDir: string;
  /** Spare PEFT LoRA directories, not in the zoo (for trying the ingest route). */
  spareDir: string;
  generated: boolean;
}

/** `count` Gaussian-ish values (sum of uniforms) times `std`, seeded. */
function noise(count: number, seed: number, std: number): Float32Array {
  const next = mulberry32(seed);
  return Float32Array.from({ length: count }, () => (next() + next() + next() - 1.5) * 2 * std);
}

/**
 * Writes the foundation's weights as a "Vicuna-like" full fine-tune, a HF Llama directory: noise of std 0.02 on the
 * matrices of layers ≥ `from` (far from the foundation: not equivalent), and of std `nearStd` on the attention output
 * projection of the layers before (0: identical to the foundation's, deduplicated to its tensors).
 */
export function writeFullFineTune(foundationDir: string, dir: string, config: DecoderConfig, from: number, seed: number, nearStd = 0): string {
  const w = loadLlamaWeights(foundationDir);
  mkdirSync(dir, { recursive: true });
  let k = 0;
  const entries = [...w.tensors].map(([name, m]): [string, SafetensorsEntry] => {
    const layer = /^model\.layers\.(\d+)\./.exec(name);
    const data = Float32Array.from(m.data);
    const std = layer === null ? 0 : Number(layer[1]) >= from ? 0.02 : name.endsWith('self_attn.o_proj.weight') ? nearStd : 0;
    if (std > 0 && m.rows > 1) {
      const n = noise(data.length, seed + ++k, std);
      for (let i = 0; i < data.length; i++) data[i]! += n[i]!;
    }
    const vector = m.rows === 1 && !name.endsWith('_proj.weight') && !name.startsWith('lm_head') && !name.startsWith('model.embed');
    return [name, { dtype: 'f32', shape: vector ? [m.cols] : [m.rows, m.cols], data }];
  });
  writeSafetensors(join(dir, 'model.safetensors'), entries, { format: 'pt' });
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(toHfConfigJson(config), null, 2)}\n`);
  return dir;
}

/** The demo's files under `root`: the foundation, the PEFT LoRAs (two for the zoo, one spare) and the full fine-tune. */
export function generateDemoFiles(root: string, log: (line: string) => void = () => {}, size: DemoSize = 'tiny'): { modelDir: string; config: DecoderConfig } {
  const modelDir = join(root, DEMO_MODEL_NAME);
  const { config, bytes } = generateModel(modelDir, { family: 'decoder', size: 'tiny', seed: SEED, sharpen: SHARPEN, overrides: SIZE_OVERRIDES[size] });
  log(`foundation ${DEMO_MODEL_NAME}: ${config.numLayers} layers, hidden ${config.hiddenSize}, vocabulary ${config.vocabSize}, ${(bytes / 1024).toFixed(0)} KiB`);
  const lora = (dir: string, targets: string[], seed: number, rank = 8) =>
    generateLoraAdapter(dir, { base: config, rank, alpha: 2 * rank, targets, seed, baseModelNameOrPath: DEMO_MODEL_NAME });
  lora(join(root, 'peft', 'sql-lora'), ['q_proj', 'v_proj'], SEED + 1);
  lora(join(root, 'peft', 'chat-lora'), ['q_proj', 'v_proj', 'up_proj'], SEED + 2);
  lora(join(root, 'spare', 'poetry-lora'), ['q_proj', 'v_proj'], SEED + 3, 4);
  writeFullFineTune(modelDir, join(root, 'vicuna'), config, Math.floor(config.numLayers / 2), SEED + 30, NEAR_STD[size]);
  return { modelDir, config };
}

/**
 * Ingests the demo's fine-tunes (files from generateDemoFiles under `root`) into a zoo that holds the foundation
 * as `foundation`. Runs in the engine worker: reading a PEFT adapter loads the native addon, which only the
 * engine's thread may do.
 */
export function populateDemoZoo(zoo: BlockZoo, store: DiskTensorStore, root: string, foundation: string, log: (line: string) => void = () => {}): void {
  const config = decoderConfigOf(zoo.model(foundation).archSig);
  for (const name of ['sql-lora', 'chat-lora']) ingestLora(zoo, store, join(root, 'peft', name), { id: name, base: foundation });
  const put = (name: string, shape: number[], seed: number, std: number): TensorRef => {
    const { id } = store.put({ dtype: 'f32', shape }, noise(shape.reduce((a, b) => a * b, 1), seed, std));
    return { name, id, dtype: 'f32', shape };
  };
  const last = config.numLayers - 1;
  const bottleneck = 8;
  const adapter = [put(`adapter.layers.${last}.ffn.down`, [bottleneck, config.hiddenSize], SEED + 10, 0.3), put(`adapter.layers.${last}.ffn.up`, [config.hiddenSize, bottleneck], SEED + 11, 0.3)];
  zoo.addPeFineTune({ id: 'summarizer', base: foundation, method: 'adapter', config: { bottleneck }, tensors: adapter.map((t) => ({ ...t, component: 2 + 2 * last })) });
  zoo.addPeFineTune({ id: 'classifier', base: foundation, method: 'bitfit', config: {}, tensors: [put('model.layers.0.self_attn.q_proj.bias', [config.numHeads * config.headDim], SEED + 12, 2)] });
  const prefix = 4;
  const kvDim = config.numKvHeads * config.headDim;
  const prefixKv = Array.from({ length: config.numLayers }, (_, l) => ({ ...put(`prefix.layers.${l}.kv`, [2, prefix, kvDim], SEED + 20 + l, 0.5), component: 1 + 2 * l }));
  zoo.addPeFineTune({ id: 'persona', base: foundation, method: 'prefix', config: { tokens: prefix }, tensors: prefixKv });
  const calibration = Array.from({ length: 4 }, (_, s) => Array.from({ length: 16 }, (_, t) => (s * 131 + t * 17 + 5) % (config.vocabSize - 2)));
  const { scores } = ingestFullFineTune(zoo, store, join(root, 'vicuna'), { id: 'vicuna', base: foundation, calibration });
  log(`full fine-tune vicuna: logit-lens layer scores ${scores.map((s) => s.toFixed(4)).join(', ')}`);
  const s = zoo.storage();
  log(`zoo: ${zoo.apps().length} applications, ${s.uniqueBlocks} blocks, ${s.uniqueBytes} bytes stored for ${s.logicalBytes} bytes of models`);
}

/** `.tessera/blockllm-demo` under the repository root (or the current directory outside a checkout). */
export function defaultDemoDir(): string {
  return generatedDirectory(import.meta.url, 'blockllm-demo');
}

/** Returns the demo under `dir`, generating it first when it is missing or from an older recipe (DEMO_VERSION). */
export function ensureDemo(dir: string = defaultDemoDir(), log: (line: string) => void = () => {}, size: DemoSize = 'tiny'): Demo {
  // The size is part of the recipe's version: a cached demo of the other size is regenerated.
  const { dir: root, generated } = ensureGenerated(dir, DEMO_VERSION + (size === 'tiny' ? 0 : 1000), (staging) => {
    log(`generating the BlockLLM demo (seed ${SEED}, ${size})`);
    generateDemoFiles(staging, log, size);
    return { model: DEMO_MODEL_NAME, size };
  });
  if (generated) log(`demo written to ${root}`);
  return { dir: root, modelDir: join(root, DEMO_MODEL_NAME), modelName: DEMO_MODEL_NAME, zooDir: join(root, 'zoo'), spareDir: join(root, 'spare'), generated };
}

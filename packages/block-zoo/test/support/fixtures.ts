/**
 * Fixtures of design note §8.1, from the project's generator (no downloads): peaky tiny Llamas (the final norm's
 * gain scales the logits to a standard deviation of ≈ 3–6), "Vicuna-like" full fine-tunes with a per-layer
 * perturbation schedule, and a wider sibling that is an exact orthogonal lift of a model.
 */
import { join } from 'node:path';

import { type DecoderConfig, generateModel, toHfConfigJson, writeSafetensors } from '@tessera/engine';
import { mkdirSync, writeFileSync } from 'node:fs';

import { type LlamaWeights, type Mat, loadLlamaWeights, mat, matmul, transpose } from '../../src/fit/index.js';

/** The tiny fixture shape: vocab 512, hidden 32, 4 layers of 4 heads over 2 KV heads. */
export const FIXTURE_OVERRIDES: Partial<Omit<DecoderConfig, 'family'>> = {
  vocabSize: 512,
  hiddenSize: 32,
  numLayers: 4,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 8,
  intermediateSize: 88,
  maxPositions: 64,
};

/** Logits of an init-std-0.02 model have std ≈ 0.02·√d·gain; this gain puts them at ≈ 4 for d = 32. */
export const PEAKY_SHARPEN = 36;

export function generatePeaky(root: string, name: string, seed: number, overrides: Partial<Omit<DecoderConfig, 'family'>> = {}): { dir: string; config: DecoderConfig; weights: LlamaWeights } {
  const gen = generateModel(join(root, name), { family: 'decoder', seed, sharpen: PEAKY_SHARPEN, overrides: { ...FIXTURE_OVERRIDES, ...overrides } });
  return { dir: gen.dir, config: gen.config, weights: loadLlamaWeights(gen.dir) };
}

/** SplitMix32-based normal samples (Box–Muller), deterministic per seed. */
export function normals(n: number, seed: number): Float64Array {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return ((z ^ (z >>> 16)) >>> 0) / 2 ** 32;
  };
  const out = new Float64Array(n);
  for (let i = 0; i < n; i += 2) {
    const u = Math.max(next(), 1e-12);
    const v = next();
    const r = Math.sqrt(-2 * Math.log(u));
    out[i] = r * Math.cos(2 * Math.PI * v);
    if (i + 1 < n) out[i + 1] = r * Math.sin(2 * Math.PI * v);
  }
  return out;
}

function cloneWeights(w: LlamaWeights): LlamaWeights {
  return { arch: { ...w.arch }, tensors: new Map([...w.tensors].map(([k, m]) => [k, mat(m.rows, m.cols, m.data)])) };
}

/**
 * A "Vicuna-like" full fine-tune: every weight matrix of layer l gets + std_l · N(0, 1) (std_l = schedule[l]);
 * the embedding and the head get `edgeStd` (small: the same tokens mean the same thing).
 */
export function fullFineTune(w: LlamaWeights, schedule: readonly number[], seed: number, edgeStd = 1e-4): LlamaWeights {
  const out = cloneWeights(w);
  let k = 0;
  for (const [name, m] of out.tensors) {
    const layer = /^model\.layers\.(\d+)\./.exec(name);
    if (m.rows === 1) continue; // norm gains stay
    const std = layer ? schedule[Number(layer[1])]! : edgeStd;
    const noise = normals(m.data.length, seed * 7919 + ++k);
    for (let i = 0; i < m.data.length; i++) m.data[i]! += std * noise[i]!;
  }
  return out;
}

/** d_b × d_a with orthonormal columns (Gram–Schmidt on normal samples). */
export function orthonormalColumns(db: number, da: number, seed: number): Mat {
  const q = mat(db, da, normals(db * da, seed));
  for (let c = 0; c < da; c++) {
    for (let p = 0; p < c; p++) {
      let dot = 0;
      for (let r = 0; r < db; r++) dot += q.data[r * da + c]! * q.data[r * da + p]!;
      for (let r = 0; r < db; r++) q.data[r * da + c]! -= dot * q.data[r * da + p]!;
    }
    let norm = 0;
    for (let r = 0; r < db; r++) norm += q.data[r * da + c]! ** 2;
    norm = Math.sqrt(norm);
    for (let r = 0; r < db; r++) q.data[r * da + c]! /= norm;
  }
  return q;
}

function scaleCols(m: Mat, gain: Mat): Mat {
  const out = mat(m.rows, m.cols, m.data);
  for (let r = 0; r < m.rows; r++) for (let c = 0; c < m.cols; c++) out.data[r * m.cols + c]! *= gain.data[c]!;
  return out;
}

/**
 * The exact cross-size sibling of §8.1: B = A lifted by Q (d_b × d_a, orthonormal columns). Norm gains are folded
 * into the weights they feed, B's gains are the uniform √(d_a / d_b), and B's eps is eps·d_a/d_b, so B's normalised
 * state is exactly Q times A's: h_B = Q h_A after every layer, and the stitch to fit is Q.
 */
export function liftToWider(w: LlamaWeights, q: Mat): LlamaWeights {
  const a = w.arch;
  const da = a.hiddenSize;
  const db = q.rows;
  if (q.cols !== da) throw new Error(`Q must be ${db}×${da}`);
  const qt = transpose(q);
  const g = Math.sqrt(da / db);
  const uniform = mat(1, db, new Float64Array(db).fill(g));
  const t = new Map<string, Mat>();
  const get = (n: string) => w.tensors.get(n)!;
  const inputSide = (m: Mat) => matmul(m, qt); // [out, d_a] → [out, d_b]
  const outputSide = (m: Mat) => matmul(q, m); // [d_a, in] → [d_b, in]
  t.set('model.embed_tokens.weight', inputSide(get('model.embed_tokens.weight')));
  for (let l = 0; l < a.numLayers; l++) {
    const p = `model.layers.${l}`;
    const inNorm = get(`${p}.input_layernorm.weight`);
    const postNorm = get(`${p}.post_attention_layernorm.weight`);
    for (const n of ['q_proj', 'k_proj', 'v_proj']) t.set(`${p}.self_attn.${n}.weight`, inputSide(scaleCols(get(`${p}.self_attn.${n}.weight`), inNorm)));
    t.set(`${p}.self_attn.o_proj.weight`, outputSide(get(`${p}.self_attn.o_proj.weight`)));
    for (const n of ['gate_proj', 'up_proj']) t.set(`${p}.mlp.${n}.weight`, inputSide(scaleCols(get(`${p}.mlp.${n}.weight`), postNorm)));
    t.set(`${p}.mlp.down_proj.weight`, outputSide(get(`${p}.mlp.down_proj.weight`)));
    t.set(`${p}.input_layernorm.weight`, uniform);
    t.set(`${p}.post_attention_layernorm.weight`, uniform);
  }
  const head = a.tieWordEmbeddings ? get('model.embed_tokens.weight') : get('lm_head.weight');
  t.set('lm_head.weight', inputSide(scaleCols(head, get('model.norm.weight'))));
  t.set('model.norm.weight', uniform);
  return { arch: { ...a, hiddenSize: db, tieWordEmbeddings: false, rmsNormEps: (a.rmsNormEps * da) / db }, tensors: t };
}

/** Writes host weights as an HF Llama directory (config.json + model.safetensors, f32). */
export function writeLlamaDir(dir: string, w: LlamaWeights, config: DecoderConfig): string {
  mkdirSync(dir, { recursive: true });
  writeSafetensors(join(dir, 'model.safetensors'), [...w.tensors].map(([name, m]) => [name, { dtype: 'f32', shape: m.rows === 1 && !name.endsWith('_proj.weight') && !name.startsWith('lm_head') && !name.startsWith('model.embed') ? [m.cols] : [m.rows, m.cols], data: Float32Array.from(m.data) }]), { format: 'pt' });
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(toHfConfigJson(config), null, 2)}\n`);
  return dir;
}

/** `count` sequences of `length` token ids below `vocab` (excluding the last two: bos/eos), seeded. */
export function calibration(count: number, length: number, vocab: number, seed: number): number[][] {
  const u = normals(count * length, seed);
  return Array.from({ length: count }, (_, s) => Array.from({ length }, (_, t) => Math.floor((0.5 + 0.5 * Math.tanh(u[s * length + t]!)) * (vocab - 2)) % (vocab - 2)));
}

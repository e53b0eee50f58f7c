/**
 * The parameter-efficient kinds the zoo describes, as the engine runs them: each is a ModelDelta at the decoder's
 * hook sites (or, for prefix-tuning, K/V pages written before the prompt), keyed by SegmentLayout key (the
 * application), so a batch mixing applications applies each delta to its own rows only. The chain executor builds
 * one per fused block from that block's tensors; a whole-model forward builds one from all of them — the same ops
 * either way, which is what makes a chain bit-identical to the whole model.
 *
 * Tensor conventions (what `addPeFineTune` is given for each method):
 *   lora     PEFT: `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r]
 *   bitfit   `<module>.bias` [out] for a linear module of a layer (`model.layers.3.mlp.down_proj.bias`)
 *   adapter  a Houlsby bottleneck on a component's output: `…down…` [bottleneck, hidden] and `…up…`
 *            [hidden, bottleneck], on the attention (after o_proj) or the FFN (after down_proj):
 *            y ← y + up(GELU(down(y))), before the residual add
 *   prefix   per layer one [2, P, numKvHeads·headDim] tensor: P keys then P values, already in the cache's (post-RoPE)
 *            space, read by every query of the sequence before its own tokens (HF prefix-tuning's past_key_values)
 */
import { type DecoderLinearSite, hookSiteOfModule, type LinearSiteCall, type LoraWeights, type ModelDelta, type PagedKvCache, type SequenceId } from '@tessera/engine';
import { add, cast, gemm, geluErf, scatterRows, Tensor } from '@tessera/native';

import { ZooInvalidError } from '../planner/errors.js';

const LORA_RE = /^base_model\.model\.(.+)\.lora_([AB])\.weight$/;

/** PEFT's LoRA scaling: alpha / r, or alpha / √r with rsLoRA (the engine's loraScaling, from the zoo's config). */
export function loraScale(config: { loraAlpha: number; useRslora: boolean }, rank: number): number {
  return config.useRslora ? config.loraAlpha / Math.sqrt(rank) : config.loraAlpha / rank;
}

/** Reads `loraAlpha` / `useRslora` out of a fused LoRA's config (what describePeftLora records). */
export function loraConfigOf(config: Readonly<Record<string, unknown>>, owner: string): { loraAlpha: number; useRslora: boolean } {
  const alpha = config['loraAlpha'];
  if (typeof alpha !== 'number' || !Number.isFinite(alpha)) throw new ZooInvalidError(`${owner}: the LoRA config has no numeric loraAlpha (got ${JSON.stringify(alpha)})`);
  return { loraAlpha: alpha, useRslora: config['useRslora'] === true };
}

/**
 * LoRA weights (the engine's LoraWeights) from PEFT-named tensors: module → {a, b, scale}. Tensors are used as
 * given when f32 (the engine's PEFT loader reads f32), else cast into new tensors listed in `owned`.
 */
export function loraWeightsOf(name: string, tensors: ReadonlyMap<string, Tensor>, config: { loraAlpha: number; useRslora: boolean }): { weights: LoraWeights; owned: Tensor[] } {
  const parts = new Map<string, { a?: Tensor; b?: Tensor }>();
  for (const [tensorName, t] of tensors) {
    const m = LORA_RE.exec(tensorName);
    if (!m) throw new ZooInvalidError(`LoRA ${name}: tensor ${tensorName} is not a PEFT lora_A / lora_B weight`);
    const entry = parts.get(m[1]!) ?? {};
    entry[m[2] === 'A' ? 'a' : 'b'] = t;
    parts.set(m[1]!, entry);
  }
  const owned: Tensor[] = [];
  const f32 = (t: Tensor) => {
    if (t.dtype === 'f32') return t;
    const c = cast(t, 'f32');
    owned.push(c);
    return c;
  };
  const modules = new Map<string, { a: Tensor; b: Tensor; scale: number }>();
  try {
    for (const [module, { a, b }] of parts) {
      if (!a || !b) throw new ZooInvalidError(`LoRA ${name}: module ${module} has lora_${a ? 'A' : 'B'} but no lora_${a ? 'B' : 'A'}`);
      if (a.shape.length !== 2 || b.shape.length !== 2 || a.shape[0] !== b.shape[1]) {
        throw new ZooInvalidError(`LoRA ${name}: module ${module} has lora_A [${a.shape.join(', ')}] and lora_B [${b.shape.join(', ')}], which are not a rank-r pair`);
      }
      modules.set(module, { a: f32(a), b: f32(b), scale: loraScale(config, a.shape[0]!) });
    }
  } catch (err) {
    for (const t of owned) t.dispose();
    throw err;
  }
  return { weights: { name, modules }, owned };
}

/** Rows of `call.layout` whose key is `key`, as (start, count) runs. */
function* segmentsOf(call: { layout: LinearSiteCall['layout'] }, key: string): Generator<{ start: number; count: number }> {
  for (const seg of call.layout.segments) if (seg.key === key && seg.count > 0) yield seg;
}

/** BitFit: trained biases added to their linear modules' outputs, per application key. */
export class BitFitDelta implements ModelDelta {
  /** key → module → f32 bias [out]. */
  private readonly biases = new Map<string, Map<string, Tensor>>();
  private readonly owned: Tensor[] = [];

  constructor(byKey: ReadonlyMap<string, ReadonlyMap<string, Tensor>>) {
    try {
      for (const [key, tensors] of byKey) {
        const modules = new Map<string, Tensor>();
        for (const [name, t] of tensors) {
          const module = name.endsWith('.bias') ? name.slice(0, -'.bias'.length) : null;
          if (module === null || hookSiteOfModule(module)?.kind !== 'linear') {
            throw new ZooInvalidError(`BitFit ${key}: tensor ${name} is not the bias of a decoder linear module (model.layers.<l>.{self_attn,mlp}.<proj>.bias)`);
          }
          if (t.shape.length !== 1) throw new ZooInvalidError(`BitFit ${key}: bias ${name} is [${t.shape.join(', ')}], not a vector`);
          let b = t;
          if (t.dtype !== 'f32') {
            b = cast(t, 'f32');
            this.owned.push(b);
          }
          modules.set(module, b);
        }
        this.biases.set(key, modules);
      }
    } catch (err) {
      this.dispose();
      throw err;
    }
  }

  linear(call: LinearSiteCall): void {
    for (const [key, modules] of this.biases) {
      for (const out of call.outputs) {
        const bias = modules.get(out.module);
        if (!bias) continue;
        for (const seg of segmentsOf(call, key)) {
          const y = out.y.rows(seg.start, seg.count);
          try {
            add(y, bias, { out: y });
          } finally {
            y.dispose();
          }
        }
      }
    }
  }

  dispose(): void {
    for (const t of this.owned) t.dispose();
    this.owned.length = 0;
  }
}

/** One bottleneck adapter: down [bottleneck, hidden], up [hidden, bottleneck]. */
export interface BottleneckAdapter {
  down: Tensor;
  up: Tensor;
}

/**
 * Houlsby bottleneck adapters on a component's output, per application key: after o_proj for an attention
 * component, after down_proj for an FFN, y ← y + up(GELU(down(y))) on the key's rows, before the residual add.
 */
export class AdapterDelta implements ModelDelta {
  /** key → `${layer}:${site}` → adapter. */
  private readonly adapters = new Map<string, Map<string, BottleneckAdapter>>();

  /** `byKey`: per key, the adapters by (layer, 'attention' | 'ffn'). */
  constructor(byKey: ReadonlyMap<string, readonly { layer: number; component: 'attention' | 'ffn'; adapter: BottleneckAdapter }[]>) {
    for (const [key, list] of byKey) {
      const bySite = new Map<string, BottleneckAdapter>();
      for (const { layer, component, adapter } of list) {
        const { down, up } = adapter;
        if (down.dtype !== 'f32' || up.dtype !== 'f32' || down.shape.length !== 2 || up.shape.length !== 2 || down.shape[0] !== up.shape[1] || down.shape[1] !== up.shape[0]) {
          throw new ZooInvalidError(`adapter ${key}: layer ${layer} ${component} has down ${down.dtype} [${down.shape.join(', ')}] and up ${up.dtype} [${up.shape.join(', ')}], not an f32 bottleneck pair`);
        }
        bySite.set(`${layer}:${component === 'attention' ? 'o' : 'down'}`, adapter);
      }
      this.adapters.set(key, bySite);
    }
  }

  linear(call: LinearSiteCall): void {
    const site = call.site as DecoderLinearSite;
    if (site !== 'o' && site !== 'down') return;
    for (const [key, bySite] of this.adapters) {
      const adapter = bySite.get(`${call.layer}:${site}`);
      if (!adapter) continue;
      const out = call.outputs[0]!;
      for (const seg of segmentsOf(call, key)) {
        const y = out.y.rows(seg.start, seg.count);
        let t: Tensor | null = null;
        try {
          t = gemm(y, adapter.down, { transB: true });
          geluErf(t, { out: t });
          gemm(t, adapter.up, { transB: true, beta: 1, out: y });
        } finally {
          t?.dispose();
          y.dispose();
        }
      }
    }
  }
}

/** A prefix for one layer: P keys and P values, f32 [P, numKvHeads·headDim] each (views of the stored tensor). */
export interface LayerPrefix {
  key: Tensor;
  value: Tensor;
}

/** The K and V views of a stored prefix tensor [2, P, kvDim] (f32). The caller disposes both. */
export function prefixViews(t: Tensor, owner: string): LayerPrefix {
  if (t.dtype !== 'f32' || t.shape.length !== 3 || t.shape[0] !== 2) {
    throw new ZooInvalidError(`${owner}: a prefix tensor must be f32 [2, P, kvDim] (keys then values), got ${t.dtype} [${t.shape.join(', ')}]`);
  }
  const [, p, kvDim] = t.shape as [number, number, number];
  const flat = t.reshape([2 * p, kvDim]);
  try {
    return { key: flat.rows(0, p), value: flat.rows(p, p) };
  } finally {
    flat.dispose();
  }
}

/**
 * Writes a prefix into a new sequence of `cache`: positions [0, P) of every layer in `prefixes` get the prefix's
 * K and V, committed, so the sequence's own tokens start at position P and attend to the prefix first (HF
 * prefix-tuning). Every layer the cache holds must have its prefix, all of one length.
 */
export function writePrefixKv(cache: PagedKvCache, id: SequenceId, prefixes: ReadonlyMap<number, LayerPrefix>): void {
  let length = -1;
  for (let l = cache.firstLayer; l < cache.firstLayer + cache.numLayers; l++) {
    const p = prefixes.get(l);
    if (!p) throw new ZooInvalidError(`prefix for sequence ${String(id)}: layer ${l} of the cache has no prefix (a prefix covers every attention layer)`);
    if (length === -1) length = p.key.shape[0]!;
    if (p.key.shape[0] !== length || p.value.shape[0] !== length) throw new ZooInvalidError(`prefix for sequence ${String(id)}: layer ${l} has ${p.key.shape[0]} prefix tokens, layer ${cache.firstLayer} has ${length}`);
  }
  if (cache.hasSequence(id)) throw new ZooInvalidError(`prefix for sequence ${String(id)}: the sequence is already in the cache`);
  cache.addSequence(id);
  try {
    cache.reserve(id, length);
    const slots = Tensor.from(cache.slotsFor(id, 0, length), [length], { backend: cache.backend });
    try {
      for (let l = cache.firstLayer; l < cache.firstLayer + cache.numLayers; l++) {
        const p = prefixes.get(l)!;
        const rows = cache.layerRows(l);
        scatterRows(p.key, slots, rows.k);
        scatterRows(p.value, slots, rows.v);
      }
    } finally {
      slots.dispose();
    }
    cache.commit(id, length);
  } catch (err) {
    cache.release(id);
    throw err;
  }
}

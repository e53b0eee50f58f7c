/**
 * LoRA at the hook sites, per segment: y[seg] += scale · (x[seg] Aᵀ) Bᵀ for every segment whose adapter targets
 * the site's module, exactly PEFT's `base(x) + lora_B(lora_A(x)) * scaling`. This is the plain two-GEMM form,
 * one pair per (segment, module); `@tessera/sgmv-kernel` replaces it with one SGMV launch per site.
 * Trained biases (PEFT `bias: "all" | "lora_only"`) apply as (b_adapter − b_base) added to the segment's rows.
 */
import { InvalidArgumentError, type Tensor, add, cast, gemm, isQ8Weight, q8Dequantize, scale } from '@tessera/native';
import { UnsupportedAdapterError } from '../errors.js';
import { hookSiteOfModule } from '../models/names.js';
import type { LinearSiteCall, ModelDelta, NormSiteCall } from './sites.js';
import type { ModelWeights } from '../models/weights.js';

/** What LoraDelta needs of a loaded adapter (`loadLoraAdapter` returns a superset). */
export interface LoraWeights {
  readonly name: string;
  /** The adapter directory, when it was loaded from one (named in errors). */
  readonly dir?: string;
  readonly modules: ReadonlyMap<string, { readonly a: Tensor; readonly b: Tensor; readonly scale: number }>;
  /** Trained biases by HF tensor name (e.g. 'model.layers.0.self_attn.q_proj.bias'), when the adapter saved any. */
  readonly biases?: ReadonlyMap<string, Tensor>;
  /** Full replacements of base tensors (PEFT `modules_to_save`, e.g. 'classifier.weight'). Only merging applies them. */
  readonly savedModules?: ReadonlyMap<string, Tensor>;
}

export class LoraDelta implements ModelDelta {
  private readonly adapters: ReadonlyMap<string, LoraWeights>;
  /** Per adapter key: module (or norm) name → f32 bias difference to add. */
  private readonly biasDiffs = new Map<string, Map<string, Tensor>>();

  /**
   * @param adapters adapter per SegmentLayout key
   * @param base the base weights, needed only when an adapter carries trained biases
   */
  constructor(adapters: ReadonlyMap<string, LoraWeights>, base?: ModelWeights) {
    this.adapters = adapters;
    for (const adapter of adapters.values()) refuseUnreachableModules(adapter);
    for (const adapter of adapters.values()) {
      // A per-tenant head is not a hook site: applying the adapter without it would silently give wrong outputs.
      if (adapter.savedModules && adapter.savedModules.size > 0) {
        throw new UnsupportedAdapterError(
          adapter.dir ?? adapter.name,
          `LoraDelta: adapter ${adapter.name} replaces whole modules (${[...adapter.savedModules.keys()].join(', ')}); ` +
            'hook sites cannot apply modules_to_save, merge the adapter into a copy of the base instead (mergeLoraIntoWeights)');
      }
    }
    for (const [key, adapter] of adapters) {
      if (!adapter.biases || adapter.biases.size === 0) continue;
      if (!base) throw new InvalidArgumentError(`LoraDelta: adapter ${adapter.name} carries trained biases; pass the base weights to apply them`);
      const diffs = new Map<string, Tensor>();
      for (const [tensorName, b] of adapter.biases) {
        if (!tensorName.endsWith('.bias')) continue;
        const baseBias = base.tensors.get(tensorName);
        if (!baseBias) throw new InvalidArgumentError(`LoraDelta: adapter ${adapter.name} has bias ${tensorName}, which the base model lacks`);
        const neg = cast(baseBias, 'f32');
        const bf = cast(b, 'f32');
        try {
          // diff = b_adapter - b_base, computed as b_adapter + (-1 · b_base).
          scale(neg, -1, { out: neg });
          diffs.set(tensorName.slice(0, -'.bias'.length), add(bf, neg));
        } finally {
          neg.dispose();
          bf.dispose();
        }
      }
      this.biasDiffs.set(key, diffs);
    }
  }

  linear(call: LinearSiteCall): void {
    for (const seg of call.layout.segments) {
      if (seg.key === null || seg.count === 0) continue;
      const adapter = this.adapters.get(seg.key);
      if (!adapter) continue;
      const diffs = this.biasDiffs.get(seg.key);
      let x: Tensor | null = null;
      try {
        for (const out of call.outputs) {
          const lora = adapter.modules.get(out.module);
          const diff = diffs?.get(out.module);
          if (!lora && !diff) continue;
          x ??= call.x.rows(seg.start, seg.count);
          const y = out.y.rows(seg.start, seg.count);
          try {
            if (lora) {
              const t = gemm(x, lora.a, { transB: true });
              try {
                gemm(t, lora.b, { transB: true, alpha: lora.scale, beta: 1, out: y });
              } finally {
                t.dispose();
              }
            }
            if (diff) add(y, diff, { out: y });
          } finally {
            y.dispose();
          }
        }
      } finally {
        x?.dispose();
      }
    }
  }

  norm(call: NormSiteCall): void {
    for (const seg of call.layout.segments) {
      if (seg.key === null || seg.count === 0) continue;
      const diff = this.biasDiffs.get(seg.key)?.get(call.module);
      if (!diff) continue;
      const y = call.y.rows(seg.start, seg.count);
      try {
        add(y, diff, { out: y });
      } finally {
        y.dispose();
      }
    }
  }

  dispose(): void {
    for (const diffs of this.biasDiffs.values()) for (const t of diffs.values()) t.dispose();
    this.biasDiffs.clear();
  }
}


/**
 * Throws UnsupportedAdapterError naming the module when the adapter adapts a module that has no hook site (LoRA on
 * the LM head or the pooler, a trained bias of the embeddings' LayerNorm, …): hook sites never call a delta for
 * such a module, so serving the adapter would silently drop part of it.
 */
function refuseUnreachableModules(adapter: LoraWeights): void {
  const where = adapter.dir ?? adapter.name;
  for (const module of adapter.modules.keys()) {
    if (hookSiteOfModule(module)?.kind === 'linear') continue;
    throw new UnsupportedAdapterError(
      where,
      `adapter ${adapter.name}: LoRA on ${module}, which is not a per-layer hook site (hook-site deltas cannot reach it); ` +
        'merge the adapter into a copy of the base instead (mergeLoraIntoWeights)',
    );
  }
  for (const tensorName of adapter.biases?.keys() ?? []) {
    const module = tensorName.endsWith('.bias') ? tensorName.slice(0, -'.bias'.length) : tensorName;
    if (hookSiteOfModule(module) !== null) continue;
    throw new UnsupportedAdapterError(
      where,
      `adapter ${adapter.name}: trained bias ${tensorName} belongs to ${module}, which is not a per-layer hook site; ` +
        'merge the adapter into a copy of the base instead (mergeLoraIntoWeights)',
    );
  }
}

/**
 * Merges a LoRA adapter into the base weights in place: W += scale · B A for every module it targets (W becomes
 * f32 if it was stored in half precision or as Q8_0 int8, which is dequantized first: re-quantizing would round
 * the small LoRA update away); trained biases and `modules_to_save` tensors replace the base ones.
 * PEFT's `merge_and_unload`.
 */
export function mergeLoraIntoWeights(weights: ModelWeights, adapter: LoraWeights): void {
  for (const [module, lora] of adapter.modules) {
    const name = `${module}.weight`;
    const w = weights.tensors.get(name);
    if (!w) throw new InvalidArgumentError(`mergeLoraIntoWeights: adapter ${adapter.name} targets ${module}, which has no weight ${name}`);
    let target = w;
    if (isQ8Weight(w)) {
      target = q8Dequantize(w);
      weights.tensors.set(name, target);
      w.dispose();
    } else if (w.dtype !== 'f32') {
      target = cast(w, 'f32');
      weights.tensors.set(name, target);
      w.dispose();
    }
    gemm(lora.b, lora.a, { alpha: lora.scale, beta: 1, out: target });
  }
  for (const [name, replacement] of [...(adapter.biases ?? []), ...(adapter.savedModules ?? [])]) {
    const old = weights.tensors.get(name);
    if (!old) throw new InvalidArgumentError(`mergeLoraIntoWeights: adapter ${adapter.name} has ${name}, which the base model lacks`);
    if (old.shape.join() !== replacement.shape.join()) {
      throw new InvalidArgumentError(`mergeLoraIntoWeights: adapter ${adapter.name} has ${name} [${replacement.shape.join(', ')}], the base has [${old.shape.join(', ')}]`);
    }
    weights.tensors.set(name, cast(replacement, 'f32'));
    old.dispose();
  }
}

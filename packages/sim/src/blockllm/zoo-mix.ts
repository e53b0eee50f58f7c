/**
 * The simulated zoo (design note §8.3, app mix [I]): the evaluation's foundations as Llama-shaped descriptors with
 * their real dimensions and f16 weights, and N applications over them — LoRA, adapter, prefix and BitFit
 * fine-tunes of each foundation and a full fine-tune (Vicuna-like) of each LLaMA. Everything is ingested into a real
 * {@link BlockZoo}: the zoo partitions lazily, builds the chains, records the full fine-tunes' equivalence edges and
 * links the surrogates; the simulator only reads its chains, manifests and byte accounting. Tensors are
 * descriptors with content ids derived from (model, name), so they share exactly when a fine-tune keeps a
 * foundation tensor (no bytes are materialised).
 */
import { createHash } from 'node:crypto';

import { type ArchSig, attentionIndex, type BlockManifest, BlockZoo, type Chain, ffnIndex, type HopRoute, hopRoutes, type PeMethod, type TensorRef } from '@tessera/block-zoo';

import { SimArgumentError } from '../errors.js';

/** A foundation of the simulated zoo. */
export interface SimFoundation {
  id: string;
  arch: ArchSig;
}

const llama = (over: Partial<ArchSig> & Pick<ArchSig, 'vocabSize' | 'hiddenSize' | 'numLayers' | 'numHeads' | 'numKvHeads' | 'intermediateSize'>): ArchSig => ({
  architecture: 'LlamaForCausalLM',
  headDim: over.hiddenSize / over.numHeads,
  rmsNormEps: 1e-6,
  ropeTheta: 10000,
  tieWordEmbeddings: false,
  dtype: 'f16',
  ...over,
});

/** ChatGLM2-6B's dimensions on a Llama-shaped decoder [I] (the zoo's components are Llama's; only bytes and FLOPs matter here). */
export const CHATGLM_6B: SimFoundation = { id: 'chatglm-6b', arch: llama({ vocabSize: 65024, hiddenSize: 4096, numLayers: 28, numHeads: 32, numKvHeads: 2, intermediateSize: 13696 }) };
export const LLAMA_7B_SIM: SimFoundation = { id: 'llama-7b', arch: llama({ vocabSize: 32000, hiddenSize: 4096, numLayers: 32, numHeads: 32, numKvHeads: 32, intermediateSize: 11008 }) };
export const LLAMA_13B_SIM: SimFoundation = { id: 'llama-13b', arch: llama({ vocabSize: 32000, hiddenSize: 5120, numLayers: 40, numHeads: 40, numKvHeads: 40, intermediateSize: 13824 }) };

/** The evaluation's three foundations (§6.1), in the order the app mix fills them (≈ 7 / 7 / 6 for 20 apps). */
export const DEFAULT_FOUNDATIONS: readonly SimFoundation[] = [CHATGLM_6B, LLAMA_7B_SIM, LLAMA_13B_SIM];

export type SimAppKind = PeMethod | 'full';

export interface SimApp {
  id: string;
  foundation: string;
  kind: SimAppKind;
}

export interface AppMixOptions {
  foundations?: readonly SimFoundation[];
  /** Families that get a full fine-tune as their first application (the LLaMAs: Vicuna-7B/13B). */
  fullFineTuneFamilies?: readonly string[];
}

const PE_CYCLE: readonly PeMethod[] = ['lora', 'adapter', 'prefix', 'bitfit'];

/**
 * N applications over the foundations, round-robin (so 20 gives 7 / 7 / 6), each family cycling LoRA, adapter,
 * prefix, BitFit; a family in `fullFineTuneFamilies` gets a full fine-tune as its first application.
 */
export function appMix(n: number, options: AppMixOptions = {}): SimApp[] {
  if (!Number.isInteger(n) || n < 1) throw new SimArgumentError(`appMix: the number of applications must be a positive integer, got ${n}`);
  const foundations = options.foundations ?? DEFAULT_FOUNDATIONS;
  if (foundations.length === 0) throw new SimArgumentError('appMix: at least one foundation is needed');
  const full = new Set(options.fullFineTuneFamilies ?? [LLAMA_7B_SIM.id, LLAMA_13B_SIM.id]);
  const count = new Map<string, number>();
  const apps: SimApp[] = [];
  for (let i = 0; i < n; i++) {
    const f = foundations[i % foundations.length]!;
    const k = count.get(f.id) ?? 0;
    count.set(f.id, k + 1);
    const kind: SimAppKind = full.has(f.id) ? (k === 0 ? 'full' : PE_CYCLE[(k - 1) % PE_CYCLE.length]!) : PE_CYCLE[k % PE_CYCLE.length]!;
    apps.push({ id: `${f.id}-${kind}-${k}`, foundation: f.id, kind });
  }
  return apps;
}

function fakeId(model: string, name: string): string {
  return `sha256:${createHash('sha256').update(`${model}\0${name}`).digest('hex')}`;
}

function ref(model: string, name: string, dtype: string, shape: readonly number[]): TensorRef {
  return { name, id: fakeId(model, name), dtype, shape };
}

/** Every tensor of a Llama-shaped checkpoint, with content ids private to `owner`. */
export function llamaTensors(owner: string, a: ArchSig): TensorRef[] {
  const d = a.hiddenSize;
  const kv = a.numKvHeads * a.headDim;
  const t: TensorRef[] = [ref(owner, 'model.embed_tokens.weight', a.dtype, [a.vocabSize, d])];
  for (let l = 0; l < a.numLayers; l++) {
    const p = `model.layers.${l}`;
    t.push(
      ref(owner, `${p}.input_layernorm.weight`, a.dtype, [d]),
      ref(owner, `${p}.self_attn.q_proj.weight`, a.dtype, [d, d]),
      ref(owner, `${p}.self_attn.k_proj.weight`, a.dtype, [kv, d]),
      ref(owner, `${p}.self_attn.v_proj.weight`, a.dtype, [kv, d]),
      ref(owner, `${p}.self_attn.o_proj.weight`, a.dtype, [d, d]),
      ref(owner, `${p}.post_attention_layernorm.weight`, a.dtype, [d]),
      ref(owner, `${p}.mlp.gate_proj.weight`, a.dtype, [a.intermediateSize, d]),
      ref(owner, `${p}.mlp.up_proj.weight`, a.dtype, [a.intermediateSize, d]),
      ref(owner, `${p}.mlp.down_proj.weight`, a.dtype, [d, a.intermediateSize]),
    );
  }
  t.push(ref(owner, 'model.norm.weight', a.dtype, [d]), ref(owner, 'lm_head.weight', a.dtype, [a.vocabSize, d]));
  return t;
}

export interface SimZooOptions {
  foundations?: readonly SimFoundation[];
  /**
   * How many of the last layers each PE fine-tune modifies [I]: the paper's rule "share middle and late blocks"
   * leaves the choice open; a late window keeps chains short (the early layers stay one shared block). Default 4.
   */
  peLayers?: number;
  /** Fraction of a full fine-tune's early layers whose logit-lens score is below the threshold (not equivalent). Default 0.25. */
  fullDivergentFraction?: number;
  /**
   * Surrogates for the foundation blocks that are not a chain's last (speculation, §3.5): one speedup for all.
   * Default: the paper's Table 4 by block kind (see {@link tableFourSpeedup}).
   */
  surrogateSpeedup?: number;
}

export interface SimZoo {
  zoo: BlockZoo;
  apps: SimApp[];
  foundations: readonly SimFoundation[];
  /** Each application's chain, derived once (the zoo seals manifests by hashing, so chains are not free). */
  chains: Map<string, Chain>;
  /** hopRoutes(zoo, app, position), memoised per (app, position). */
  routes(app: string, position: number): HopRoute[];
}

/**
 * The speedup of a ≈ 50 %-pruned surrogate (structured pruning + LoRA recovery) over its block, from the paper's
 * Table 4 (LLaMA-7B): one attention component 37.43×, one FFN 1.71×, one transformer layer 22.91×, three layers
 * 18.55× (taken for every multi-layer block). A block Table 4 does not measure (the embedding alone) gets 2×, the
 * FLOPs that 50 % pruning removes.
 */
export function tableFourSpeedup(m: Pick<BlockManifest, 'kind' | 'span'>): number {
  if (m.kind === 'attention') return 37.43;
  if (m.kind === 'ffn') return 1.71;
  if (m.span !== null && m.kind === 'layerRange') return m.span.end - m.span.start <= 2 ? 22.91 : 18.55;
  return 2;
}

/** Ingests the foundations and the applications into a real BlockZoo (lazy partitioning, edges, surrogates). */
export function buildSimZoo(apps: readonly SimApp[], options: SimZooOptions = {}): SimZoo {
  const foundations = options.foundations ?? DEFAULT_FOUNDATIONS;
  const window = options.peLayers ?? 4;
  const divergent = options.fullDivergentFraction ?? 0.25;
  if (!Number.isInteger(window) || window < 1) throw new SimArgumentError(`peLayers must be a positive integer, got ${window}`);
  if (!(divergent >= 0 && divergent < 1)) throw new SimArgumentError(`fullDivergentFraction must be in [0, 1), got ${divergent}`);
  const zoo = new BlockZoo();
  const byId = new Map(foundations.map((f) => [f.id, f]));
  for (const f of foundations) if (apps.some((a) => a.foundation === f.id)) zoo.addFoundation({ id: f.id, archSig: f.arch, tensors: llamaTensors(f.id, f.arch) });
  for (const app of apps) {
    const f = byId.get(app.foundation);
    if (!f) throw new SimArgumentError(`application ${app.id} names unknown foundation ${app.foundation}`);
    const a = f.arch;
    const L = a.numLayers;
    const layers = Array.from({ length: Math.min(window, L) }, (_, i) => L - Math.min(window, L) + i);
    const d = a.hiddenSize;
    const kv = a.numKvHeads * a.headDim;
    const pe = (name: string, shape: number[], component: number) => ({ ...ref(app.id, name, a.dtype, shape), component });
    switch (app.kind) {
      case 'full': {
        const scores = Array.from({ length: L }, (_, l) => (l < Math.round(divergent * L) ? 0.95 : 0.99));
        zoo.addFullFineTune({ id: app.id, base: f.id, archSig: a, tensors: llamaTensors(app.id, a) }, scores, { datasetHash: 'sim-calibration' });
        break;
      }
      case 'lora':
        zoo.addPeFineTune({
          id: app.id,
          base: f.id,
          method: 'lora',
          config: { rank: 8, alpha: 16, targets: ['q', 'v'], layers: layers.join(',') },
          tensors: layers.flatMap((l) =>
            (['q', 'v'] as const).flatMap((t) => [
              pe(`layers.${l}.self_attn.${t}_proj.lora_A.weight`, [8, d], attentionIndex(l)),
              pe(`layers.${l}.self_attn.${t}_proj.lora_B.weight`, [t === 'q' ? d : kv, 8], attentionIndex(l)),
            ]),
          ),
        });
        break;
      case 'adapter': {
        const m = d / 4;
        zoo.addPeFineTune({
          id: app.id,
          base: f.id,
          method: 'adapter',
          config: { bottleneck: m, layers: layers.join(',') },
          tensors: layers.flatMap((l) => [
            pe(`layers.${l}.adapter.down.weight`, [m, d], ffnIndex(l)),
            pe(`layers.${l}.adapter.down.bias`, [m], ffnIndex(l)),
            pe(`layers.${l}.adapter.up.weight`, [d, m], ffnIndex(l)),
            pe(`layers.${l}.adapter.up.bias`, [d], ffnIndex(l)),
          ]),
        });
        break;
      }
      case 'prefix':
        zoo.addPeFineTune({
          id: app.id,
          base: f.id,
          method: 'prefix',
          config: { tokens: 30, layers: layers.join(',') },
          tensors: layers.map((l) => pe(`layers.${l}.self_attn.prefix_kv`, [30, 2 * kv], attentionIndex(l))),
        });
        break;
      case 'bitfit':
        zoo.addPeFineTune({
          id: app.id,
          base: f.id,
          method: 'bitfit',
          config: { targets: ['q', 'k', 'v', 'o'], layers: layers.join(',') },
          tensors: layers.flatMap((l) => (['q', 'k', 'v', 'o'] as const).map((t) => pe(`layers.${l}.self_attn.${t}_proj.bias`, [t === 'k' || t === 'v' ? kv : d], attentionIndex(l)))),
        });
        break;
    }
  }
  // Surrogates (50 % structured pruning, §3.5) for every non-fused foundation block that does not end a chain.
  const uniform = options.surrogateSpeedup;
  const all = zoo.chains();
  const last = new Set(all.map((c) => c.blocks.at(-1)!.blockId));
  const done = new Set<string>();
  for (const c of all) {
    for (const b of c.blocks) {
      if (b.pe !== null || last.has(b.blockId) || done.has(b.blockId)) continue;
      done.add(b.blockId);
      const tensors = b.tensors.map((t) => ({ ...t, id: fakeId(`surrogate:${b.blockId}`, t.name), shape: t.shape.length === 2 ? [Math.ceil(t.shape[0]! / 2), t.shape[1]!] : [...t.shape] }));
      zoo.addSurrogate(b.blockId, { archSig: b.archSig, tensors, cosine: 0.97, speedup: uniform ?? tableFourSpeedup(b), prunedFraction: 0.5 });
    }
  }
  const chains = new Map(apps.map((a) => [a.id, zoo.chain(a.id)]));
  const memo = new Map<string, HopRoute[]>();
  const routes = (app: string, position: number) => {
    const k = `${app}#${position}`;
    let r = memo.get(k);
    if (!r) memo.set(k, (r = hopRoutes(zoo, app, position)));
    return r;
  };
  return { zoo, apps: [...apps], foundations, chains, routes };
}

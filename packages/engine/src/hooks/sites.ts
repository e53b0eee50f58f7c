/**
 * Hook sites: where multi-tenant deltas (LoRA, adapters, sparse diffs, BitFit, …) attach to a model family
 * without forking it. The engine calls every registered {@link ModelDelta} after computing each site's base
 * output; a delta adds its per-segment contribution in place. The engine knows no adapter type by name.
 */
import type { Tensor } from '@tessera/native';
import type { SegmentLayout } from './segment-layout.js';

/** Linear sites of the encoder. `qkv` is one site with three column slices: query, key, value. */
export type EncoderLinearSite = 'qkv' | 'attn_out' | 'ffn_in' | 'ffn_out';
/** Norm sites of the encoder: the LayerNorm after attention and after the FFN (post-LN). */
export type EncoderNormSite = 'attn_ln' | 'ffn_ln';
/** Linear sites of the decoder. */
export type DecoderLinearSite = 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';
/** Norm sites of the decoder (pre-norm RMSNorms). */
export type DecoderNormSite = 'input_norm' | 'post_attn_norm';

/** One output slice of a linear site: its HF module name (what PEFT's target_modules match) and its output rows. */
export interface SiteOutput {
  /** 'query' | 'key' | 'value' for the encoder's qkv; the site name otherwise. */
  readonly slice: string;
  /** The Hugging Face module this slice is, e.g. 'bert.encoder.layer.0.attention.self.query'. */
  readonly module: string;
  /** f32 [rows, outFeatures]: x Wᵀ + b, already computed; deltas add into it in place. */
  readonly y: Tensor;
}

export interface LinearSiteCall {
  readonly family: 'encoder' | 'decoder';
  readonly site: EncoderLinearSite | DecoderLinearSite;
  readonly layer: number;
  /** f32 [rows, inFeatures]: the site's input. Read only. */
  readonly x: Tensor;
  readonly outputs: readonly SiteOutput[];
  readonly layout: SegmentLayout;
}

export interface NormSiteCall {
  readonly family: 'encoder' | 'decoder';
  readonly site: EncoderNormSite | DecoderNormSite;
  readonly layer: number;
  /** HF module name of the norm, e.g. 'bert.encoder.layer.0.output.LayerNorm'. */
  readonly module: string;
  /** f32 [rows, hidden]: the norm's input (for the encoder: residual + sublayer output). Read only. */
  readonly x: Tensor;
  /** f32 [rows, hidden]: the base norm's output; a delta may rewrite its segments' rows (e.g. a task LayerNorm). */
  readonly y: Tensor;
  readonly layout: SegmentLayout;
}

/** The attention site of one sequence in one layer (the encoder asks every delta before that sequence's attention). */
export interface AttentionSiteCall {
  readonly family: 'encoder';
  readonly layer: number;
  /** Index of the sequence in the forward's batch. */
  readonly sequence: number;
  /** The sequence's SegmentLayout key (its tenant/task; null = the base model). */
  readonly key: string | null;
}

/**
 * Prefix-tuning's extra keys and values: f32 [prefixLength, hidden] each, in the layer's projected (post-bias)
 * space, attended to by every query of the sequence before its own keys.
 */
export interface AttentionPrefix {
  readonly key: Tensor;
  readonly value: Tensor;
}

/**
 * The boundary before one layer: the engine calls every delta's `beforeLayer` here, before any work of `layer`.
 * HMI waits there until the layer's adapters are on the device; BlockLLM hands the hidden state on to the next block.
 */
export interface LayerBoundaryCall {
  readonly family: 'encoder' | 'decoder';
  /** The layer about to run (global index, whatever range `layers(from, to)` was asked for). */
  readonly layer: number;
  /** f32 [rows, hidden]: the layer's input. Read only (the engine updates it in place once the layer runs). */
  readonly hidden: Tensor;
  readonly layout: SegmentLayout;
}

/**
 * What a multi-tenant delta implements. All methods are optional; `linear` and `norm` mutate `y` in place for
 * their segments, `attentionPrefix` returns the extra keys/values one sequence attends to (or null for none),
 * `beforeLayer` may return a Promise the engine awaits before the layer (only on the async path: `forwardAsync`,
 * `layersAsync`; the synchronous path throws if it gets one).
 */
export interface ModelDelta {
  linear?(call: LinearSiteCall): void;
  norm?(call: NormSiteCall): void;
  attentionPrefix?(call: AttentionSiteCall): AttentionPrefix | null;
  beforeLayer?(call: LayerBoundaryCall): void | Promise<void>;
}

/**
 * Computing PLOT values in window mode (hmi.md §1.3, A4): each tri-gram runs through the embeddings and the lower
 * layers as its own context, and each slot is stored already multiplied by the scalar tri-gram gate.
 *
 * A4 runs ids [l, c, r] at local positions [0, 1, 2] with attention mask [l≠PAD, 1, r≠PAD]. On this engine a
 * sequence attends over its own tokens only, so a masked slot is simply left out: the window's non-PAD tokens run as
 * one sequence whose first position is 1 when the left slot is PAD (the centre keeps position 1):
 *
 *   (l, c, r)     → [l, c, r] at positions 0, 1, 2
 *   (PAD, c, r)   → [c, r]    at positions 1, 2     (bi-gram back-off entry)
 *   (l, c, PAD)   → [l, c]    at positions 0, 1     (a sequence's last token)
 *   (PAD, c, PAD) → [c]       at position 1         (uni-gram back-off entry)
 *
 * and the masked slots are written as zeros. That is A4 exactly: a masked key contributes nothing to any unmasked
 * row, and the masked rows are zeroed anyway.
 */
import { type EncoderModel, type EncoderSequence } from '@tessera/engine';

import { PlotStoreArgumentError } from '../policy/errors.js';
import { f32ToF16Bits } from '../policy/f16.js';
import { PAD, type PlotKey, type TrigramKeyCodec } from '../policy/keys.js';

/**
 * The tri-gram gate (SkipBERT; hmi.md §1.3): `h ← h · sigmoid(w_g·h + b_g)`, one `Linear(hidden, 1)` shared by the
 * three slots, applied to each slot's lower-layer output before it is stored. It is part of a domain's trained
 * parameters; this builder only applies it.
 *
 * There is no neutral gate in the paper's model: a gate of w = 0 and a large b (sigmoid ≈ 1) stores the raw
 * lower-layer states, which is a convenient test setting but not what SkipBERT/HMI store. Pass the trained w_g, b_g.
 */
export interface PlotGate {
  /** w_g, one weight per hidden unit. */
  weight: ArrayLike<number>;
  /** b_g. */
  bias: number;
}

export interface ComputePlotValuesOptions {
  /** The keys' codec; encoder mode (centred tri-grams). Its vocabulary must fit the model's. */
  codec: TrigramKeyCodec;
  /** Layers run after the embeddings: layers [0, lowerLayers). 0 stores gated embeddings. */
  lowerLayers: number;
  gate: PlotGate;
  /** Windows per engine batch (one `prepare`); default 512. */
  batchSize?: number;
}

/** Slots per encoder value: left, centre, right. */
export const ENCODER_SLOTS = 3;

/** The sequence a key runs as, and which value slots its rows fill. */
function windowOf(ids: [number, number, number]): { sequence: EncoderSequence; slots: number[] } {
  const [l, c, r] = ids;
  const tokens: number[] = [];
  const slots: number[] = [];
  if (l !== PAD) (tokens.push(l), slots.push(0));
  tokens.push(c);
  slots.push(1);
  if (r !== PAD) (tokens.push(r), slots.push(2));
  return { sequence: { ids: tokens, positionOffset: l === PAD ? 1 : 0 }, slots };
}

/** Checks the options against the model; returns the batch size. */
export function checkComputeOptions(model: EncoderModel, options: ComputePlotValuesOptions): number {
  const c = model.config;
  const { codec, lowerLayers, gate, batchSize = 512 } = options;
  if (codec.mode !== 'encoder') throw new PlotStoreArgumentError(`window-mode values are for encoder (centred) keys; the codec is in ${codec.mode} mode`);
  if (codec.vocabSize > c.vocabSize) throw new PlotStoreArgumentError(`the codec's vocabulary (${codec.vocabSize}) is larger than the model's (${c.vocabSize})`);
  if (!Number.isInteger(lowerLayers) || lowerLayers < 0 || lowerLayers > c.numLayers) {
    throw new PlotStoreArgumentError(`lowerLayers must be an integer in [0, ${c.numLayers}] (the model's layers), got ${lowerLayers}`);
  }
  if (c.maxPositions < ENCODER_SLOTS) throw new PlotStoreArgumentError(`the model has ${c.maxPositions} positions; a tri-gram window needs ${ENCODER_SLOTS}`);
  if (gate.weight.length !== c.hiddenSize) throw new PlotStoreArgumentError(`gate weight has ${gate.weight.length} entries, the hidden size is ${c.hiddenSize}`);
  for (let i = 0; i < gate.weight.length; i++) {
    if (!Number.isFinite(gate.weight[i]!)) throw new PlotStoreArgumentError(`gate weight[${i}] = ${gate.weight[i]} is not finite`);
  }
  if (!Number.isFinite(gate.bias)) throw new PlotStoreArgumentError(`gate bias ${gate.bias} is not finite`);
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new PlotStoreArgumentError(`batchSize must be a positive integer, got ${batchSize}`);
  return batchSize;
}

/**
 * The fp16 values `[keys.length, 3, hidden]` of `keys` (A4), row-major: key i's left, centre and right slots at
 * `i·3·hidden …`. Keys are checked first (each must be storable: not the separator, a token in the centre).
 */
export function computePlotValues(model: EncoderModel, keys: ArrayLike<PlotKey>, options: ComputePlotValuesOptions): Uint16Array {
  const batchSize = checkComputeOptions(model, options);
  const { codec } = options;
  const windows = Array.from({ length: keys.length }, (_, i) => windowOf(codec.unpack(codec.checkStorable(keys[i]!))));
  const H = model.config.hiddenSize;
  const out = new Uint16Array(keys.length * ENCODER_SLOTS * H);
  for (let start = 0; start < windows.length; start += batchSize) {
    const batch = windows.slice(start, start + batchSize);
    const hidden = lowerStates(model, batch.map((w) => w.sequence), options.lowerLayers);
    let row = 0;
    batch.forEach((w, k) => {
      const base = (start + k) * ENCODER_SLOTS * H;
      for (const slot of w.slots) {
        gateInto(hidden.subarray(row * H, (row + 1) * H), options.gate, out, base + slot * H);
        row++;
      }
    });
  }
  return out;
}

/** f32 [rows, hidden]: the embeddings and layers [0, lowerLayers) of a batch of sequences, rows packed. */
function lowerStates(model: EncoderModel, sequences: EncoderSequence[], lowerLayers: number): Float32Array {
  const ctx = model.prepare(sequences);
  try {
    const h = model.embed(ctx);
    try {
      model.layers(0, lowerLayers, h, ctx);
      return h.toArray() as Float32Array;
    } finally {
      h.dispose();
    }
  } finally {
    ctx.dispose();
  }
}

/** out[at …] = fp16(h · sigmoid(w·h + b)), the gate's dot product in float64. */
function gateInto(h: Float32Array, gate: PlotGate, out: Uint16Array, at: number): void {
  let z = gate.bias;
  for (let i = 0; i < h.length; i++) z += gate.weight[i]! * h[i]!;
  const g = 1 / (1 + Math.exp(-z));
  for (let i = 0; i < h.length; i++) out[at + i] = f32ToF16Bits(h[i]! * g);
}

/** Rotary position embedding (RoPE), applied in place. */
import { callNative, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { expectDtype, expectRank, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';

export interface RopeOptions {
  /** How many leading dims of each head rotate (partial rotary, e.g. GPT-NeoX); even, <= headDim. Default headDim. */
  rotDim?: number;
  /** Frequency base theta (default 10000; Llama 3 uses 500000). */
  base?: number;
  /** Run the plain scalar reference kernel (CPU only; tests compare against it). */
  reference?: boolean;
}

/**
 * Rotates x f32 [tokens, heads, headDim] in place by positions i32 [tokens], in the Hugging Face Llama /
 * GPT-NeoX "rotate_half" layout: for i < rotDim/2 the pair (x[i], x[i + rotDim/2]) turns by
 * pos * base^(-2i/rotDim); dims from rotDim on are left as they are. Returns x.
 *
 * Angles are formed and reduced in double precision, so cos/sin are accurate to ~2e-7 at any position
 * (HF's f32 angles are up to ~2e-4 rad off at position 4096); for |x| <= 1 results are within ~3e-7 absolute
 * of a double-precision reference.
 */
export function rope(x: Tensor, positions: Tensor, options: RopeOptions = {}): Tensor {
  return rotate('rope', x, positions, options, false);
}

/**
 * Backward of {@link rope}, in place on dy f32 [tokens, heads, headDim] (the gradient of the rotated x): the
 * rotation is orthogonal, so dx = R(-angle) dy, the inverse rotation with the same angles (sin negated exactly).
 * Same options as the forward. Returns dy.
 */
export function ropeBackward(dy: Tensor, positions: Tensor, options: RopeOptions = {}): Tensor {
  return rotate('ropeBackward', dy, positions, options, true);
}

function rotate(op: string, x: Tensor, positions: Tensor, options: RopeOptions, inverse: boolean): Tensor {
  const backend = sameBackend(op, x, positions);
  expectDtype(op, 'x', x, 'f32');
  expectDtype(op, 'positions', positions, 'i32');
  expectRank(op, 'x', x, 3);
  const [tokens, , headDim] = x.shape as [number, number, number];
  if (positions.rank !== 1 || positions.shape[0] !== tokens) {
    throw new ShapeMismatchError(`${op}: positions ${formatShape(positions.shape)} must be [tokens] = [${tokens}] for x ${formatShape(x.shape)}`);
  }
  if (headDim % 2 !== 0) throw new ShapeMismatchError(`${op}: x ${formatShape(x.shape)} has an odd head dimension ${headDim}`);
  const rotDim = options.rotDim ?? headDim;
  if (!Number.isInteger(rotDim) || rotDim < 0 || rotDim > headDim || rotDim % 2 !== 0) {
    throw new InvalidArgumentError(`${op}: rotDim must be an even integer in [0, ${headDim}] for x ${formatShape(x.shape)}, got ${rotDim}`);
  }
  const base = options.base ?? 10000;
  if (!Number.isFinite(base) || base <= 0) throw new InvalidArgumentError(`${op}: base must be a finite number > 0, got ${base}`);
  callNative(() => backend.binding.rope(x.native, positions.native, { rotDim, base, inverse, reference: options.reference ?? false }));
  return x;
}

/**
 * Surrogates for speculation, made when the server starts with it on: every block of an application's chain but
 * the last (which never speculates) that has none in the zoo gets one — 50 % structured pruning with least-squares
 * recovery (block-zoo's buildSurrogate for whole layers, buildComponentSurrogate for an `attn(l)` or `ffn(l)`
 * block), stored and linked by storeSurrogate. A block whose stages mix a half layer with whole layers is skipped
 * (there is no pruned form of that shape yet); so is a block without layers (an embedding or head alone).
 */
import type { BlockZoo } from '@tessera/block-zoo';
import { buildComponentSurrogate, buildSurrogate, type CalibrationData, type LlamaWeights, type Surrogate } from '@tessera/block-zoo/fit';
import { storeSurrogate, weightsFromStore } from '@tessera/block-zoo/ingest';
import type { DiskTensorStore } from '@tessera/block-zoo/store';

/** What to prune for a block's stages: whole layers [from, to), one half of a layer, or nothing. */
export function surrogateShape(stages: readonly { stage: string; layer?: number; from?: number; to?: number }[]): { from: number; to: number } | { layer: number; component: 'attention' | 'ffn' } | null {
  const layered = stages.filter((s) => s.stage !== 'embed' && s.stage !== 'head');
  if (layered.length !== 1) return null;
  const s = layered[0]!;
  if (s.stage === 'layers') return { from: s.from!, to: s.to! };
  if (s.stage === 'attention' || s.stage === 'ffn') return { layer: s.layer!, component: s.stage };
  return null;
}

/** Builds and links the missing surrogates of `app`'s chain; returns how many it made. */
export function buildMissingSurrogates(
  zoo: BlockZoo,
  store: DiskTensorStore,
  app: string,
  data: { calibration: CalibrationData; evaluation: CalibrationData },
  progress: (line: string) => void = () => {},
): number {
  const blocks = zoo.chain(app).blocks;
  let weights: LlamaWeights | null = null;
  let made = 0;
  blocks.forEach((b, position) => {
    if (position === blocks.length - 1 || b.kind === 'surrogate' || zoo.surrogatesOf(b.blockId).length > 0) return;
    const shape = surrogateShape(b.stages ?? []);
    if (shape === null) return;
    weights ??= weightsFromStore(zoo, store, app);
    const s: Surrogate =
      'component' in shape
        ? buildComponentSurrogate(weights, shape, data.calibration, data.evaluation)
        : buildSurrogate(weights, shape, data.calibration, data.evaluation);
    storeSurrogate(zoo, store, b.blockId, s);
    made++;
    progress(`surrogate of ${app}'s block ${position}: ${(100 * s.prunedFraction).toFixed(0)} % pruned, held-out cosine ${s.cosine.toFixed(3)}`);
  });
  return made;
}

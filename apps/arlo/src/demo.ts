/**
 * The demo: a tiny seeded BERT-style classifier (hidden 64, 2 layers, 4 heads, 128 positions, a WordPiece
 * tokenizer), generated once with the engine's generator and reused. `tessera-arlo` without --model serves it with
 * runtimes at 32, 64 and 128 tokens.
 */
import { join } from 'node:path';

import { generateModel } from '@tessera/engine';
import { ensureGenerated, generatedDirectory } from '@tessera/server-kit';

export const DEMO_VERSION = 1;
export const DEMO_MODEL_NAME = 'tessera-tiny-bert';
export const DEMO_LENGTHS: readonly number[] = [32, 64, 128];
const MODEL_SEED = 20_240_816;

/** `.tessera/arlo-demo` under the repository root (or the current directory outside a checkout). */
export function defaultDemoDir(): string {
  return generatedDirectory(import.meta.url, 'arlo-demo');
}

/** The demo model's directory under `dir`, generating it first when it is missing or from an older recipe. */
export function ensureDemo(dir: string = defaultDemoDir(), log: (line: string) => void = () => {}): { modelDir: string; generated: boolean } {
  const { dir: root, generated } = ensureGenerated(dir, DEMO_VERSION, (staging) => {
    log(`generating the demo model ${DEMO_MODEL_NAME} (tiny BERT-style classifier, seed ${MODEL_SEED})`);
    generateModel(join(staging, DEMO_MODEL_NAME), { family: 'encoder', size: 'tiny', seed: MODEL_SEED });
    return { model: DEMO_MODEL_NAME };
  });
  return { modelDir: join(root, DEMO_MODEL_NAME), generated };
}

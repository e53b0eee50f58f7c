/** The generated models benches share: made once per machine under the OS temp dir (seeded: the same bytes every time). */
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateModel } from '@tessera/engine';

export const BENCH_MODELS_DIR = join(tmpdir(), 'tessera-bench-models');

/** The mini encoder or decoder (decoder logits sharpened so greedy text is not flat noise). */
export function miniModelDir(family: 'encoder' | 'decoder', log: (message: string) => void): string {
  const dir = join(BENCH_MODELS_DIR, `${family}-mini-seed0`);
  if (!existsSync(join(dir, 'model.safetensors'))) {
    mkdirSync(dir, { recursive: true });
    log(`generating the mini ${family} in ${dir} (once)`);
    generateModel(dir, { family, size: 'mini', seed: 0, sharpen: family === 'decoder' ? 8 : 1 });
  }
  return dir;
}

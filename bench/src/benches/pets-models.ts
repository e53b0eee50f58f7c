/**
 * The three encoders the PetS bench stands in for DistilBERT / BERT-base / BERT-large with (pets.md §10): same
 * depth-to-width ratios, small enough for a 2-core machine, generated once per machine (seeded).
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type EncoderConfig, generateModel, readHfConfig } from '@tessera/engine';
import { BENCH_MODELS_DIR } from '../models.js';

export type PetsModelSize = 'tiny' | 'mini' | 'micro-large';
export const PETS_MODEL_SIZES: readonly PetsModelSize[] = ['tiny', 'mini', 'micro-large'];

/** Which paper model each one stands in for (Table 3). */
export const PAPER_MODEL: Record<PetsModelSize, string> = { tiny: 'DistilBERT', mini: 'BERT-base', 'micro-large': 'BERT-large' };

const OVERRIDES: Record<PetsModelSize, Partial<Omit<EncoderConfig, 'family'>>> = {
  tiny: { hiddenSize: 128, numLayers: 2, numHeads: 4, intermediateSize: 512, maxPositions: 128, vocabSize: 1024 },
  mini: { hiddenSize: 256, numLayers: 4, numHeads: 4, intermediateSize: 1024, maxPositions: 128, vocabSize: 1024 },
  'micro-large': { hiddenSize: 384, numLayers: 6, numHeads: 6, intermediateSize: 1536, maxPositions: 128, vocabSize: 1024 },
};

/** The model directory of one size (generated on first use). */
export function petsModelDir(size: PetsModelSize, log: (message: string) => void): string {
  const dir = join(BENCH_MODELS_DIR, `pets-encoder-${size}-seed0`);
  if (!existsSync(join(dir, 'model.safetensors'))) {
    mkdirSync(dir, { recursive: true });
    log(`generating the ${size} encoder in ${dir} (once)`);
    generateModel(dir, { family: 'encoder', size: 'tiny', seed: 0, overrides: OVERRIDES[size] });
  }
  return dir;
}

export function petsModelConfig(size: PetsModelSize, log: (message: string) => void): EncoderConfig {
  const config = readHfConfig(petsModelDir(size, log));
  if (config.family !== 'encoder') throw new Error(`pets bench: ${size} is not an encoder`);
  return config;
}

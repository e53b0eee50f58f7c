/**
 * The PetS demo deployment: a tiny seeded BERT-style encoder (the shared model) and one task of each PET type, each a
 * different classification problem, generated once with the engine's and pet-ops' generators (real Hugging Face
 * files, real PetS parameter files) and reused later. Servers serve it when no model is given; benchmarks and docs
 * can use the same files.
 *
 *   const demo = ensurePetsDemo('.tessera/pets-demo', console.log);
 *   const host = new PetsHost({ modelDir: demo.modelDir, tag: demo.modelName, budgetBytes: 1 << 30 });
 *   await host.registerStartupTasks(demo.tasks);
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

import { generateModel } from '@tessera/engine';

import { generatePetParams } from '../gen/generate.js';
import { writePetParams } from '../formats/pet-file.js';
import type { PetType } from '../types.js';
import type { StartupTask } from './types.js';

/** Bump when the demo's recipe changes, so a cached demo from an older recipe is regenerated. */
export const PETS_DEMO_VERSION = 1;
export const PETS_DEMO_MODEL_NAME = 'tessera-tiny-bert';
const MODEL_SEED = 20_220_700;

/** The demo's tasks: one per PET type, each a different classification problem with its own labels. */
export const PETS_DEMO_TASKS: readonly { id: string; petType: PetType; name: string; labels: readonly string[] }[] = [
  { id: 'sentiment', petType: 'adapter', name: 'Movie-review sentiment (Adapter)', labels: ['negative', 'neutral', 'positive'] },
  { id: 'topic', petType: 'maskbert', name: 'News topic (MaskBert)', labels: ['world', 'sports', 'business', 'science'] },
  { id: 'spam', petType: 'diff', name: 'Spam filter (Diff-Pruning)', labels: ['ham', 'spam'] },
  { id: 'toxicity', petType: 'bitfit', name: 'Toxic comments (BitFit)', labels: ['ok', 'toxic'] },
  { id: 'intent', petType: 'lora', name: 'Support-ticket intent (LoRA)', labels: ['billing', 'shipping', 'returns', 'other'] },
  { id: 'formality', petType: 'prefix', name: 'Formality (prefix-tuning)', labels: ['formal', 'informal'] },
];

export interface PetsDemo {
  dir: string;
  modelDir: string;
  modelName: string;
  /** The parameter files (a server's params root). */
  paramsDir: string;
  /** The demo tasks, to register and load at start-up. */
  tasks: StartupTask[];
  /** True when this call generated the files (false: reused from an earlier run). */
  generated: boolean;
}

function isCurrent(dir: string): boolean {
  try {
    const marker = JSON.parse(readFileSync(join(dir, 'demo.json'), 'utf8')) as { version?: unknown };
    return marker.version === PETS_DEMO_VERSION;
  } catch {
    return false;
  }
}

function describe(root: string, generated: boolean): PetsDemo {
  const paramsDir = join(root, 'params');
  return {
    dir: root,
    modelDir: join(root, PETS_DEMO_MODEL_NAME),
    modelName: PETS_DEMO_MODEL_NAME,
    paramsDir,
    tasks: PETS_DEMO_TASKS.map((t) => ({ path: join(paramsDir, `${t.id}.safetensors`), petType: t.petType, id: t.id, name: t.name, load: true })),
    generated,
  };
}

/**
 * Returns the demo under `dir`, generating it first when it is missing or from an older recipe. Generation writes
 * into a sibling temporary directory and renames it into place, so an interrupted run never leaves a half-written
 * demo that a later start would trust.
 */
export function ensurePetsDemo(dir: string, log: (line: string) => void = () => {}): PetsDemo {
  const root = resolve(dir);
  if (isCurrent(root)) return describe(root, false);

  const staging = `${root}.tmp-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(join(staging, 'params'), { recursive: true });
  log(`generating the demo shared model ${PETS_DEMO_MODEL_NAME} (tiny BERT-style encoder, seed ${MODEL_SEED})`);
  const model = generateModel(join(staging, PETS_DEMO_MODEL_NAME), { family: 'encoder', size: 'tiny', seed: MODEL_SEED });
  log(`  ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}, vocabulary ${model.config.vocabSize}, ${(model.bytes / 1024).toFixed(0)} KiB of weights`);
  PETS_DEMO_TASKS.forEach((t, i) => {
    const params = generatePetParams(t.petType, model.config, { seed: MODEL_SEED + 1 + i, labels: [...t.labels] });
    const bytes = writePetParams(params);
    writeFileSync(join(staging, 'params', `${t.id}.safetensors`), bytes);
    log(`generating task ${i + 1}/${PETS_DEMO_TASKS.length}: ${t.id} (${t.petType}, labels ${t.labels.join('/')}; ${(bytes.byteLength / 1024).toFixed(0)} KiB)`);
  });
  writeFileSync(join(staging, 'demo.json'), `${JSON.stringify({ version: PETS_DEMO_VERSION, model: PETS_DEMO_MODEL_NAME, tasks: PETS_DEMO_TASKS.map((t) => t.id) }, null, 2)}\n`);
  // Another process may have finished first: same seeds, same files, so keep its copy.
  if (isCurrent(root)) {
    rmSync(staging, { recursive: true, force: true });
    return describe(root, false);
  }
  rmSync(root, { recursive: true, force: true });
  mkdirSync(dirname(root), { recursive: true });
  renameSync(staging, root);
  log(`demo written to ${root}`);
  return describe(root, true);
}

/**
 * The demo: @tessera/pet-ops' demo deployment (a tiny seeded BERT-style encoder and one task of each PET type,
 * generated once and reused), cached under the repository root. `tessera-pets` without --model (or with --demo)
 * serves it, with every demo task registered and loaded and the parameter directory as --params-root, so
 * registering one more by path works out of the box.
 */
import { ensurePetsDemo, PETS_DEMO_MODEL_NAME, PETS_DEMO_TASKS, type PetsDemo } from '@tessera/pet-ops';
import { generatedDirectory } from '@tessera/server-kit';

export type Demo = PetsDemo;
export const DEMO_MODEL_NAME = PETS_DEMO_MODEL_NAME;
export const DEMO_TASKS = PETS_DEMO_TASKS;

/** `.tessera/pets-demo` under the repository root (or the current directory outside a checkout). */
export function defaultDemoDir(): string {
  return generatedDirectory(import.meta.url, 'pets-demo');
}

/** Returns the demo under `dir`, generating it first when it is missing or from an older recipe (atomically). */
export function ensureDemo(dir: string = defaultDemoDir(), log: (line: string) => void = () => {}): Demo {
  return ensurePetsDemo(dir, log);
}

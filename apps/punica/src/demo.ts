/**
 * The demo: a tiny seeded Llama-style model and eight LoRA adapters of different ranks and target sets, generated
 * once with the engine's generator (real Hugging Face and PEFT files) and reused on later starts. `pnpm start`
 * without --model serves it.
 */
import { join } from 'node:path';

import { ensureGenerated, generatedDirectory } from '@tessera/server-kit';
import { generateLoraAdapter, generateModel } from '@tessera/engine';

/** Bump when the demo's recipe changes, so a cached demo from an older recipe is regenerated. */
export const DEMO_VERSION = 1;
export const DEMO_MODEL_NAME = 'tessera-tiny-llama';
const MODEL_SEED = 20_240_000;

const ALL_DECODER_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

/** The demo's tenants: a name, a rank and which projections the LoRA adapts. */
export const DEMO_ADAPTERS: readonly { name: string; rank: number; targets: readonly string[] }[] = [
  { name: 'sql-assistant', rank: 8, targets: ['q_proj', 'v_proj'] },
  { name: 'poetry', rank: 16, targets: ['q_proj', 'v_proj'] },
  { name: 'legal-summaries', rank: 4, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] },
  { name: 'support-bot', rank: 8, targets: ALL_DECODER_TARGETS },
  { name: 'code-review', rank: 32, targets: ['q_proj', 'v_proj'] },
  { name: 'medical-notes', rank: 16, targets: ALL_DECODER_TARGETS },
  { name: 'translator', rank: 64, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] },
  { name: 'finance-qa', rank: 2, targets: ['gate_proj', 'up_proj', 'down_proj'] },
];

export interface Demo {
  dir: string;
  modelDir: string;
  modelName: string;
  adaptersDir: string;
  /** True when this call generated the files (false: reused from an earlier run). */
  generated: boolean;
}

/** `.tessera/demo` under the repository root (or the current directory outside a checkout). */
export function defaultDemoDir(): string {
  return generatedDirectory(import.meta.url, 'demo');
}

/** Returns the demo under `dir`, generating it first when it is missing or from an older recipe (DEMO_VERSION). */
export function ensureDemo(dir: string = defaultDemoDir(), log: (line: string) => void = () => {}): Demo {
  const { dir: root, generated } = ensureGenerated(dir, DEMO_VERSION, (staging) => {
    log(`generating the demo model ${DEMO_MODEL_NAME} (tiny Llama-style decoder, seed ${MODEL_SEED})`);
    const model = generateModel(join(staging, DEMO_MODEL_NAME), { family: 'decoder', size: 'tiny', seed: MODEL_SEED });
    log(`  ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}, vocabulary ${model.config.vocabSize}, ${(model.bytes / 1024).toFixed(0)} KiB of weights`);
    DEMO_ADAPTERS.forEach((a, i) => {
      const out = generateLoraAdapter(join(staging, 'adapters', a.name), {
        base: model.config,
        rank: a.rank,
        alpha: 2 * a.rank,
        targets: a.targets,
        seed: MODEL_SEED + 1 + i,
        baseModelNameOrPath: DEMO_MODEL_NAME,
      });
      log(`generating adapter ${i + 1}/${DEMO_ADAPTERS.length}: ${a.name} (rank ${a.rank}, ${a.targets.join(', ')}; ${(out.bytes / 1024).toFixed(0)} KiB)`);
    });
    return { model: DEMO_MODEL_NAME, adapters: DEMO_ADAPTERS.map((a) => a.name) };
  });
  if (generated) log(`demo written to ${root}`);
  return { dir: root, modelDir: join(root, DEMO_MODEL_NAME), adaptersDir: join(root, 'adapters'), modelName: DEMO_MODEL_NAME, generated };
}

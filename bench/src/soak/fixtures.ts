/**
 * The soak bench's models, generated into a fresh temporary directory with the project's generators (seeded, so the
 * same bytes every run): a tiny Llama-style decoder with LoRA adapters of mixed ranks for the Punica server, and a
 * tiny BERT-style encoder with one task of every PET type for the PetS server. Plus, for the budget fault case,
 * adapters sized against a 1 MiB adapter budget: two that fit one at a time, and one larger than the whole budget.
 */
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type DecoderConfig, type EncoderConfig, generateLoraAdapter, generateModel } from '@tessera/engine';
import { generatePetParams, type PetType, writePetParams } from '@tessera/pet-ops';

export const PUNICA_MODEL_NAME = 'soak-llama';
export const PETS_TAG = 'soak-bert';

/** Every Linear of a Llama layer: the adapters' targets (so the rank alone sets an adapter's size). */
const ALL_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;

/** The soak server's adapters: several ranks, so SGMV segments of different widths share a batch. */
const SOAK_ADAPTERS: readonly { name: string; rank: number }[] = [
  { name: 'support', rank: 4 },
  { name: 'legal', rank: 8 },
  { name: 'sql', rank: 8 },
  { name: 'poetry', rank: 16 },
  { name: 'finance', rank: 32 },
  { name: 'medical', rank: 8 },
];

export const PETS_TASKS: readonly { id: string; type: PetType; labels: string[] }[] = [
  { id: 'sentiment', type: 'adapter', labels: ['negative', 'neutral', 'positive'] },
  { id: 'topic', type: 'maskbert', labels: ['world', 'sports', 'business', 'science'] },
  { id: 'spam', type: 'diff', labels: ['ham', 'spam'] },
  { id: 'toxicity', type: 'bitfit', labels: ['ok', 'toxic'] },
  { id: 'intent', type: 'lora', labels: ['billing', 'shipping', 'returns'] },
  { id: 'formality', type: 'prefix', labels: ['formal', 'informal'] },
];

/** The budget case's adapter budget, in MiB (the server's smallest). */
export const BUDGET_ADAPTER_MIB = 1;

export interface SoakFixtures {
  dir: string;
  decoderDir: string;
  decoder: DecoderConfig;
  /** Registered at start-up by every Punica process (soak server and cluster workers). */
  adaptersDir: string;
  adapterNames: string[];
  /** The budget case: two adapters that fit the 1 MiB budget only one at a time, plus two small ones. */
  budgetAdaptersDir: string;
  budgetAdapterNames: string[];
  /** Larger than the whole adapter budget: loaded at run time in the budget case. */
  oversizedAdapterDir: string;
  /** File sizes (f32 LoRA factors) of the budget case's adapters, by name. */
  adapterBytes: Record<string, number>;
  encoderDir: string;
  encoder: EncoderConfig;
  /** PetS --params-root: <id>.safetensors per PETS_TASKS entry. */
  paramsDir: string;
  cleanup(): void;
}

function loraBytes(dir: string): number {
  return statSync(join(dir, 'adapter_model.safetensors')).size;
}

export function makeSoakFixtures(): SoakFixtures {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-soak-'));
  const decoderDir = join(dir, PUNICA_MODEL_NAME);
  const { config: decoder } = generateModel(decoderDir, { family: 'decoder', size: 'tiny', seed: 19, sharpen: 4 });
  if (decoder.family !== 'decoder') throw new Error('soak: the generated decoder is not a decoder');
  const adaptersDir = join(dir, 'adapters');
  SOAK_ADAPTERS.forEach((a, i) => generateLoraAdapter(join(adaptersDir, a.name), { base: decoder, rank: a.rank, targets: ALL_TARGETS, seed: 1900 + i }));

  // A rank-r LoRA on every Linear of the tiny decoder is r × (bytes of one rank) plus its header: size the budget
  // case from the difference of two probes.
  const probe = (rank: number) => {
    const path = join(dir, 'probe', `rank${rank}`);
    generateLoraAdapter(path, { base: decoder, rank, targets: ALL_TARGETS, seed: 1 });
    return loraBytes(path);
  };
  const perRank = probe(2) - probe(1);
  rmSync(join(dir, 'probe'), { recursive: true, force: true });
  const budget = BUDGET_ADAPTER_MIB * 1024 * 1024;
  const bigRank = Math.floor((0.6 * budget) / perRank); // two of these do not fit at once
  const hugeRank = Math.ceil((1.3 * budget) / perRank); // this one never fits
  const budgetAdaptersDir = join(dir, 'budget-adapters');
  const budgetAdapters = [
    { name: 'big-a', rank: bigRank },
    { name: 'big-b', rank: bigRank },
    { name: 'small-a', rank: 4 },
    { name: 'small-b', rank: 8 },
  ];
  const adapterBytes: Record<string, number> = {};
  budgetAdapters.forEach((a, i) => {
    const path = join(budgetAdaptersDir, a.name);
    generateLoraAdapter(path, { base: decoder, rank: a.rank, targets: ALL_TARGETS, seed: 2900 + i });
    adapterBytes[a.name] = loraBytes(path);
  });
  const oversizedAdapterDir = join(dir, 'spare', 'oversized');
  generateLoraAdapter(oversizedAdapterDir, { base: decoder, rank: hugeRank, targets: ALL_TARGETS, seed: 2999 });
  adapterBytes.oversized = loraBytes(oversizedAdapterDir);

  const encoderDir = join(dir, PETS_TAG);
  const { config: encoder } = generateModel(encoderDir, { family: 'encoder', size: 'tiny', seed: 23 });
  if (encoder.family !== 'encoder') throw new Error('soak: the generated encoder is not an encoder');
  const paramsDir = join(dir, 'params');
  mkdirSync(paramsDir, { recursive: true });
  PETS_TASKS.forEach((t, i) => writeFileSync(join(paramsDir, `${t.id}.safetensors`), writePetParams(generatePetParams(t.type, encoder, { seed: 2300 + i, labels: t.labels }))));

  return {
    dir,
    decoderDir,
    decoder,
    adaptersDir,
    adapterNames: SOAK_ADAPTERS.map((a) => a.name),
    budgetAdaptersDir,
    budgetAdapterNames: budgetAdapters.map((a) => a.name),
    oversizedAdapterDir,
    adapterBytes,
    encoderDir,
    encoder,
    paramsDir,
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

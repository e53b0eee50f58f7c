export {
  DEFAULT_DIFF_DENSITY,
  DEFAULT_LORA_RANK,
  DEFAULT_MASK_ZEROS,
  DEFAULT_PREFIX_LENGTH,
  type GeneratePetOptions,
  type GeneratedPetTask,
  PAPER_PET_TYPES,
  generatePetParams,
  generatePetTasks,
} from './generate.js';
export { PetRng, samplePositions, uniformValues } from './rng.js';

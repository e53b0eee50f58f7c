/**
 * The core of @tessera/pet-ops (pets.md §2–3, §8.2):
 *
 *   errors.ts     PetOpsError and its subclasses
 *   registry.ts   PetRegistry: PET type → operator; defaultPetRegistry() holds all seven types
 *   operators/    one operator per PET type: layout, validation, load (device tensors → PetOps), analytic cost
 *   formats/      PET parameter files (safetensors + tessera-pet metadata), in memory and on disk
 *   gen/          seeded synthetic tasks (generatePetParams, generatePetTasks)
 *   reference/    the merged per-task model, a float64 BERT forward and a host interpreter of PetOps (test oracles)
 *   tasks/        TaskManager (register / load / unload, memory accounting), maxTasks (Table 5), loadUntilFull
 */
export * from './errors.js';
export { PetRegistry, defaultPetRegistry } from './registry.js';
export * from './operators/index.js';
export * from './formats/index.js';
export * from './gen/index.js';
export * from './reference/index.js';
export * from './tasks/index.js';

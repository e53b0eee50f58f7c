/**
 * @tessera/pet-ops: PetS's unified PET operators over one shared encoder.
 *
 *   types.ts     the contracts: PET types, parameter files, the shared model, loaded tasks, the operator interface
 *   core.ts      the PET registry, formats, generator, task management and memory accounting (see that file)
 *   engine/      the PET inference engine (PIE): macro-batches, operator scheduling, heads, profiling targets
 */
export * from './types.js';
export * from './core.js';
export * from './engine/index.js';

/**
 * `@tessera/batcher/bench`: the synthetic workloads of PetS's coordinated-batching experiments (pets.md §6: query
 * pools with normally distributed lengths over many tasks, PET types assigned to tasks), kept off the main entry
 * so a server importing the schedulers does not carry them.
 */
export { type CbPoolOptions, assignPetTypes, cbTaskNames, generateCbPool } from './coordinated/workload.js';

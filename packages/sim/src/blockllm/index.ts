/**
 * BlockLLM's cluster simulation (design note §8.3): the 12-GPU topology and roofline block cost model, the
 * simulated zoo and app mix (ingested into a real BlockZoo), the §6.1 workload, and the PM / PS / BlockLLM
 * policies with every ablation — BlockLLM driving @tessera/block-zoo's serving core under virtual time.
 */
export { A100_80G, blockLayers, blockllmTopology, blockProfile, type ClusterOptions, type GpuModel, sumBytes, sumProfiles } from './cluster.js';
export { type BlockllmRequest, type BlockllmWorkload, type BlockllmWorkloadOptions, syntheticWorkload } from './workload.js';
export { appMix, type AppMixOptions, buildSimZoo, CHATGLM_6B, DEFAULT_FOUNDATIONS, LLAMA_13B_SIM, LLAMA_7B_SIM, llamaTensors, type SimApp, type SimAppKind, type SimFoundation, type SimZoo, type SimZooOptions, tableFourSpeedup } from './zoo-mix.js';
export {
  BLOCKLLM_ABLATIONS,
  BLOCKLLM_FULL,
  type BlockllmFeatures,
  type BlockllmPolicy,
  type BlockllmSimOptions,
  type BlockllmSimResult,
  type RequestRecord,
  runBlockllmSimulation,
  type StepTrace,
} from './simulator.js';

/**
 * Every bench, by name. A bench module is imported only when it runs, so `--list` and `--help` work without the
 * native addon or onnxruntime, and one bench's dependencies never slow another down.
 * To add a bench: write src/benches/<name>.ts exporting a `Bench`, then add one entry here.
 */
import type { Bench } from './types.js';

export interface BenchEntry {
  name: string;
  summary: string;
  load(): Promise<Bench>;
}

export const BENCHES: readonly BenchEntry[] = [
  {
    name: 'roofline',
    summary: 'machine limits: STREAM triad and read bandwidth, peak FMA GFLOP/s per ISA (1 and all threads)',
    load: async () => (await import('./benches/roofline.js')).rooflineBench,
  },
  {
    name: 'gemm',
    summary: 'our GEMM (f32 and bf16 weights) vs onnxruntime MatMul on BERT-base and Llama-7B projections',
    load: async () => (await import('./benches/gemm.js')).gemmBench,
  },
  {
    name: 'engine',
    summary: 'mini encoder tokens/s vs onnxruntime; mini decoder decode-step latency at batch 1..32; generation tokens/s',
    load: async () => (await import('./benches/engine.js')).engineBench,
  },
  {
    name: 'punica',
    summary: 'Punica in miniature: SGMV vs Loop vs Gather-BMM (Fig. 8), ranks (Fig. 9), roofline (Fig. 7), textgen policies (Fig. 11)',
    load: async () => (await import('./benches/punica.js')).punicaBench,
  },
  {
    name: 'hmi',
    summary: 'HMI: PLOT lookup vs the lower layers, storage against α, the Table 2 memory analogue, Table 6 pipelining (simulated)',
    load: async () => (await import('./benches/hmi.js')).hmiBench,
  },
  {
    name: 'prefix-cache',
    summary: 'prefix caching keyed by adapter on a shared system prompt: hit rate, prefill tokens, tokens/s (on vs off)',
    load: async () => (await import('./benches/prefix-cache.js')).prefixCacheBench,
  },
  {
    name: 'cluster',
    summary: 'Punica cluster (Fig. 13): 16 simulated GPUs for an hour of ramped zipf-1.5 load; 3 worker processes on Redis vs one process',
    load: async () => (await import('./benches/cluster.js')).clusterBench,
  },
  {
    name: 'pets',
    summary: 'PetS in miniature: max tasks in a byte budget (Table 5), PetS vs SeqS throughput (Fig. 7, 9), batching strategies (Fig. 12)',
    load: async () => (await import('./benches/pets.js')).petsBench,
  },
  {
    name: 'soak',
    summary: 'Punica and PetS servers under concurrent streaming/non-streaming/cancelled clients (errors, p50/p99, tokens/s, RSS); faults: worker killed, Redis restarted, budgets exhausted',
    load: async () => (await import('./benches/soak.js')).soakBench,
  },
  {
    name: 'arlo',
    summary: 'Arlo: allocation solve time DP vs HiGHS (Table 2), dispatch overhead (Fig. 9), simulated Arlo vs ST/DT/INFaaS-like, ablations and auto-scaling (Figs. 8, 10-12, Tables 3-4)',
    load: async () => (await import('./benches/arlo.js')).arloBench,
  },
  {
    name: 'blockllm',
    summary: 'BlockLLM: Table 1 shares, zoo vs per-model memory for N apps (Fig. 5), simulated 12-GPU PM vs PS vs BlockLLM, ablations, 10-30 apps, Table 2 style (Figs. 18-26)',
    load: async () => (await import('./benches/blockllm.js')).blockllmBench,
  },
  {
    name: 'train',
    summary: 'training tokens/s and MFU (vs the FMA peak), full and LoRA, mini decoder and encoder; forward/backward/optimizer split',
    load: async () => (await import('./benches/train.js')).trainBench,
  },
];

export function findBench(name: string): BenchEntry | undefined {
  return BENCHES.find((b) => b.name === name);
}

export function benchNames(): string[] {
  return BENCHES.map((b) => b.name);
}

/**
 * The §8.3 cluster: servers of A100-80GB GPUs ([2, 2, 4, 4] by default), NVLink inside a server and 100 Gbps
 * between servers, loading from disk then PCIe; and the roofline block cost model that turns a block's manifest
 * (bytes, parameters, KV and activation bytes per token) into the linear ComputeProfile the serving core's cost
 * model and agents use. Units: ms, bytes, bytes per ms (1 GB/s = 1e6 B/ms).
 */
import type { BlockBytes, BlockManifest, ComputeProfile, Topology } from '@tessera/block-zoo';

import { SimArgumentError } from '../errors.js';

/** One GPU kind and the efficiency factors of the roofline (design note §8.3). */
export interface GpuModel {
  memoryBytes: number;
  /** HBM bandwidth, B/ms (A100: 2.0 TB/s). */
  hbmBytesPerMs: number;
  /** Peak fp16 FLOP/ms (A100: 312 TFLOP/s). */
  peakFlopsPerMs: number;
  /** Achieved fraction of HBM bandwidth and of peak compute. */
  memEfficiency: number;
  computeEfficiency: number;
  /** Kernel launches per layer (ms per layer a block covers). */
  launchMsPerLayer: number;
  /** Fixed cost of one block engine step (its own launch, scheduling and hand-off). */
  blockStepMs: number;
  /** Context length the per-row KV read is charged at (the linear profile cannot see each row's context). */
  meanContextTokens: number;
}

/** A100-80GB, η calibrated so LLaMA-7B decodes at batch 1 in ≈ 10 ms per token (design note §8.3's sanity check). */
export const A100_80G: GpuModel = {
  memoryBytes: 80 * 2 ** 30,
  hbmBytesPerMs: 2.0e9,
  peakFlopsPerMs: 312e9,
  memEfficiency: 0.7,
  computeEfficiency: 0.5,
  launchMsPerLayer: 0.02,
  blockStepMs: 0.05,
  meanContextTokens: 256,
};

export interface ClusterOptions {
  /** GPUs per server. Default [2, 2, 4, 4] (§6.1). */
  servers?: readonly number[];
  gpu?: GpuModel;
  /** Intra-server link (NVLink3: 250 GB/s, α 10 µs) and inter-server (100 Gbps: 12.5 GB/s, α 30 µs). */
  intraBytesPerMs?: number;
  interBytesPerMs?: number;
  intraLatencyMs?: number;
  interLatencyMs?: number;
  /** Disk → host and host → device (2.5 GB/s then 25 GB/s, in series). */
  diskBytesPerMs?: number;
  pcieBytesPerMs?: number;
}

export function blockllmTopology(options: ClusterOptions = {}): Topology {
  const servers = options.servers ?? [2, 2, 4, 4];
  if (servers.length === 0 || servers.some((n) => !Number.isInteger(n) || n < 1)) throw new SimArgumentError(`servers must be positive GPU counts, got [${servers.join(', ')}]`);
  const gpu = options.gpu ?? A100_80G;
  const disk = options.diskBytesPerMs ?? 2.5e6;
  const pcie = options.pcieBytesPerMs ?? 25e6;
  const load = 1 / (1 / disk + 1 / pcie);
  const devices = servers.flatMap((n, s) => Array.from({ length: n }, (_, g) => ({ id: `s${s}g${g}`, server: `s${s}`, memoryBytes: gpu.memoryBytes, memBandwidth: gpu.hbmBytesPerMs, loadBandwidth: load })));
  return {
    devices,
    intraServer: { bandwidth: options.intraBytesPerMs ?? 250e6, latencyMs: options.intraLatencyMs ?? 0.01 },
    interServer: { bandwidth: options.interBytesPerMs ?? 12.5e6, latencyMs: options.interLatencyMs ?? 0.03 },
    schedulerServer: 's0',
  };
}

/** Layers a block covers (half layers count as one launch group each). */
export function blockLayers(m: Pick<BlockManifest, 'span'>): number {
  if (m.span === null) return 1;
  return Math.max(1, Math.ceil((m.span.end - m.span.start) / 2));
}

/**
 * Roofline per block as a linear profile: a decode step reads the weights once (fixed), each row reads its KV
 * (per row, at the mean context) and each token costs 2 · params FLOPs (per token; prefill tokens dominate).
 * The sum of the memory and compute terms stands in for their max (it is within 2× of it and keeps the profile
 * linear, as the serving core's ComputeProfile is).
 */
export function blockProfile(m: Pick<BlockManifest, 'paramBytes' | 'params' | 'kvBytesPerToken'>, layers: number, gpu: GpuModel = A100_80G): ComputeProfile {
  const bw = gpu.hbmBytesPerMs * gpu.memEfficiency;
  return {
    fixedMs: m.paramBytes / bw + layers * gpu.launchMsPerLayer + gpu.blockStepMs,
    perRowMs: (m.kvBytesPerToken * gpu.meanContextTokens) / bw,
    perTokenMs: (2 * m.params) / (gpu.peakFlopsPerMs * gpu.computeEfficiency),
  };
}

/**
 * The part of a block's step that is latency rather than GPU work: its kernel launches and its engine's step
 * overhead (the profile's fixedMs includes them). Under 'multiplex' sharing it does not occupy the GPU, so engines
 * running at once overlap it; only the rest of the step is shared.
 */
export function blockLaunchMs(m: Pick<BlockManifest, 'span'>, gpu: GpuModel = A100_80G): number {
  return blockLayers(m) * gpu.launchMsPerLayer + gpu.blockStepMs;
}

/** Profiles of several blocks run as one engine (per-model provisioning): fixed costs, row and token costs add. */
export function sumProfiles(profiles: readonly ComputeProfile[]): ComputeProfile {
  return profiles.reduce((a, p) => ({ fixedMs: a.fixedMs + p.fixedMs, perRowMs: a.perRowMs + p.perRowMs, perTokenMs: a.perTokenMs + p.perTokenMs }), { fixedMs: 0, perRowMs: 0, perTokenMs: 0 });
}

export function sumBytes(id: string, blocks: readonly BlockBytes[], paramBytes: number): BlockBytes {
  return { blockId: id, paramBytes, kvBytesPerToken: blocks.reduce((n, b) => n + b.kvBytesPerToken, 0), activationBytesPerToken: blocks.at(-1)?.activationBytesPerToken ?? 0 };
}

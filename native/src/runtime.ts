/** Process-level controls and facts of a backend: byte budget, memory stats, threads, ISA, device info. */
import type { AllocatorStats, DeviceInfo, Isa } from './binding.js';
import { callNative, UnsupportedOpError } from './errors.js';
import { type Backend, getBackend } from './loader.js';

export function allocatorStats(backend: Backend = getBackend()): AllocatorStats {
  return backend.binding.allocatorStats();
}

/** Sets the byte budget. Lowering it below what is in use makes new allocations fail until memory is freed. */
export function setBudget(bytes: number, backend: Backend = getBackend()): AllocatorStats {
  return callNative(() => backend.binding.setBudget(bytes));
}

export function resetPeak(backend: Backend = getBackend()): AllocatorStats {
  return backend.binding.resetPeak();
}

export function deviceInfo(backend: Backend = getBackend()): DeviceInfo {
  return backend.binding.info();
}

/** Waits for queued device work (a no-op on CPU, where ops finish before returning). */
export function synchronize(backend: Backend = getBackend()): void {
  callNative(() => backend.binding.synchronize());
}

/** Resizes the CPU kernel thread pool (default: TESSERA_THREADS or the core count). Not while ops run. */
export function setThreads(n: number, backend: Backend = getBackend('cpu')): number {
  const fn = backend.binding.setThreads;
  if (!fn) throw new UnsupportedOpError(`setThreads: the ${backend.device} backend has no thread pool`);
  return callNative(() => fn(n));
}

/** Caps the CPU ISA kernels dispatch to ('best' restores the default). Returns the ISA now in use. */
export function setIsa(isa: Isa | 'best', backend: Backend = getBackend('cpu')): Isa {
  const fn = backend.binding.setIsa;
  if (!fn) throw new UnsupportedOpError(`setIsa: the ${backend.device} backend has no ISA dispatch`);
  return callNative(() => fn(isa));
}

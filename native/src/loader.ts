/**
 * Finds and loads the addon. `TESSERA_DEVICE=auto|cpu|cuda` (default auto):
 *   cpu   load tessera_cpu.node only;
 *   auto  use tessera_cuda.node when it was built and a device answers, else CPU (the reason is recorded);
 *   cuda  the same, but a fallback to CPU is also reported with a process warning.
 * A missing build is one clear error naming the command that builds it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { DeviceKind, NativeBinding } from './binding.js';
import { NativeBuildMissingError, TesseraError } from './errors.js';

export type DeviceRequest = 'auto' | DeviceKind;

export interface Backend {
  /** Which addon runs ops: `cpu` or `cuda`. */
  readonly device: DeviceKind;
  readonly binding: NativeBinding;
  /** What was asked for (env or option). */
  readonly requested: DeviceRequest;
  /** Why CUDA is not in use, when it was asked for or `auto` found a CUDA build; otherwise null. */
  readonly fallbackReason: string | null;
  /** Absolute path of the loaded `.node` file. */
  readonly path: string;
}

const require = createRequire(import.meta.url);

/** `build/Release` of this package: the same depth from `src/` and `dist/`. */
export function addonDirectory(): string {
  return process.env.TESSERA_NATIVE_DIR ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'build', 'Release');
}

export function parseDeviceRequest(value: string | undefined): DeviceRequest {
  const v = (value ?? 'auto').trim().toLowerCase();
  if (v === '' || v === 'auto') return 'auto';
  if (v === 'cpu' || v === 'cuda') return v;
  throw new TesseraError('TESSERA_INVALID_ARGUMENT', `TESSERA_DEVICE must be auto, cpu or cuda, got "${value}"`);
}

/**
 * Where the CPU addon is: a local build (`build/Release`, or TESSERA_NATIVE_DIR) when there is one, else the binary
 * prebuilt into the published package (`prebuilds/<platform>-<arch>/`, prebuildify's layout), so an install needs
 * no compiler. A local build wins, as with node-gyp-build, so a fresh build is never shadowed by a shipped one.
 */
export function cpuAddonPath(dir: string = addonDirectory()): string {
  const local = join(dir, 'tessera_cpu.node');
  if (existsSync(local) || process.env.TESSERA_NATIVE_DIR) return local;
  const prebuilt = join(dirname(fileURLToPath(import.meta.url)), '..', 'prebuilds', `${process.platform}-${process.arch}`, 'tessera_cpu.node');
  return existsSync(prebuilt) ? prebuilt : local;
}

function loadCpu(dir: string): { binding: NativeBinding; path: string } {
  const path = cpuAddonPath(dir);
  if (!existsSync(path)) {
    throw new NativeBuildMissingError(
      `Tessera's native addon is not built: ${path} does not exist. ` +
        'Build it with `pnpm build:native` at the repository root (or `pnpm --filter @tessera/native build:native`); ' +
        'it needs cmake and a C++17 compiler, and nvcc only for the optional CUDA addon.',
    );
  }
  try {
    return { binding: require(path) as NativeBinding, path };
  } catch (cause) {
    throw new NativeBuildMissingError(
      `Tessera's native addon at ${path} failed to load (${(cause as Error).message}). ` +
        'Rebuild it with `pnpm build:native` at the repository root.',
      { cause },
    );
  }
}

/** Tries the CUDA addon; returns it, or the reason it cannot be used. */
function tryCuda(dir: string): { binding: NativeBinding; path: string } | { reason: string } {
  const path = join(dir, 'tessera_cuda.node');
  if (!existsSync(path)) return { reason: `tessera_cuda.node was not built (nvcc was not found at build time, or TESSERA_CUDA=OFF)` };
  // Probe in a child process first (node-llama-cpp's pattern): a broken CUDA binary or driver can abort the
  // process that loads it, and the probe keeps that from taking the caller down.
  const probeScript = `const r = require(${JSON.stringify(path)}).cudaDeviceCount(); process.stdout.write(JSON.stringify(r));`;
  const child = spawnSync(process.execPath, ['-e', probeScript], { encoding: 'utf8', timeout: 30_000 });
  if (child.status !== 0) {
    const why = (child.stderr || child.error?.message || `exit ${child.status ?? child.signal}`).trim().split('\n').slice(-3).join(' ');
    return { reason: `tessera_cuda.node failed its load probe: ${why}` };
  }
  let binding: NativeBinding;
  try {
    binding = require(path) as NativeBinding;
  } catch (cause) {
    return { reason: `tessera_cuda.node failed to load: ${(cause as Error).message}` };
  }
  const probe = binding.cudaDeviceCount?.();
  if (!probe) return { reason: 'tessera_cuda.node has no cudaDeviceCount export (stale build?)' };
  if (probe.count < 1) return { reason: `no CUDA device answers: ${probe.error ?? 'cudaGetDeviceCount returned 0'}` };
  return { binding, path };
}

/** Loads a backend without caching. Prefer {@link getBackend}. */
export function loadBackend(request: DeviceRequest = parseDeviceRequest(process.env.TESSERA_DEVICE)): Backend {
  const dir = addonDirectory();
  if (request !== 'cpu') {
    const cuda = tryCuda(dir);
    if ('binding' in cuda) return { device: 'cuda', binding: cuda.binding, requested: request, fallbackReason: null, path: cuda.path };
    const cpu = loadCpu(dir);
    if (request === 'cuda') {
      process.emitWarning(`TESSERA_DEVICE=cuda but ${cuda.reason}; running on CPU.`, { code: 'TESSERA_CUDA_FALLBACK' });
    }
    return { device: 'cpu', binding: cpu.binding, requested: request, fallbackReason: cuda.reason, path: cpu.path };
  }
  const cpu = loadCpu(dir);
  return { device: 'cpu', binding: cpu.binding, requested: request, fallbackReason: null, path: cpu.path };
}

const cache = new Map<DeviceRequest, Backend>();

/** The process-wide backend for a request (default: `TESSERA_DEVICE`). Loaded once. */
export function getBackend(request?: DeviceRequest): Backend {
  const key = request ?? parseDeviceRequest(process.env.TESSERA_DEVICE);
  let b = cache.get(key);
  if (!b) {
    b = loadBackend(key);
    cache.set(key, b);
  }
  return b;
}

/** The CPU backend, always available once built (CUDA tests use it as the reference). */
export function getCpuBackend(): Backend {
  return getBackend('cpu');
}

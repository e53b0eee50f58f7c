/**
 * The CUDA backend (tessera_cuda.node) against the CPU backend and against double-precision oracles.
 *
 * The loader tests run everywhere: without a GPU (or driver) the CUDA addon must still load, report why through
 * cudaDeviceCount(), and `auto` must fall back to the CPU with that reason. Everything else needs a CUDA device
 * and is skipped unless `getBackend('auto')` picked CUDA.
 *
 * Ops are called through the binding (the contract in src/binding.ts, which both addons implement), so these
 * tests exercise exactly the native validation and kernels. Tensors move between backends through the host:
 * Tensor.from(t.toArray(), t.shape, { dtype, backend }).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import {
  addonDirectory,
  allocatorStats,
  type Backend,
  BudgetExceededError,
  callNative,
  type DType,
  DeviceError,
  deviceInfo,
  getBackend,
  getCpuBackend,
  InvalidArgumentError,
  loadBackend,
  type NativeBinding,
  setBudget,
  sgmvExpand,
  sgmvShrink,
  bgmvExpand,
  bgmvShrink,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import type { NativeGemmOptions } from '../src/binding.js';
import { expectBitwiseEqual, expectClose, randomFloats, randomInts, rng } from './helpers.js';

const require = createRequire(import.meta.url);
const cudaAddonPath = join(addonDirectory(), 'tessera_cuda.node');
const cudaBuilt = existsSync(cudaAddonPath);
const cudaBinding = (): NativeBinding => require(cudaAddonPath) as NativeBinding;
const cudaProbe = cudaBuilt ? cudaBinding().cudaDeviceCount?.() : undefined;
const hasDevice = getBackend('auto').device === 'cuda';

// Every op of the contract (src/binding.ts); the CUDA addon must export all of them.
const contractOps = [
  'empty', 'allocatorStats', 'setBudget', 'resetPeak', 'synchronize', 'info', 'copy', 'gemm', 'gemmBatched', 'embedding',
  'gatherRows', 'scatterRows', 'convert', 'binary', 'scale', 'activation', 'siluMul', 'layerNorm', 'rmsNorm', 'softmax',
  'rope', 'attentionPrefill', 'attentionDecode', 'sgmvShrink', 'sgmvExpand', 'bgmvShrink', 'bgmvExpand', 'petSiteRun', 'cudaDeviceCount',
  'layerNormBackward', 'rmsNormBackward', 'softmaxBackward', 'activationBackward', 'siluMulBackward', 'crossEntropy', 'columnSum',
  'embeddingBackward', 'attentionPrefillBackward', 'adamw', 'sumSquares',
] as const;

describe('CUDA addon loading (runs everywhere)', () => {
  it('auto uses CUDA only when a device answers, and otherwise records why', () => {
    const b = loadBackend('auto');
    if (!cudaBuilt) {
      expect(b.device).toBe('cpu');
      expect(b.fallbackReason).toMatch(/not built/);
      return;
    }
    if (cudaProbe && cudaProbe.count > 0) {
      expect(b.device).toBe('cuda');
      expect(b.fallbackReason).toBeNull();
    } else {
      expect(b.device).toBe('cpu');
      expect(b.fallbackReason).toMatch(/driver|device/i);
    }
  });

  it.skipIf(!cudaBuilt)('exports the whole op contract and probes without throwing', () => {
    const binding = cudaBinding();
    expect(binding.device).toBe('cuda');
    for (const name of contractOps) expect(typeof (binding as unknown as Record<string, unknown>)[name], name).toBe('function');
    const probe = binding.cudaDeviceCount!();
    expect(probe.count).toBeGreaterThanOrEqual(0);
    if (probe.count === 0) expect(probe.error).toMatch(/cudaGetDeviceCount: .+/);
    else expect(probe.error).toBeNull();
  });

  it.skipIf(!cudaBuilt || (cudaProbe?.count ?? 0) > 0)('without a device, using the addon throws DeviceError instead of crashing', () => {
    const binding = cudaBinding();
    const backend: Backend = { device: 'cuda', binding, requested: 'cuda', fallbackReason: null, path: cudaAddonPath };
    expect(() => Tensor.empty([4], 'f32', backend)).toThrow(DeviceError);
    expect(() => allocatorStats(backend)).toThrow(/driver|device/i);
    expect(() => callNative(() => binding.info())).toThrow(DeviceError);
    // The failure is remembered, not retried into a crash.
    expect(() => Tensor.zeros([2, 2], 'f32', backend)).toThrow(DeviceError);
  });
});

// ---------------------------------------------------------------- helpers for the device tests

const gpu = (): Backend => getBackend('auto');
const host = (): Backend => getCpuBackend();
/** CUDA-only export beside the contract: the kernel gemm's `auto` picks for (m, n, k). */
const autoKernel = (m: number, n: number, k: number): string =>
  (gpu().binding as NativeBinding & { cudaGemmKernel(m: number, n: number, k: number): string }).cudaGemmKernel(m, n, k);
type HostData = Float32Array | Uint16Array | Int32Array | Uint8Array;
/** A tensor's raw bytes, for bitwise comparisons of any dtype (NaN payloads included). */
function bytesOf(t: Tensor): number[] {
  const a = t.toArray();
  return Array.from(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
}

/** The same data on the CPU and the CUDA backend. */
function both(data: HostData, shape: number[], dtype: DType): [Tensor, Tensor] {
  return [Tensor.from(data, shape, { dtype, backend: host() }), Tensor.from(data, shape, { dtype, backend: gpu() })];
}
const f32s = (data: Float32Array, shape: number[]): [Tensor, Tensor] => both(data, shape, 'f32');
const i32s = (data: Int32Array, shape: number[]): [Tensor, Tensor] => both(data, shape, 'i32');
const read = (t: Tensor): Float32Array => t.toArray() as Float32Array;
/** A copy of t on the other backend. */
const moveTo = (t: Tensor, backend: Backend): Tensor => Tensor.from(t.toArray(), t.shape, { dtype: t.dtype, backend });

/** |got - want| <= tol[i] elementwise (tol per element), reporting the worst excess. */
function expectWithin(got: Float32Array, want: Float64Array, tol: Float64Array, label: string): void {
  expect(got.length, `${label} length`).toBe(want.length);
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < want.length; i++) {
    const excess = Math.abs(got[i]! - want[i]!) - tol[i]!;
    if (!(excess <= 0) && (worst < 0 || excess > worstExcess || Number.isNaN(excess))) {
      worst = i;
      worstExcess = excess;
    }
  }
  if (worst >= 0) expect.fail(`${label}: element ${worst} is ${got[worst]}, want ${want[worst]} ± ${tol[worst]}`);
}

// f16 / bf16 bit patterns in JS (the data generators below only make exactly representable values).
const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);
function bf16Bits(x: number): number {
  scratchF32[0] = x;
  const u = scratchU32[0]!;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;  // round to nearest even (finite inputs)
}
function bf16Value(bits: number): number {
  scratchU32[0] = bits << 16;
  return scratchF32[0]!;
}
/** x must be exactly representable as a normal f16 (or zero). */
function f16Bits(x: number): number {
  if (x === 0) return Object.is(x, -0) ? 0x8000 : 0;
  const sign = x < 0 ? 0x8000 : 0;
  const a = Math.abs(x);
  const e = Math.floor(Math.log2(a));
  const mant = Math.round((a / 2 ** e - 1) * 1024);
  return sign | ((e + 15) << 10) | mant;
}
function f16Value(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const e = (bits >> 10) & 0x1f;
  const m = bits & 0x3ff;
  return e === 0 ? sign * m * 2 ** -24 : sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** Random B data in `dtype` (bits for f16/bf16) with the f32 values it encodes. */
function randomB(n: number, seed: number, dtype: DType): { data: Float32Array | Uint16Array; values: Float32Array } {
  const r = rng(seed);
  const values = new Float32Array(n);
  if (dtype === 'f32') {
    for (let i = 0; i < n; i++) values[i] = 2 * r() - 1;
    return { data: values, values };
  }
  const bits = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    if (dtype === 'bf16') {
      bits[i] = bf16Bits(2 * r() - 1);
      values[i] = bf16Value(bits[i]!);
    } else {
      const v = Math.round((2 * r() - 1) * 1024) / 1024;  // j / 1024: exact in f16
      bits[i] = f16Bits(v);
      values[i] = f16Value(bits[i]!);
    }
  }
  return { data: bits, values };
}

interface GemmCase {
  m: number; n: number; k: number; batch?: number; sharedB?: boolean;
  transA?: boolean; transB?: boolean; alpha?: number; beta?: number; bias?: boolean;
}

interface GemmOracle {
  want: Float64Array;  // exact result in double
  absSum: Float64Array;  // |alpha| * sum_p |a b| + |beta c| + |bias|: scales every rounding error
  l2: Float64Array;  // |alpha| * sqrt(sum_p (a b)^2): scales the random-sign rounding of A (and B) for tensor cores
}

function gemmOracle(c: GemmCase, a: Float32Array, b: Float32Array, c0: Float32Array, bias: Float32Array | null): GemmOracle {
  const { m, n, k } = c;
  const batch = c.batch ?? 1;
  const alpha = c.alpha ?? 1;
  const beta = c.beta ?? 0;
  const want = new Float64Array(batch * m * n);
  const absSum = new Float64Array(batch * m * n);
  const l2 = new Float64Array(batch * m * n);
  for (let bi = 0; bi < batch; bi++) {
    const ao = bi * m * k;
    const bo = c.sharedB ? 0 : bi * k * n;
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let s = 0, sa = 0, sq = 0;
        for (let p = 0; p < k; p++) {
          const av = c.transA ? a[ao + p * m + i]! : a[ao + i * k + p]!;
          const bv = c.transB ? b[bo + j * k + p]! : b[bo + p * n + j]!;
          const prod = av * bv;
          s += prod;
          sa += Math.abs(prod);
          sq += prod * prod;
        }
        const o = bi * m * n + i * n + j;
        const cTerm = beta === 0 ? 0 : beta * c0[o]!;
        const biasTerm = bias ? bias[j]! : 0;
        want[o] = alpha * s + cTerm + biasTerm;
        absSum[o] = Math.abs(alpha) * sa + Math.abs(cTerm) + Math.abs(biasTerm);
        l2[o] = Math.abs(alpha) * Math.sqrt(sq);
      }
    }
  }
  return { want, absSum, l2 };
}

type GemmKernel = 'auto' | 'reference' | 'simt' | 'skinny' | 'tensor';

// Tolerances (per element; u = 2^-24 is f32's unit roundoff):
//   reference kernel: double accumulation, one final rounding -> 2u |want| (+ 1e-30 for zeros).
//   f32 paths (simt, skinny, CPU): sequential f32 FMA -> the classic bound (k + 2) u * absSum.
//   tensor cores: inputs rounded to the WMMA type (relative error e: tf32 2^-11 for each of A and B, so 2^-10;
//     f16 2^-11; bf16 2^-9 on A only), which for random data adds an error of about e/sqrt(3) * l2 with random
//     sign; we allow 8 e * l2 (about 14 standard deviations, so a correct kernel cannot fail, while a dropped or
//     duplicated k tile, a wrong row or a wrong column is off by at least ~sqrt(16) * rms(ab) and is caught),
//     plus the f32 accumulation bound.
const inputRounding: Record<string, number> = { f32: 2 ** -10, f16: 2 ** -11, bf16: 2 ** -9 };
function gemmTolerance(kernel: GemmKernel, bDtype: DType, k: number, o: GemmOracle, resolved: string): Float64Array {
  const u = 2 ** -24;
  const tol = new Float64Array(o.want.length);
  for (let i = 0; i < tol.length; i++) {
    if (kernel === 'reference') tol[i] = 2 * u * Math.abs(o.want[i]!) + 1e-30;
    else if (resolved === 'tensor') tol[i] = 8 * inputRounding[bDtype]! * o.l2[i]! + (k + 2) * u * o.absSum[i]! + 1e-30;
    else tol[i] = (k + 2) * u * o.absSum[i]! + 1e-30;
  }
  return tol;
}

function runGemm(backend: Backend, c: GemmCase, bDtype: DType, kernel: GemmKernel, data: { a: Float32Array; b: Float32Array | Uint16Array; c0: Float32Array; bias: Float32Array | null }): Float32Array {
  const batch = c.batch;
  const aShape = c.transA ? [c.k, c.m] : [c.m, c.k];
  const bShape = c.transB ? [c.n, c.k] : [c.k, c.n];
  const a = Tensor.from(data.a, batch === undefined ? aShape : [batch, ...aShape], { backend });
  const b = Tensor.from(data.b, batch === undefined || c.sharedB ? bShape : [batch, ...bShape], { dtype: bDtype, backend });
  const out = Tensor.from(data.c0, batch === undefined ? [c.m, c.n] : [batch, c.m, c.n], { backend });
  const bias = data.bias ? Tensor.from(data.bias, [c.n], { backend }) : null;
  const opts = {
    transA: c.transA ?? false, transB: c.transB ?? false, alpha: c.alpha ?? 1, beta: c.beta ?? 0,
    bias: bias ? bias.native : null, ...(backend.device === 'cuda' ? { kernel } : {}),
  } as NativeGemmOptions;
  callNative(() => (batch === undefined ? backend.binding.gemm : backend.binding.gemmBatched)(a.native, b.native, out.native, opts));
  const result = read(out);
  for (const t of [a, b, out, bias]) t?.dispose();
  return result;
}

describe.skipIf(!hasDevice)('CUDA backend', () => {
  it('describes the device and budgets 90% of its memory by default', () => {
    const info = deviceInfo(gpu());
    expect(info.device).toBe('cuda');
    expect(info.name).toEqual(expect.any(String));
    expect(info.computeCapability).toMatch(/^\d+\.\d+$/);
    expect(info.multiprocessors).toBeGreaterThan(0);
    expect(info.totalMemory).toBeGreaterThan(0);
    expect((info as { allocator?: string }).allocator).toMatch(/^cudaMalloc(Async)?$/);
    const envBudget = ['TESSERA_BUDGET_BYTES', 'TESSERA_BUDGET_MB', 'TESSERA_BUDGET_GB'].some((v) => process.env[v]);
    if (!envBudget) expect(allocatorStats(gpu()).budget).toBe(Math.floor(info.totalMemory! / 10) * 9);
  });

  it('enforces the byte budget on device memory', () => {
    const before = allocatorStats(gpu());
    try {
      setBudget(before.inUse + (1 << 20), gpu());
      const small = Tensor.empty([1000], 'f32', gpu());  // fits
      expect(() => Tensor.empty([1 << 20], 'f32', gpu())).toThrow(BudgetExceededError);
      const mid = allocatorStats(gpu());
      expect(mid.failed).toBe(before.failed + 1);
      small.dispose();
      // >=: a garbage-collected tensor from elsewhere may be released in between, never one allocated.
      expect(mid.inUse - allocatorStats(gpu()).inUse).toBeGreaterThanOrEqual(4032);
    } finally {
      setBudget(before.budget, gpu());
    }
  });

  it('round-trips data through write, writeAsync, read and copy (incl. overlapping views)', async () => {
    const data = randomFloats(1001, 1);
    const t = Tensor.from(data, [1001], { backend: gpu() });
    expectBitwiseEqual(read(t), data, 'write/read');
    const u = await Tensor.fromAsync(data, [7, 143], { backend: gpu() });
    expectBitwiseEqual(read(u), data, 'writeAsync');
    const empty = Tensor.from(new Float32Array(0), [0, 5], { backend: gpu() });
    expect(read(empty)).toHaveLength(0);
    // copy between overlapping views of one storage behaves like memmove
    const rows = Tensor.from(randomFloats(40, 2), [10, 4], { backend: gpu() });
    const want = read(rows);
    callNative(() => gpu().binding.copy(rows.rows(0, 9).native, rows.rows(1, 9).native));
    want.copyWithin(4, 0, 36);
    expectBitwiseEqual(read(rows), want, 'overlapping copy');
  });

  // ---------------------------------------------------------------- GEMM

  const gemmCases: GemmCase[] = [
    { m: 1, n: 33, k: 70, transB: true, bias: true },  // skinny, one chunk
    { m: 3, n: 130, k: 1500, transB: true, alpha: 0.5 },  // skinny [n,k], two k chunks, scalar loads (k odd)
    { m: 8, n: 77, k: 1032, transB: true, beta: 0.75, bias: true },  // skinny [n,k] with 16-byte loads
    { m: 5, n: 40, k: 1100 },  // skinny [k,n], two chunks split over warps
    { m: 6, n: 19, k: 9, transA: true },
    { m: 9, n: 15, k: 7 },  // simt
    { m: 12, n: 100, k: 33, transA: true, transB: true, beta: -1 },
    { m: 16, n: 16, k: 16 },  // one exact tensor-core tile
    { m: 40, n: 50, k: 60, bias: true },
    { m: 130, n: 129, k: 77, transB: true, alpha: -2, beta: 0.5 },
    { m: 77, n: 200, k: 300, transA: true },
    { m: 33, n: 47, k: 0, beta: 1, bias: true },  // k = 0: C = beta C + bias
    { m: 0, n: 5, k: 3 },
    { m: 4, n: 0, k: 3 },
  ];

  it('gemm matches a double-precision oracle on every kernel and B dtype (tolerances above)', () => {
    const resolve = (c: GemmCase, kernel: GemmKernel): string => (kernel === 'auto' ? autoKernel(c.m, c.n, c.k) : kernel);
    let seed = 100;
    for (const c of gemmCases) {
      for (const bDtype of ['f32', 'f16', 'bf16'] as const) {
        const a = randomFloats(c.m * c.k, seed++);
        const { data: b, values: bv } = randomB(c.k * c.n, seed++, bDtype);
        const c0 = randomFloats(c.m * c.n, seed++);
        const bias = c.bias ? randomFloats(c.n, seed++) : null;
        const oracle = gemmOracle(c, a, bv, c0, bias);
        const kernels: GemmKernel[] = ['auto', 'reference', 'simt', 'tensor', ...(c.m <= 8 ? (['skinny'] as const) : [])];
        for (const kernel of kernels) {
          const got = runGemm(gpu(), c, bDtype, kernel, { a, b, c0, bias });
          const label = `gemm ${JSON.stringify(c)} B ${bDtype} ${kernel}`;
          expectWithin(got, oracle.want, gemmTolerance(kernel, bDtype, c.k, oracle, resolve(c, kernel)), label);
        }
        // The CPU backend computes the same function (f32 FMA), so it lies within the f32 bound of the oracle too,
        // and CUDA's auto path within its own bound of the oracle: compare both against the CPU result directly.
        const cpu = runGemm(host(), c, bDtype, 'auto', { a, b, c0, bias });
        const cpuAsWant = Float64Array.from(cpu);
        const tol = gemmTolerance('auto', bDtype, c.k, oracle, resolve(c, 'auto'));
        const tolF32 = gemmTolerance('simt', bDtype, c.k, oracle, 'simt');
        expectWithin(runGemm(gpu(), c, bDtype, 'auto', { a, b, c0, bias }), cpuAsWant, tol.map((t, i) => t + tolF32[i]!), `gemm vs CPU ${JSON.stringify(c)} ${bDtype}`);
      }
    }
  });

  it('picks skinny for m <= 8, simt for small dims, tensor cores otherwise', () => {
    const pick = autoKernel;
    expect(pick(1, 4096, 4096)).toBe('skinny');
    expect(pick(8, 10, 10)).toBe('skinny');
    expect(pick(9, 15, 7)).toBe('simt');
    expect(pick(64, 64, 8)).toBe('simt');
    expect(pick(16, 16, 16)).toBe('tensor');
  });

  it('gemmBatched: per-batch and shared B, bias and beta, and the 128x128 tensor-core tiles', () => {
    const cases: GemmCase[] = [
      { batch: 3, m: 20, n: 24, k: 40, transB: true, bias: true, beta: 0.5 },
      { batch: 4, m: 5, n: 31, k: 17, sharedB: true },
      { batch: 2, m: 70, n: 33, k: 19, transA: true, sharedB: true, transB: true },
      { batch: 0, m: 4, n: 4, k: 4 },
      // 8 x 8 tiles of 128 per entry, 3 entries: enough tiles that auto uses 128x128 tiles on any current GPU.
      { batch: 3, m: 900, n: 900, k: 24, transB: true, bias: true },
    ];
    let seed = 900;
    for (const c of cases) {
      const batch = c.batch!;
      for (const bDtype of ['f32', 'bf16'] as const) {
        const a = randomFloats(batch * c.m * c.k, seed++);
        const { data: b, values: bv } = randomB((c.sharedB ? 1 : batch) * c.k * c.n, seed++, bDtype);
        const c0 = randomFloats(batch * c.m * c.n, seed++);
        const bias = c.bias ? randomFloats(c.n, seed++) : null;
        const oracle = gemmOracle(c, a, bv, c0, bias);
        for (const kernel of ['auto', 'reference', 'simt', 'tensor'] as const) {
          const resolved = kernel === 'auto' ? autoKernel(c.m, c.n, c.k) : kernel;
          const got = runGemm(gpu(), c, bDtype, kernel, { a, b, c0, bias });
          expectWithin(got, oracle.want, gemmTolerance(kernel, bDtype, c.k, oracle, resolved), `gemmBatched ${JSON.stringify(c)} ${bDtype} ${kernel}`);
        }
      }
    }
  });

  it('gemm validates shapes and dtypes natively (a bad direct call throws, the device keeps working)', () => {
    const a = Tensor.zeros([4, 5], 'f32', gpu());
    const b = Tensor.zeros([6, 7], 'f32', gpu());
    const c = Tensor.zeros([4, 7], 'f32', gpu());
    const opts: NativeGemmOptions = { transA: false, transB: false, alpha: 1, beta: 0, bias: null };
    expect(() => callNative(() => gpu().binding.gemm(a.native, b.native, c.native, opts))).toThrow(ShapeMismatchError);
    expect(() => callNative(() => gpu().binding.gemm(a.native, b.native, c.native, opts))).toThrow(/\[4, 5\].*\[6, 7\]/);
    const bi = Tensor.zeros([5, 7], 'i32', gpu());
    expect(() => callNative(() => gpu().binding.gemm(a.native, bi.native, c.native, opts))).toThrow(/f32, f16 or bf16/);
    const skinny = { ...opts, kernel: 'skinny' } as NativeGemmOptions;
    const a9 = Tensor.zeros([9, 5], 'f32', gpu());
    const b5 = Tensor.zeros([5, 7], 'f32', gpu());
    expect(() => callNative(() => gpu().binding.gemm(a9.native, b5.native, Tensor.zeros([9, 7], 'f32', gpu()).native, skinny))).toThrow(InvalidArgumentError);
    callNative(() => gpu().binding.gemm(a.native, b5.native, c.native, opts));
    expect(Array.from(read(c))).toEqual(new Array(28).fill(0));
  });

  // ---------------------------------------------------------------- elementwise

  const sizes = [0, 1, 7, 8, 15, 16, 17, 33, 1000, 40_003];

  it('add, mul and scale are bitwise equal to the CPU (aligned float4 and unaligned scalar paths)', () => {
    for (const n of sizes) {
      const [ac, ag] = f32s(randomFloats(n, n + 1), [n]);
      const [bc, bg] = f32s(randomFloats(n, n + 2), [n]);
      for (const op of ['add', 'mul'] as const) {
        for (const reference of [false, true]) {
          const oc = Tensor.empty([n], 'f32', host());
          const og = Tensor.empty([n], 'f32', gpu());
          host().binding.binary(op, ac.native, bc.native, oc.native, { reference: true });
          gpu().binding.binary(op, ag.native, bg.native, og.native, { reference });
          expectBitwiseEqual(read(og), read(oc), `${op} n=${n} ref=${reference}`);
        }
      }
      const sc = Tensor.empty([n], 'f32', host());
      const sg = Tensor.empty([n], 'f32', gpu());
      host().binding.scale(ac.native, -1.7, sc.native, { reference: true });
      gpu().binding.scale(ag.native, -1.7, sg.native, {});
      expectBitwiseEqual(read(sg), read(sc), `scale n=${n}`);
    }
    for (const [rows, cols] of [[3, 5], [1, 17], [0, 4], [9, 33], [64, 128]] as const) {
      const [ac, ag] = f32s(randomFloats(rows * cols, 3), [rows, cols]);
      const [rc, rg] = f32s(randomFloats(cols, 4), [cols]);
      const oc = Tensor.empty([rows, cols], 'f32', host());
      const og = Tensor.empty([rows, cols], 'f32', gpu());
      host().binding.binary('add', ac.native, rc.native, oc.native, { reference: true });
      gpu().binding.binary('add', ag.native, rg.native, og.native, {});
      expectBitwiseEqual(read(og), read(oc), `broadcast ${rows}x${cols}`);
    }
    // A row view starting one element in is not 16-byte aligned: the scalar path, in place.
    const x = Tensor.from(randomFloats(4 * 9, 5), [4, 9], { backend: gpu() });
    const before = read(x);
    const view = x.rows(1, 3);
    gpu().binding.scale(view.native, 0.5, view.native, {});
    expectBitwiseEqual(read(x), before.map((v, i) => (i >= 9 ? v * 0.5 : v)), 'unaligned in-place scale');
  });

  // CUDA's erff/expf are within 2 ulp; the CPU reference is double rounded once: rtol 2e-6 with atol 1e-6 as in
  // elementwise.test.ts (GELU's absolute error near zero). The GPU reference is also double rounded once, so it
  // differs from the CPU's by at most one f32 ulp (2^-23 relative < 3e-7).
  it('activations and siluMul match the CPU reference (rtol 2e-6, atol 1e-6)', () => {
    for (const n of sizes) {
      const [xc, xg] = f32s(randomFloats(n, 10 + n, -8, 8), [n]);
      const [uc, ug] = f32s(randomFloats(n, 20 + n), [n]);
      for (const act of ['gelu_erf', 'gelu_tanh', 'silu'] as const) {
        const oc = Tensor.empty([n], 'f32', host());
        host().binding.activation(act, xc.native, oc.native, { reference: true });
        for (const reference of [false, true]) {
          const og = Tensor.empty([n], 'f32', gpu());
          gpu().binding.activation(act, xg.native, og.native, { reference });
          expectClose(read(og), read(oc), reference ? 3e-7 : 2e-6, reference ? 1e-12 : 1e-6, `${act} n=${n} ref=${reference}`);
        }
      }
      const oc = Tensor.empty([n], 'f32', host());
      host().binding.siluMul(xc.native, uc.native, oc.native, { reference: true });
      for (const reference of [false, true]) {
        const og = Tensor.empty([n], 'f32', gpu());
        gpu().binding.siluMul(xg.native, ug.native, og.native, { reference });
        expectClose(read(og), read(oc), reference ? 3e-7 : 2e-6, reference ? 1e-12 : 1e-6, `siluMul n=${n} ref=${reference}`);
      }
    }
  });

  // ---------------------------------------------------------------- norms, softmax

  // f32 block reductions over up to 3000 elements against the CPU's double reference: the statistics carry a
  // relative error of a few 1e-7, so rtol 1e-5 with atol 1e-5 (outputs are O(1)); the GPU double references
  // agree to rtol 1e-6.
  it('layerNorm, rmsNorm and softmax match the CPU reference', () => {
    const shapes = [[0, 8], [1, 1], [3, 7], [5, 33], [17, 1000], [4, 3000], [2, 3, 65]];
    let seed = 300;
    for (const shape of shapes) {
      const n = shape.reduce((p, d) => p * d, 1);
      const dim = shape[shape.length - 1]!;
      const [xc, xg] = f32s(randomFloats(n, seed++, -3, 5), shape);
      const [gc, gg] = f32s(randomFloats(dim, seed++, 0.5, 1.5), [dim]);
      const [bc, bg] = f32s(randomFloats(dim, seed++), [dim]);
      for (const withParams of [false, true]) {
        for (const reference of [false, true]) {
          const oc = Tensor.empty(shape, 'f32', host());
          const og = Tensor.empty(shape, 'f32', gpu());
          const rtol = reference ? 1e-6 : 1e-5;
          const atol = reference ? 1e-6 : 1e-5;
          host().binding.layerNorm(xc.native, withParams ? gc.native : null, withParams ? bc.native : null, oc.native, { eps: 1e-5, reference: true });
          gpu().binding.layerNorm(xg.native, withParams ? gg.native : null, withParams ? bg.native : null, og.native, { eps: 1e-5, reference });
          expectClose(read(og), read(oc), rtol, atol, `layerNorm ${shape} params=${withParams} ref=${reference}`);
          host().binding.rmsNorm(xc.native, withParams ? gc.native : null, oc.native, { eps: 1e-6, reference: true });
          gpu().binding.rmsNorm(xg.native, withParams ? gg.native : null, og.native, { eps: 1e-6, reference });
          expectClose(read(og), read(oc), rtol, atol, `rmsNorm ${shape} params=${withParams} ref=${reference}`);
        }
      }
      for (const scale of [1, 0.125, -2]) {
        for (const reference of [false, true]) {
          const oc = Tensor.empty(shape, 'f32', host());
          const og = Tensor.empty(shape, 'f32', gpu());
          host().binding.softmax(xc.native, oc.native, { scale, reference: true });
          gpu().binding.softmax(xg.native, og.native, { scale, reference });
          expectClose(read(og), read(oc), reference ? 1e-6 : 1e-5, 1e-7, `softmax ${shape} scale=${scale} ref=${reference}`);
        }
      }
    }
    // In place: out aliases x.
    const x = Tensor.from(randomFloats(6 * 50, 7), [6, 50], { backend: gpu() });
    const want = Tensor.empty([6, 50], 'f32', gpu());
    gpu().binding.rmsNorm(x.native, null, want.native, { eps: 1e-6 });
    gpu().binding.rmsNorm(x.native, null, x.native, { eps: 1e-6 });
    expectBitwiseEqual(read(x), read(want), 'in-place rmsNorm');
  });

  // ---------------------------------------------------------------- gathers, conversion (exact: bitwise)

  it('embedding, gatherRows and scatterRows are bitwise equal to the CPU; bad indices throw', () => {
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      for (const [vocab, dim, n] of [[50, 17, 9], [7, 64, 0], [300, 256, 33]] as const) {
        const table = dtype === 'f32' ? randomFloats(vocab * dim, vocab) : randomB(vocab * dim, vocab, dtype).data;
        const [tc, tg] = both(table, [vocab, dim], dtype);
        const [ic, ig] = i32s(randomInts(n, dim, 0, vocab), [n]);
        const oc = Tensor.empty([n, dim], 'f32', host());
        host().binding.embedding(tc.native, ic.native, oc.native, { reference: true });
        for (const reference of [false, true]) {
          const og = Tensor.empty([n, dim], 'f32', gpu());
          gpu().binding.embedding(tg.native, ig.native, og.native, { reference });
          expectBitwiseEqual(read(og), read(oc), `embedding ${dtype} ${vocab}x${dim} n=${n} ref=${reference}`);
        }
      }
    }
    // Rows of 3 f32 (4-byte words), 5 u8 (bytes) and 8 bf16 (16-byte words).
    for (const [dtype, rowShape] of [['f32', [3]], ['u8', [5]], ['bf16', [2, 4]]] as const) {
      const rows = 40;
      const per = rowShape.reduce((p, d) => p * d, 1);
      const src = dtype === 'u8' ? Uint8Array.from(randomInts(rows * per, 1, 0, 256)) : dtype === 'bf16' ? randomB(rows * per, 2, 'bf16').data : randomFloats(rows * per, 3);
      const [sc, sg] = both(src, [rows, ...rowShape], dtype);
      const idx = randomInts(25, 4, 0, rows);
      const [ic, ig] = i32s(idx, [25]);
      const gc = Tensor.empty([25, ...rowShape], dtype, host());
      const gg = Tensor.empty([25, ...rowShape], dtype, gpu());
      host().binding.gatherRows(sc.native, ic.native, gc.native);
      gpu().binding.gatherRows(sg.native, ig.native, gg.native);
      expect(bytesOf(gg), `gatherRows ${dtype}`).toEqual(bytesOf(gc));
      // scatter into a fresh destination: unique indices against the CPU, bit for bit
      const zeros = (): HostData => (dtype === 'u8' ? new Uint8Array(rows * per) : dtype === 'bf16' ? new Uint16Array(rows * per) : new Float32Array(rows * per));
      const perm = randomInts(rows, 5, 0, 1 << 30);
      const unique = Int32Array.from(Array.from({ length: rows }, (_, i) => i).sort((x, y) => perm[x]! - perm[y]!).slice(0, 25));
      const [uc, ug] = i32s(unique, [25]);
      const [dc, dg] = both(zeros(), [rows, ...rowShape], dtype);
      const [vc, vg] = both(gc.toArray() as HostData, [25, ...rowShape], dtype);
      host().binding.scatterRows(vc.native, uc.native, dc.native);
      gpu().binding.scatterRows(vg.native, ug.native, dg.native);
      expect(bytesOf(dg), `scatterRows ${dtype}`).toEqual(bytesOf(dc));
      // repeated destinations (idx has repeats): the last source row wins, as a sequential loop would leave it
      const [, dup] = both(zeros(), [rows, ...rowShape], dtype);
      gpu().binding.scatterRows(vg.native, ig.native, dup.native);
      const rowBytes = per * (dtype === 'u8' ? 1 : dtype === 'bf16' ? 2 : 4);
      const srcBytes = bytesOf(vg);
      const want = new Array<number>(rows * rowBytes).fill(0);
      idx.forEach((d, i) => want.splice(d * rowBytes, rowBytes, ...srcBytes.slice(i * rowBytes, (i + 1) * rowBytes)));
      expect(bytesOf(dup), `scatterRows with repeats ${dtype}`).toEqual(want);
      expect(new Set(idx).size).toBeLessThan(idx.length);  // the case really has repeats
    }
    const [, tg] = f32s(randomFloats(20, 1), [5, 4]);
    const [, bad] = i32s(Int32Array.from([0, 5]), [2]);
    expect(() => callNative(() => gpu().binding.embedding(tg.native, bad.native, Tensor.empty([2, 4], 'f32', gpu()).native, {}))).toThrow(InvalidArgumentError);
    expect(() => callNative(() => gpu().binding.gatherRows(tg.native, bad.native, Tensor.empty([2, 4], 'f32', gpu()).native))).toThrow(/idx\[1\] = 5/);
    // the device is still healthy after the rejected calls
    expect(Array.from(read(tg))).toEqual(Array.from(randomFloats(20, 1)));
  });

  it('convert is bitwise equal to the CPU for every f32/f16/bf16 pair, specials included', () => {
    const specials = [0, -0, 1, -1, 65504, 65520, 1e6, -1e6, 6.1e-5, 6e-8, 1e-10, 3.0e-39, Infinity, -Infinity, NaN, 0.1, 1 / 3];
    const values = Float32Array.from([...specials, ...randomFloats(997, 8, -70000, 70000), ...randomFloats(500, 9, -1e-4, 1e-4)]);
    const n = values.length;
    const fc = Tensor.from(values, [n], { backend: host() });
    for (const to of ['f16', 'bf16', 'f32'] as const) {
      for (const from of ['f32', 'f16', 'bf16'] as const) {
        // Make the source on the CPU (f32 -> from), then copy it to the GPU bit for bit.
        const srcC = Tensor.empty([n], from, host());
        host().binding.convert(fc.native, srcC.native, {});
        const srcG = moveTo(srcC, gpu());
        const oc = Tensor.empty([n], to, host());
        host().binding.convert(srcC.native, oc.native, { reference: true });
        for (const reference of [false, true]) {
          const og = Tensor.empty([n], to, gpu());
          gpu().binding.convert(srcG.native, og.native, { reference });
          expect(bytesOf(og), `convert ${from} -> ${to} ref=${reference}`).toEqual(bytesOf(oc));
        }
      }
    }
  });

  // ---------------------------------------------------------------- RoPE, attention

  // RoPE angles below 512 rad: a CPU kernel that forms the angle in f32 is off by up to 512 * 2^-24 rad, so
  // rtol/atol 1e-4 against the CPU; the GPU's fast and reference kernels do the same double arithmetic (1e-6).
  it('rope matches the CPU reference', () => {
    for (const [tokens, heads, headDim, rotDim] of [[5, 3, 8, 8], [17, 4, 64, 32], [1, 1, 2, 2], [0, 2, 16, 16], [9, 2, 80, 80]] as const) {
      const data = randomFloats(tokens * heads * headDim, tokens + headDim);
      const pos = randomInts(tokens, 7, 0, 512);
      const [xc, xg] = f32s(data, [tokens, heads, headDim]);
      const [pc, pg] = i32s(pos, [tokens]);
      host().binding.rope(xc.native, pc.native, { rotDim, base: 10000, reference: true });
      gpu().binding.rope(xg.native, pg.native, { rotDim, base: 10000 });
      expectClose(read(xg), read(xc), 1e-4, 1e-4, `rope ${tokens}x${heads}x${headDim} rot ${rotDim}`);
      const xr = Tensor.from(data, [tokens, heads, headDim], { backend: gpu() });
      gpu().binding.rope(xr.native, pg.native, { rotDim, base: 10000, reference: true });
      expectClose(read(xg), read(xr), 1e-6, 1e-6, `rope fast vs reference ${tokens}x${heads}x${headDim}`);
    }
  });

  // f32 online softmax (expf, FMA dot products over <= 300 dims) against double references: rtol 1e-5, atol 1e-6.
  it('attentionDecode over the paged cache matches the CPU reference (GQA, odd lengths, empty context, big heads)', () => {
    let seed = 500;
    for (const headDim of [16, 64, 80, 128, 256, 300]) {
      const batch = 5, nHeads = 8, nKv = 2, numPages = 24, maxPages = 4;
      const lens = Int32Array.from([0, 1, 16, 17, 61]);
      // Each sequence gets distinct pages in a shuffled order.
      const perm = randomInts(numPages, seed++, 0, 1 << 30);
      const order = Array.from({ length: numPages }, (_, i) => i).sort((x, y) => perm[x]! - perm[y]!);
      const table = Int32Array.from({ length: batch * maxPages }, (_, i) => order[i % numPages]!);
      const cacheShape = [numPages, 16, nKv, headDim];
      const cacheN = numPages * 16 * nKv * headDim;
      const [qc, qg] = f32s(randomFloats(batch * nHeads * headDim, seed++), [batch, nHeads, headDim]);
      const [kc, kg] = f32s(randomFloats(cacheN, seed++), cacheShape);
      const [vc, vg] = f32s(randomFloats(cacheN, seed++), cacheShape);
      const [tc, tg] = i32s(table, [batch, maxPages]);
      const [lc, lg] = i32s(lens, [batch]);
      const scale = 1 / Math.sqrt(headDim);
      const oc = Tensor.empty([batch, nHeads, headDim], 'f32', host());
      host().binding.attentionDecode(qc.native, kc.native, vc.native, tc.native, lc.native, oc.native, { scale, reference: true });
      for (const reference of [false, true]) {
        const og = Tensor.empty([batch, nHeads, headDim], 'f32', gpu());
        gpu().binding.attentionDecode(qg.native, kg.native, vg.native, tg.native, lg.native, og.native, { scale, reference });
        expectClose(read(og), read(oc), reference ? 1e-6 : 1e-5, 1e-6, `decode d=${headDim} ref=${reference}`);
        expect(Array.from(read(og).subarray(0, nHeads * headDim)).every((v) => v === 0), 'context 0 writes zeros').toBe(true);
      }
    }
    // A context longer than the block table, or a page id outside the cache, throws before any launch.
    const q = Tensor.zeros([1, 2, 16], 'f32', gpu());
    const cache = Tensor.zeros([2, 16, 1, 16], 'f32', gpu());
    const out = Tensor.empty([1, 2, 16], 'f32', gpu());
    const table = Tensor.from(Int32Array.from([0, 7]), [1, 2], { backend: gpu() });
    const tooLong = Tensor.from(Int32Array.from([33]), [1], { backend: gpu() });
    const secondPage = Tensor.from(Int32Array.from([20]), [1], { backend: gpu() });
    expect(() => callNative(() => gpu().binding.attentionDecode(q.native, cache.native, cache.native, table.native, tooLong.native, out.native, { scale: 1 }))).toThrow(InvalidArgumentError);
    expect(() => callNative(() => gpu().binding.attentionDecode(q.native, cache.native, cache.native, table.native, secondPage.native, out.native, { scale: 1 }))).toThrow(/blockTable\[0, 1\] = 7/);
  });

  it('attentionPrefill matches the CPU reference (causal, padding mask, a fully masked sequence)', () => {
    let seed = 700;
    for (const [batch, seq, nHeads, nKv, headDim] of [[2, 19, 4, 2, 40], [1, 33, 2, 2, 64], [3, 5, 6, 3, 8], [1, 0, 2, 1, 8]] as const) {
      const qShape = [batch, seq, nHeads, headDim];
      const kShape = [batch, seq, nKv, headDim];
      const [qc, qg] = f32s(randomFloats(batch * seq * nHeads * headDim, seed++), qShape);
      const [kc, kg] = f32s(randomFloats(batch * seq * nKv * headDim, seed++), kShape);
      const [vc, vg] = f32s(randomFloats(batch * seq * nKv * headDim, seed++), kShape);
      const mask = Uint8Array.from(randomInts(batch * seq, seed++, 0, 4).map((x) => (x === 0 ? 0 : 1)));
      if (batch > 1) mask.fill(0, seq, 2 * seq);  // the second sequence is all padding: its rows are zeros
      const [mc, mg] = both(mask, [batch, seq], 'u8');
      for (const causal of [false, true]) {
        for (const withMask of [false, true]) {
          const opts = { causal, scale: 1 / Math.sqrt(headDim || 1) };
          const oc = Tensor.empty(qShape, 'f32', host());
          host().binding.attentionPrefill(qc.native, kc.native, vc.native, oc.native, { ...opts, keyMask: withMask ? mc.native : null, reference: true });
          for (const reference of [false, true]) {
            const og = Tensor.empty(qShape, 'f32', gpu());
            gpu().binding.attentionPrefill(qg.native, kg.native, vg.native, og.native, { ...opts, keyMask: withMask ? mg.native : null, reference });
            expectClose(read(og), read(oc), reference ? 1e-6 : 1e-5, 1e-6, `prefill ${qShape} causal=${causal} mask=${withMask} ref=${reference}`);
          }
        }
      }
    }
  });
  // ---------------------------------------------------------------- SGMV / BGMV

  // Normwise relative error ||got - want|| / ||want|| against the CPU reference (double accumulation, rounded once):
  // 1e-5, as sgmv.test.ts allows every CPU path against float64.
  function expectNormwise(got: Float32Array, want: Float32Array, label: string): void {
    expect(got.length, `${label} length`).toBe(want.length);
    let num = 0, den = 0;
    for (let i = 0; i < want.length; i++) {
      num += (got[i]! - want[i]!) ** 2;
      den += want[i]! ** 2;
    }
    const err = Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
    if (!(err <= 1e-5)) expect.fail(`${label}: normwise relative error ${err} > 1e-5`);
  }

  it('sgmv / bgmv shrink and expand match the CPU reference; repeated calls are bitwise equal; BGMV == SGMV on sorted rows', () => {
    const L = 2;
    let seed = 1500;
    // (rows, hIn, hOut, segment lengths): decode-size distinct, skewed, prefill-size, empty segments, several K-chunks.
    const cases: [number, number, number, number[]][] = [
      [8, 4096, 4096, [1, 1, 1, 1, 1, 1, 1, 1]],
      [40, 300, 520, [1, 0, 39]],
      [133, 96, 130, [70, 0, 0, 63]],
      [5, 1000, 33, [0, 2, 3, 0]],
      [0, 64, 64, []],
    ];
    for (const [rows, hIn, hOut, lengths] of cases) {
      const ranks = lengths.map((_, i) => [16, 8, 64, 32][i % 4]!);
      const rMax = Math.max(1, ...ranks);
      const aData = ranks.map((r) => randomFloats(L * r * hIn, seed++));
      const bData = ranks.map((r) => randomFloats(L * r * hOut, seed++));
      const A = ranks.map((r, i) => f32s(aData[i]!, [L, r, hIn]));
      const B = ranks.map((r, i) => f32s(bData[i]!, [L, r, hOut]));
      const weightsFor = (w: [Tensor, Tensor][], side: 0 | 1): (Tensor | null)[] => w.map((p, i) => (i === 1 ? null : p[side]));  // segment 1: no weight
      const indptr = [0];
      for (const n of lengths) indptr.push(indptr[indptr.length - 1]! + n);
      const [pc, pg] = i32s(Int32Array.from(indptr), [indptr.length]);
      const xData = randomFloats(rows * hIn, seed++);
      const vData = randomFloats(rows * rMax, seed++);
      const ysData = randomFloats(rows * rMax, seed++);
      const yeData = randomFloats(rows * hOut, seed++);
      const scales = lengths.map((_, i) => 0.5 + i);
      const label = `rows=${rows} hIn=${hIn} hOut=${hOut} segments=${lengths.join(',')}`;
      // CPU reference
      const [ysc] = f32s(ysData, [rows, rMax]);
      sgmvShrink(ysc, f32s(xData, [rows, hIn])[0], weightsFor(A, 0), pc, 1, { reference: true });
      const [yec] = f32s(yeData, [rows, hOut]);
      sgmvExpand(yec, f32s(vData, [rows, rMax])[0], weightsFor(B, 0), pc, 1, { reference: true, scales });
      const xg = f32s(xData, [rows, hIn])[1];
      const vg = f32s(vData, [rows, rMax])[1];
      const runGpu = (reference: boolean): [Float32Array, Float32Array] => {
        const ys = Tensor.from(ysData, [rows, rMax], { backend: gpu() });
        sgmvShrink(ys, xg, weightsFor(A, 1), pg, 1, { reference });
        const ye = Tensor.from(yeData, [rows, hOut], { backend: gpu() });
        sgmvExpand(ye, vg, weightsFor(B, 1), pg, 1, { reference, scales });
        return [read(ys), read(ye)];
      };
      for (const reference of [false, true]) {
        const [s1, e1] = runGpu(reference);
        expectNormwise(s1, read(ysc), `${label} shrink ref=${reference}`);
        expectNormwise(e1, read(yec), `${label} expand ref=${reference}`);
        const [s2, e2] = runGpu(reference);
        expectBitwiseEqual(s1, s2, `${label} shrink repeat ref=${reference}`);
        expectBitwiseEqual(e1, e2, `${label} expand repeat ref=${reference}`);
      }
      // BGMV over the same rows in a shuffled order, then un-shuffled: bitwise equal to SGMV on the GPU.
      const segOf = new Int32Array(rows);
      lengths.forEach((n, s) => segOf.fill(s === 1 ? -1 : s, indptr[s]!, indptr[s]! + n));
      const perm = Array.from({ length: rows }, (_, i) => i).sort((p, q) => ((p * 7919) % 13) - ((q * 7919) % 13) || p - q);
      const shuffle = (data: Float32Array, width: number): Float32Array => {
        const out = new Float32Array(data.length);
        perm.forEach((src, dst) => out.set(data.subarray(src * width, (src + 1) * width), dst * width));
        return out;
      };
      const unshuffle = (data: Float32Array, width: number): Float32Array => {
        const out = new Float32Array(data.length);
        perm.forEach((src, dst) => out.set(data.subarray(dst * width, (dst + 1) * width), src * width));
        return out;
      };
      const rowIndex = Int32Array.from(perm, (src) => segOf[src]!);
      const [, rg] = i32s(rowIndex, [rows]);
      const ysb = Tensor.from(shuffle(ysData, rMax), [rows, rMax], { backend: gpu() });
      bgmvShrink(ysb, f32s(shuffle(xData, hIn), [rows, hIn])[1], weightsFor(A, 1), rg, 1);
      const yeb = Tensor.from(shuffle(yeData, hOut), [rows, hOut], { backend: gpu() });
      bgmvExpand(yeb, f32s(shuffle(vData, rMax), [rows, rMax])[1], weightsFor(B, 1), rg, 1, { scales });
      const [s1, e1] = runGpu(false);
      expectBitwiseEqual(unshuffle(read(ysb), rMax), s1, `${label} bgmv shrink == sgmv`);
      expectBitwiseEqual(unshuffle(read(yeb), hOut), e1, `${label} bgmv expand == sgmv`);
    }
    // Bad indices throw before any launch, and the device keeps working.
    const y = Tensor.zeros([2, 4], 'f32', gpu());
    const x = Tensor.zeros([2, 8], 'f32', gpu());
    const w = Tensor.zeros([1, 4, 8], 'f32', gpu());
    const badIndptr = Tensor.from(Int32Array.from([0, 3]), [2], { backend: gpu() });
    const badRows = Tensor.from(Int32Array.from([0, 1]), [2], { backend: gpu() });
    expect(() => callNative(() => gpu().binding.sgmvShrink(y.native, x.native, [w.native], badIndptr.native, { layer: 0 }))).toThrow(/indptr\[1\] = 3 must equal the 2 rows/);
    expect(() => callNative(() => gpu().binding.bgmvShrink(y.native, x.native, [w.native], badRows.native, { layer: 0 }))).toThrow(InvalidArgumentError);
    expect(Array.from(read(y))).toEqual(new Array(8).fill(0));
  });
});

import { describe, expect, it } from 'vitest';
import {
  deviceInfo,
  DTypeMismatchError,
  gemm,
  gemmBatched,
  InvalidArgumentError,
  linear,
  UnsupportedOpError,
  type Bf16Kernel,
  ShapeMismatchError,
  Tensor,
  type DType,
  fromHalfBits,
  type HalfDtype,
  toHalfBits,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, rng, tensorF32, withThreads } from './helpers.js';

// Tolerance. The kernels accumulate in f32 with FMA (k reduced in blocks of up to 512), the reference in double.
// Recursive f32 summation of k products is off by at most gamma_k = k * 2^-24 (to first order) times
// S = |alpha| * sum_k |op(A)_ik| |op(B)_kj|; scaling by alpha, adding beta * C, bias and per-block partial
// sums adds a few roundings more, each bounded by 2^-24 * S' with S' = S + |beta * C| + |bias|. So every
// element must satisfy |got - want| <= max(1e-5, (k + 4) * 2^-24) * S'  (1e-5 covers k up to ~160).
function tolerance(k: number): number {
  return Math.max(1e-5, (k + 4) * 2 ** -24);
}

interface Problem {
  m: number;
  n: number;
  k: number;
  transA: boolean;
  transB: boolean;
}

function label(p: Problem, extra = ''): string {
  return `m=${p.m} n=${p.n} k=${p.k}${p.transA ? ' transA' : ''}${p.transB ? ' transB' : ''}${extra}`;
}

const aShape = (p: Problem): number[] => (p.transA ? [p.k, p.m] : [p.m, p.k]);
const bShape = (p: Problem): number[] => (p.transB ? [p.n, p.k] : [p.k, p.n]);

/** S' of the tolerance comment, per element of C (a and b are the values the kernel sees). */
function errorScale(
  p: Problem,
  a: Float32Array,
  b: Float32Array,
  alpha: number,
  beta: number,
  c0?: Float32Array,
  bias?: Float32Array,
): Float64Array {
  const s = new Float64Array(p.m * p.n);
  for (let i = 0; i < p.m; i++) {
    for (let j = 0; j < p.n; j++) {
      let acc = 0;
      for (let q = 0; q < p.k; q++) {
        const av = p.transA ? a[q * p.m + i]! : a[i * p.k + q]!;
        const bv = p.transB ? b[j * p.k + q]! : b[q * p.n + j]!;
        acc += Math.abs(av * bv);
      }
      let v = Math.abs(alpha) * acc;
      if (beta !== 0 && c0) v += Math.abs(beta * c0[i * p.n + j]!);
      if (bias) v += Math.abs(bias[j]!);
      s[i * p.n + j] = v;
    }
  }
  return s;
}

function expectWithin(got: Float32Array, want: Float32Array, scale: Float64Array, k: number, what: string): void {
  expect(got.length, `${what} length`).toBe(want.length);
  const tol = tolerance(k);
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i]! - want[i]!);
    if (!(err <= tol * scale[i]!)) {
      expect.fail(`${what}: element ${i} is ${got[i]}, reference ${want[i]} (|err| ${err} > ${tol} * ${scale[i]})`);
    }
  }
}

/** Weight data in the requested dtype, plus the f32 values it stands for. */
function weight(data: Float32Array, shape: number[], dtype: DType): { t: Tensor; values: Float32Array } {
  if (dtype === 'f32') return { t: tensorF32(data, shape), values: data };
  const bits = toHalfBits(data, dtype as HalfDtype);
  return { t: Tensor.from(bits, shape, { dtype, backend: cpu() }), values: fromHalfBits(bits, dtype as HalfDtype) };
}

const zeros = (shape: number[], dtype: DType = 'f32'): Tensor => Tensor.zeros(shape, dtype, cpu());

const dims = [0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 65, 130];

/** Seeded mixes of the sizes above, plus the edge cases every run must include. */
function shapeMixes(count: number, seed: number): [number, number, number][] {
  const r = rng(seed);
  const pick = (): number => dims[Math.floor(r() * dims.length)]!;
  const out: [number, number, number][] = [
    [0, 5, 7], [5, 0, 7], [4, 6, 0], [1, 130, 65], [130, 1, 33], [65, 130, 130], [8, 17, 31], [17, 16, 15], [9, 33, 17],
  ];
  while (out.length < count) {
    const m = pick(), n = pick(), k = pick();
    if (m * n * k <= 300_000) out.push([m, n, k]);
  }
  return out;
}

interface RunSpec {
  alpha: number;
  beta: number;
  withBias: boolean;
  dtype: DType;
  /** 'bf16': both operands rounded to bf16 (the reference rounds the same way; S' is over the rounded values). */
  compute?: 'f32' | 'bf16';
  /** With compute 'bf16': the kernel to run (default auto). */
  bf16Kernel?: Bf16Kernel;
}

const bf16Rounded = (x: Float32Array): Float32Array => fromHalfBits(toHalfBits(x, 'bf16'), 'bf16');

const variants: RunSpec[] = [
  { alpha: 1, beta: 0, withBias: false, dtype: 'f32' },
  { alpha: 1, beta: 0, withBias: true, dtype: 'f32' },
  { alpha: -0.75, beta: 0.5, withBias: true, dtype: 'f32' },
  { alpha: 2, beta: -1, withBias: false, dtype: 'f32' },
];

/** Runs every ISA's gemm against the reference for one problem and one variant. */
function checkProblem(p: Problem, spec: RunSpec, seed: number): void {
  const aData = randomFloats(p.m * p.k, seed);
  const a = tensorF32(aData, aShape(p));
  const w = weight(randomFloats(p.n * p.k, seed + 1), bShape(p), spec.dtype);
  const biasData = spec.withBias ? randomFloats(p.n, seed + 2) : undefined;
  const bias = biasData ? tensorF32(biasData, [p.n]) : undefined;
  const c0 = randomFloats(p.m * p.n, seed + 3, -2, 2);
  const compute = spec.compute ?? 'f32';
  const opts = {
    transA: p.transA,
    transB: p.transB,
    alpha: spec.alpha,
    beta: spec.beta,
    compute,
    ...(bias ? { bias } : {}),
    ...(spec.bf16Kernel ? { bf16Kernel: spec.bf16Kernel } : {}),
  };
  const run = (reference: boolean): Float32Array => {
    const out = tensorF32(c0, [p.m, p.n]);
    gemm(a, w.t, { ...opts, out, reference });
    const result = f32(out);
    out.dispose();
    return result;
  };
  const want = run(true);
  const seen = (x: Float32Array) => (compute === 'bf16' ? bf16Rounded(x) : x);
  const scale = errorScale(p, seen(aData), seen(w.values), spec.alpha, spec.beta, c0, biasData);
  forEachIsa((isa) => {
    const what = label(p, ` ${spec.dtype}${compute === 'bf16' ? ` compute bf16 ${spec.bf16Kernel ?? 'auto'}` : ''} alpha=${spec.alpha} beta=${spec.beta}${bias ? ' bias' : ''}`);
    expectWithin(run(false), want, scale, p.k, `${isa} ${what}`);
  });
  a.dispose();
  w.t.dispose();
  bias?.dispose();
}

const transposes: [boolean, boolean][] = [[false, false], [false, true], [true, false], [true, true]];

describe('gemm against the double-precision reference', () => {
  it('f32 on every ISA: random shapes, all transpose combinations, alpha/beta/bias variants', () => {
    shapeMixes(40, 11).forEach(([m, n, k], i) => {
      for (const [transA, transB] of transposes) {
        checkProblem({ m, n, k, transA, transB }, variants[(i + (transA ? 1 : 0) + (transB ? 2 : 0)) % variants.length]!, 100 + i);
      }
    });
  });

  it('f16 and bf16 weights match the reference run on the same rounded weights', () => {
    shapeMixes(18, 12).forEach(([m, n, k], i) => {
      for (const dtype of ['f16', 'bf16'] as const) {
        for (const transB of [true, false]) {
          checkProblem({ m, n, k, transA: i % 3 === 0, transB }, { ...variants[i % variants.length]!, dtype }, 300 + i);
        }
      }
    });
  });

  it('transA with B as stored and n >= 64 (op(A) transposed into rows first): ragged, wide, one row', () => {
    // The backward's dW += dyᵀ x takes this path; below 64 columns op(A) is gathered tile by tile instead.
    const cases: [number, number, number][] = [[45, 300, 1030], [1, 64, 7], [7, 63, 33], [130, 64, 2], [600, 96, 40]];
    cases.forEach(([m, n, k], i) => {
      for (const dtype of ['f32', 'bf16'] as const) {
        checkProblem({ m, n, k, transA: true, transB: false }, { ...variants[i % variants.length]!, dtype }, 1600 + i);
      }
    });
  });

  it('transB f32 with m >= 128 (op(A) packed over the pool): ragged n, long k, transA too', () => {
    const cases: [number, number, number, boolean][] = [[128, 77, 130, false], [300, 16, 600, false], [257, 200, 33, true], [129, 1, 5, false], [640, 70, 555, false]];
    cases.forEach(([m, n, k, transA], i) => checkProblem({ m, n, k, transA, transB: true }, { ...variants[i % variants.length]!, withBias: true }, 1700 + i));
  });

  it('several k blocks: the first block applies beta and bias, later ones accumulate', () => {
    // Plans with C stored as is reduce k in blocks of about 512; plans that store C transposed (transB) use
    // blocks of up to 4096, hence the long k.
    for (const [transA, transB] of transposes) {
      for (const dtype of ['f32', 'bf16'] as const) {
        checkProblem({ m: 37, n: 70, k: 555, transA, transB }, { alpha: 0.5, beta: 1.5, withBias: true, dtype }, 500);
      }
    }
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      checkProblem({ m: 9, n: 21, k: 4500, transA: false, transB: true }, { alpha: -1, beta: 0.25, withBias: true, dtype }, 510);
    }
  });

  it('decode shapes (m <= 8, transB) with long rows and every row count', () => {
    for (let m = 1; m <= 8; m++) {
      for (const dtype of ['f32', 'f16', 'bf16'] as const) {
        const spec: RunSpec = { alpha: 1, beta: 0, withBias: m % 3 === 0, dtype };
        checkProblem({ m, n: 45, k: 777, transA: m % 2 === 0, transB: true }, spec, 600 + m);
      }
    }
  });

  it('row counts just past a multiple of 16 with transB (the extra rows are computed as dot products)', () => {
    [17, 20, 24, 25, 40, 56].forEach((m, i) => {
      for (const dtype of ['f32', 'f16', 'bf16'] as const) {
        const spec: RunSpec = { alpha: 0.5, beta: i % 3 === 0 ? 0 : -2, withBias: true, dtype };
        checkProblem({ m, n: 19, k: 70, transA: i % 2 === 1, transB: true }, spec, 700 + i);
      }
    });
  });

  it('the reference itself agrees with a direct double computation on decoded f16/bf16 weights', () => {
    const p: Problem = { m: 3, n: 5, k: 9, transA: false, transB: true };
    const aData = randomFloats(p.m * p.k, 41);
    for (const dtype of ['f16', 'bf16'] as const) {
      const w = weight(randomFloats(p.n * p.k, 42, -3, 3), bShape(p), dtype);
      const got = f32(gemm(tensorF32(aData, aShape(p)), w.t, { transB: true, reference: true }));
      for (let i = 0; i < p.m; i++) {
        for (let j = 0; j < p.n; j++) {
          let s = 0;
          for (let q = 0; q < p.k; q++) s += aData[i * p.k + q]! * w.values[j * p.k + q]!;
          expect(got[i * p.n + j]).toBe(Math.fround(s));
        }
      }
    }
  });

  it('k = 0 gives C = beta * C + bias; m = 0 and n = 0 give empty results', () => {
    forEachIsa(() => {
      const bias = tensorF32(Float32Array.from([1, -2, 3]), [3]);
      const c = tensorF32(Float32Array.from([10, 20, 30, 40, 50, 60]), [2, 3]);
      gemm(zeros([2, 0]), zeros([0, 3]), { beta: 0.5, bias, out: c });
      expect(Array.from(f32(c))).toEqual([6, 8, 18, 21, 23, 33]);
      expect(Array.from(f32(gemm(zeros([2, 0]), zeros([3, 0]), { transB: true })))).toEqual([0, 0, 0, 0, 0, 0]);
      expect(gemm(zeros([0, 4]), zeros([4, 3])).shape).toEqual([0, 3]);
      expect(gemm(zeros([2, 4]), zeros([0, 4]), { transB: true }).shape).toEqual([2, 0]);
    });
  });

  it('beta = 0 never reads C (NaN there stays out of the result); beta != 0 does', () => {
    forEachIsa((isa) => {
      for (const [m, transB] of [[3, true], [20, true], [20, false]] as const) {
        const a = tensorF32(randomFloats(m * 24, 7), [m, 24]);
        const b = tensorF32(randomFloats(24 * 19, 8), transB ? [19, 24] : [24, 19]);
        const nanC = tensorF32(new Float32Array(m * 19).fill(Number.NaN), [m, 19]);
        gemm(a, b, { transB, out: nanC });
        const clean = f32(gemm(a, b, { transB }));
        expectBitwiseEqual(f32(nanC), clean, `${isa} m=${m} beta=0 with NaN C`);
        const ones = tensorF32(new Float32Array(m * 19).fill(1), [m, 19]);
        gemm(a, b, { transB, beta: 2, out: ones });
        const got = f32(ones);
        for (let i = 0; i < got.length; i++) expect(Math.abs(got[i]! - (clean[i]! + 2))).toBeLessThan(1e-5);
      }
    });
  });

  it('splits big prepacked operands into chunks (op(A) of more than 8M floats)', () => {
    const p: Problem = { m: 1100, n: 3, k: 8192, transA: false, transB: true };
    const aData = randomFloats(p.m * p.k, 71);
    const a = tensorF32(aData, aShape(p));
    const wData = randomFloats(p.n * p.k, 72);
    const w = tensorF32(wData, bShape(p));
    const want = f32(gemm(a, w, { transB: true, reference: true }));
    const got = f32(gemm(a, w, { transB: true }));
    expectWithin(got, want, errorScale(p, aData, wData, 1, 0), p.k, label(p));
    a.dispose();
    w.dispose();
  });
});

describe('decode path (transB, m <= 32)', () => {
  const decodeRows = [0, 1, 2, 3, 7, 8, 9, 16, 31, 32];
  // Ragged n (not a multiple of any register block's weight rows, nor of the 24-row weight tiles; one case
  // spans several tasks) and ragged k (vector tails of every ISA).
  const nk: [number, number][] = [[1, 1], [5, 37], [29, 130], [50, 9], [97, 203], [1601, 47]];

  it('matches the reference for every row count, ragged n and k, f32/f16/bf16 weights, on every ISA', () => {
    decodeRows.forEach((m, mi) => {
      nk.forEach(([n, k], ni) => {
        for (const dtype of ['f32', 'f16', 'bf16'] as const) {
          const i = mi * nk.length + ni;
          const spec: RunSpec = { ...variants[i % variants.length]!, dtype };
          checkProblem({ m, n, k, transA: i % 5 === 0, transB: true }, spec, 1400 + i);
        }
      });
    });
  });

  // Each output of the decode path is one dot product whose summation order depends on k only, not on how many
  // rows share the call, which register block or weight tile it falls in, or the thread count. AVX2 and AVX-512
  // take their packed tiles from 9 rows up (a different order), so there the promise holds up to 8 rows.
  const invariantRows = (isa: string): number => (isa === 'scalar' ? 32 : 8);

  it("gives a row the same bits whatever its batch mates (up to 8 rows; scalar: 32), on every ISA", () => {
    for (const dtype of ['f32', 'f16', 'bf16'] as const) {
      const [n, k] = [61, 203];
      const aData = randomFloats(32 * k, 1500);
      const w = weight(randomFloats(n * k, 1501), [n, k], dtype);
      const bias = tensorF32(randomFloats(n, 1502), [n]);
      forEachIsa((isa) => {
        const alone: Float32Array[] = [];
        for (let r = 0; r < 32; r++) {
          const a = tensorF32(aData.subarray(r * k, (r + 1) * k), [1, k]);
          alone.push(f32(gemm(a, w.t, { transB: true, bias })));
          a.dispose();
        }
        for (const m of decodeRows) {
          if (m === 0 || m > invariantRows(isa)) continue;
          const a = tensorF32(aData.subarray(0, m * k), [m, k]);
          const got = withThreads(m % 2 === 0 ? 1 : 2, () => f32(gemm(a, w.t, { transB: true, bias })));
          for (let r = 0; r < m; r++) expectBitwiseEqual(got.subarray(r * n, (r + 1) * n), alone[r]!, `${isa} ${dtype} m=${m} row ${r}`);
          a.dispose();
        }
      });
      w.t.dispose();
      bias.dispose();
    }
  });
});

describe('packed path (transB, m > 8 on the SIMD ISAs)', () => {
  // Every row of op(A) runs in vector lanes, ragged last vector included, and k is blocked by k alone: an output
  // is the same FMA chain whatever m is, so a row's result does not depend on its batch mates above 8 rows either.
  it('gives a row the same bits whatever its batch mates, for every m from 9 up, on every ISA', () => {
    const [n, k, rows] = [53, 301, 72];
    const aData = randomFloats(rows * k, 1800);
    for (const dtype of ['f32', 'bf16'] as const) {
      const w = weight(randomFloats(n * k, 1801), [n, k], dtype);
      forEachIsa((isa) => {
        if (isa === 'scalar') return; // its decode path takes up to 32 rows
        const run = (start: number, m: number): Float32Array => {
          const a = tensorF32(aData.subarray(start * k, (start + m) * k), [m, k]);
          const out = f32(gemm(a, w.t, { transB: true }));
          a.dispose();
          return out;
        };
        const full = run(0, rows);
        for (const m of [9, 15, 16, 17, 24, 33, 47, 48, 49, 63]) {
          const start = (m * 5) % (rows - m + 1);
          expectBitwiseEqual(run(start, m), full.subarray(start * n, (start + m) * n), `${isa} ${dtype} rows ${start}..${start + m}`);
        }
      });
      w.t.dispose();
    }
  });
});

describe("compute 'bf16'", () => {
  // Both operands are rounded to bf16 (round to nearest even), so every product is exact in f32 and the kernels
  // differ from the reference (the same rounding, then double sums) only in f32 summation: checkProblem's f32
  // tolerance, with S' taken over the rounded values.
  const rounded = bf16Rounded;
  const hasBf16Dot = deviceInfo(cpu()).features?.avx512bf16 === true;
  const checkBf16 = (p: Problem, spec: RunSpec, seed: number) => checkProblem(p, { ...spec, compute: 'bf16' }, seed);

  it('matches the reference on the rounded operands: random, ragged and empty shapes, every transpose, f32 and bf16 weights, every ISA', () => {
    shapeMixes(24, 21).forEach(([m, n, k], i) => {
      for (const [transA, transB] of transposes) {
        const dtype = i % 2 === 0 ? 'bf16' : 'f32';
        checkBf16({ m, n, k, transA, transB }, { ...variants[(i + (transB ? 1 : 0)) % variants.length]!, dtype }, 2100 + i);
      }
    });
  });

  it('bf16 weights with transB (the VDPBF16PS path): odd k, several k blocks, partial panels, beta and bias, transA', () => {
    const cases: [number, number, number, boolean][] = [
      [1, 9, 3, false], [49, 17, 1, false], [37, 70, 1025, false], [100, 33, 2049, true], [48, 8, 2, false], [97, 130, 64, false], [300, 24, 96, false],
      // k above 16,384: several k blocks of at most 8,192 pairs (2 with an odd k, 3 with an even one)
      [20, 11, 16391, false], [13, 9, 32770, false],
    ];
    cases.forEach(([m, n, k, transA], i) =>
      checkBf16({ m, n, k, transA, transB: true }, { alpha: i % 2 ? -0.5 : 1, beta: i % 3 ? 0 : 0.75, withBias: i % 2 === 0, dtype: 'bf16' }, 2200 + i),
    );
  });

  it('rounds the activations: equals f32 compute on pre-rounded operands in the reference, and differs from f32 compute', () => {
    const aData = randomFloats(6 * 40, 2300);
    const w = weight(randomFloats(5 * 40, 2301), [5, 40], 'bf16');
    const ref = (data: Float32Array, compute: 'f32' | 'bf16'): Float32Array => {
      const a = tensorF32(data, [6, 40]);
      const out = gemm(a, w.t, { transB: true, reference: true, compute });
      const r = f32(out);
      a.dispose();
      out.dispose();
      return r;
    };
    expectBitwiseEqual(ref(aData, 'bf16'), ref(rounded(aData), 'f32'), 'bf16 reference vs f32 reference on rounded a');
    expect(Array.from(ref(aData, 'bf16'))).not.toEqual(Array.from(ref(aData, 'f32')));
    w.t.dispose();
  });

  it.skipIf(!hasBf16Dot)('gives a row the same bits whatever its batch mates: up to 8 rows (decode path) and above (AVX512-BF16)', () => {
    const n = 70, k = 333, rows = 80;
    const aData = randomFloats(rows * k, 2400);
    const w = weight(randomFloats(n * k, 2401), [n, k], 'bf16');
    const run = (start: number, m: number): Float32Array => {
      const part = tensorF32(aData.subarray(start * k, (start + m) * k), [m, k]);
      const out = f32(gemm(part, w.t, { transB: true, compute: 'bf16' }));
      part.dispose();
      return out;
    };
    const decode = run(0, 8);
    for (const m of [1, 2, 3, 5, 7]) {
      const start = (m * 3) % (8 - m + 1);
      expectBitwiseEqual(run(start, m), decode.subarray(start * n, (start + m) * n), `decode rows ${start}..${start + m}`);
    }
    const full = run(0, rows);
    for (const m of [9, 15, 16, 17, 33, 47, 48, 49, 64]) {
      const start = (m * 7) % (rows - m + 1);
      expectBitwiseEqual(run(start, m), full.subarray(start * n, (start + m) * n), `rows ${start}..${start + m}`);
    }
    w.t.dispose();
  });

  // The tile kernels by name: each one this CPU runs, and the AMX tiling over its emulation of the tile instructions
  // (every AVX-512 machine), so the AMX path's blocking, tails and epilogue are checked where there is no AMX.
  const cpuInfo = deviceInfo(cpu());
  const tileKernels: Bf16Kernel[] = [
    ...(cpuInfo.features?.avx512bf16 ? (['avx512bf16'] as const) : []),
    ...(cpuInfo.features?.amxbf16 && cpuInfo.bf16Kernel === 'amx' ? (['amx'] as const) : []),
    ...(cpuInfo.bestIsa === 'avx512' ? (['amx-emulated'] as const) : []),
  ];
  it.skipIf(tileKernels.length === 0)('each tile kernel this CPU has matches the reference: 32-row blocks, 48-row panels, short tiles, odd k, chunks and k blocks', () => {
    const cases: [number, number, number, boolean][] = [
      [64, 96, 1024, false], [50, 70, 515, false], [9, 33, 31, false], [32, 40, 4096, false], [130, 17, 257, true], [17, 20, 16419, false],
    ];
    for (const bf16Kernel of tileKernels) {
      cases.forEach(([m, n, k, transA], i) =>
        checkBf16(
          { m, n, k, transA, transB: true },
          { alpha: i % 2 ? -0.5 : 1, beta: i % 3 ? 0 : 0.75, withBias: i % 2 === 0, dtype: 'bf16', bf16Kernel },
          2600 + i,
        ),
      );
    }
  });

  it.skipIf(tileKernels.length === 0)('each tile kernel gives a row the same bits whatever its batch mates and the thread count', () => {
    const n = 40, k = 300, rows = 100;
    const aData = randomFloats(rows * k, 2700);
    const w = weight(randomFloats(n * k, 2701), [n, k], 'bf16');
    for (const bf16Kernel of tileKernels) {
      const run = (start: number, m: number): Float32Array => {
        const part = tensorF32(aData.subarray(start * k, (start + m) * k), [m, k]);
        const out = f32(gemm(part, w.t, { transB: true, compute: 'bf16', bf16Kernel }));
        part.dispose();
        return out;
      };
      const full = run(0, rows);
      for (const m of [9, 31, 32, 33, 48, 65]) {
        const start = (m * 7) % (rows - m + 1);
        expectBitwiseEqual(run(start, m), full.subarray(start * n, (start + m) * n), `${bf16Kernel} rows ${start}..${start + m}`);
      }
      expectBitwiseEqual(withThreads(1, () => run(0, rows)), full, `${bf16Kernel} 1 thread vs the pool`);
    }
    w.t.dispose();
  });

  it('names the bf16 kernel it runs, and rejects an unknown or unavailable one with a typed error', () => {
    const info = deviceInfo(cpu());
    expect(['amx', 'avx512bf16', 'rounded']).toContain(info.bf16Kernel);
    if (info.bf16Kernel === 'amx') expect(info.features?.amxbf16).toBe(true);
    const a = tensorF32(randomFloats(12 * 8, 2800), [12, 8]);
    const w = weight(randomFloats(3 * 8, 2801), [3, 8], 'bf16');
    expect(() => gemm(a, w.t, { transB: true, compute: 'bf16', bf16Kernel: 'fp8' as Bf16Kernel })).toThrow(
      /option kernel must be auto, rounded, avx512bf16, amx or amx-emulated on the CPU, got "fp8"/,
    );
    if (!info.features?.amxbf16) {
      expect(() => gemm(a, w.t, { transB: true, compute: 'bf16', bf16Kernel: 'amx' })).toThrow(UnsupportedOpError);
    }
    // The rounded kernel is everywhere, and agrees with auto within the f32 bound (the bits may differ by path).
    const viaRounded = f32(gemm(a, w.t, { transB: true, compute: 'bf16', bf16Kernel: 'rounded' }));
    expectClose(viaRounded, f32(gemm(a, w.t, { transB: true, compute: 'bf16' })), 1e-5, 1e-6, 'rounded vs auto');
    a.dispose();
    w.t.dispose();
  });

  it('gives the same bits on 1 and 2 threads', () => {
    const a = tensorF32(randomFloats(130 * 500, 2500), [130, 500]);
    const w = weight(randomFloats(260 * 500, 2501), [260, 500], 'bf16');
    const run = (threads: number): Float32Array => withThreads(threads, () => f32(gemm(a, w.t, { transB: true, compute: 'bf16' })));
    expectBitwiseEqual(run(1), run(2), '1 vs 2 threads');
    a.dispose();
    w.t.dispose();
  });

  it('rejects an unknown compute mode, in TS and in the binding', () => {
    const a = tensorF32(new Float32Array(8), [2, 4]);
    const w = tensorF32(new Float32Array(12), [3, 4]);
    expect(() => gemm(a, w, { transB: true, compute: 'fp8' as 'bf16' })).toThrow(/option compute must be 'f32' or 'bf16', got fp8/);
    expect(() => linear(a, w, undefined, { compute: 'int8' as 'bf16' })).toThrow(InvalidArgumentError);
    const out = tensorF32(new Float32Array(6), [2, 3]);
    const opts = { transA: false, transB: true, alpha: 1, beta: 0, bias: null, compute: 'f16' as 'bf16' };
    expect(() => cpu().binding.gemm(a.native, w.native, out.native, opts)).toThrow(/compute must be 'f32' or 'bf16'/);
    for (const t of [a, w, out]) t.dispose();
  });
});

describe('gemmBatched', () => {
  it('matches the reference with per-entry and shared (broadcast) B, on every ISA', () => {
    const batch = 3;
    const cases: [number, number, number][] = [[5, 7, 9], [1, 33, 17], [16, 31, 65], [0, 4, 3], [9, 1, 0], [40, 50, 60]];
    cases.forEach(([m, n, k], ci) => {
      for (const [transA, transB] of transposes) {
        for (const shared of [false, true]) {
          const p: Problem = { m, n, k, transA, transB };
          const aData = randomFloats(batch * m * k, 800 + ci);
          const a = tensorF32(aData, [batch, ...aShape(p)]);
          const dtype: DType = ci % 2 === 0 ? 'f32' : 'bf16';
          const bCount = (shared ? 1 : batch) * n * k;
          const w = weight(randomFloats(bCount, 900 + ci), shared ? bShape(p) : [batch, ...bShape(p)], dtype);
          const biasData = randomFloats(n, 950 + ci);
          const bias = tensorF32(biasData, [n]);
          const c0 = randomFloats(batch * m * n, 990 + ci);
          const run = (reference: boolean): Float32Array => {
            const out = tensorF32(c0, [batch, m, n]);
            gemmBatched(a, w.t, { transA, transB, alpha: 1.25, beta: 0.5, bias, out, reference });
            return f32(out);
          };
          const want = run(true);
          // Per-entry error scale, laid end to end.
          const scale = new Float64Array(batch * m * n);
          for (let e = 0; e < batch; e++) {
            const bVals = shared ? w.values : w.values.subarray(e * n * k, (e + 1) * n * k);
            const aEntry = aData.subarray(e * m * k, (e + 1) * m * k);
            const cEntry = c0.subarray(e * m * n, (e + 1) * m * n);
            scale.set(errorScale(p, aEntry, bVals, 1.25, 0.5, cEntry, biasData), e * m * n);
          }
          const what = `batched ${label(p, shared ? ' shared B' : '')} ${dtype}`;
          forEachIsa((isa) => expectWithin(run(false), want, scale, k, `${isa} ${what}`));
        }
      }
    });
  });

  it('a batch of one shared-B entry equals a plain gemm', () => {
    const a = tensorF32(randomFloats(6 * 10, 3), [1, 6, 10]);
    const w = tensorF32(randomFloats(8 * 10, 4), [8, 10]);
    const batched = f32(gemmBatched(a, w, { transB: true }));
    const plain = f32(gemm(a.reshape([6, 10]), w, { transB: true }));
    expectBitwiseEqual(batched, plain, 'batch of one');
  });
});

describe('determinism', () => {
  it('gives bitwise-identical results on 1 and 2 threads for shapes that are split into many tasks', () => {
    const problems: [Problem, DType][] = [
      [{ m: 200, n: 300, k: 600, transA: false, transB: true }, 'f32'],
      [{ m: 200, n: 300, k: 600, transA: false, transB: false }, 'f32'],
      [{ m: 64, n: 200, k: 520, transA: true, transB: true }, 'bf16'],
      [{ m: 5, n: 1000, k: 300, transA: false, transB: true }, 'bf16'],
      [{ m: 8, n: 700, k: 250, transA: false, transB: true }, 'f16'],
    ];
    forEachIsa((isa) => {
      problems.forEach(([p, dtype], i) => {
        const a = tensorF32(randomFloats(p.m * p.k, 1000 + i), aShape(p));
        const w = weight(randomFloats(p.n * p.k, 1100 + i), bShape(p), dtype);
        const bias = tensorF32(randomFloats(p.n, 1200 + i), [p.n]);
        const run = (): Float32Array => f32(gemm(a, w.t, { transA: p.transA, transB: p.transB, bias }));
        expectBitwiseEqual(withThreads(1, run), withThreads(2, run), `${isa} ${label(p, ` ${dtype}`)}`);
      });
      const a = tensorF32(randomFloats(6 * 12 * 40, 1300), [6, 12, 40]);
      const w = tensorF32(randomFloats(6 * 40 * 24, 1301), [6, 24, 40]);
      const run = (): Float32Array => f32(gemmBatched(a, w, { transB: true }));
      expectBitwiseEqual(withThreads(1, run), withThreads(2, run), `${isa} batched`);
    });
  });
});

describe('linear', () => {
  it('is x @ weight^T + bias over the last dimension of x', () => {
    const x = tensorF32(randomFloats(2 * 3 * 16, 5), [2, 3, 16]);
    const w = weight(randomFloats(10 * 16, 6), [10, 16], 'bf16');
    const bias = tensorF32(randomFloats(10, 7), [10]);
    const y = linear(x, w.t, bias);
    expect(y.shape).toEqual([2, 3, 10]);
    expectBitwiseEqual(f32(y), f32(gemm(x.reshape([6, 16]), w.t, { transB: true, bias })), 'linear vs gemm');
    const out = Tensor.empty([2, 3, 10], 'f32', cpu());
    expect(linear(x, w.t, bias, { out })).toBe(out);
    expectBitwiseEqual(f32(out), f32(y), 'linear into out');
    const row = linear(x.reshape([6, 16]).rows(4, 1).reshape([16]), w.t, bias);
    expect(row.shape).toEqual([10]);
    // A single row takes the decode path; it may round differently from the 6-row call, within f32 accuracy.
    expectClose(f32(row), f32(y).subarray(40, 50), 1e-5, 1e-5, 'linear of one vector');
  });

  it('handles an empty batch and empty rows', () => {
    expect(gemmBatched(zeros([0, 3, 4]), zeros([5, 4]), { transB: true }).shape).toEqual([0, 3, 5]);
    expect(linear(zeros([0, 4]), zeros([5, 4])).shape).toEqual([0, 5]);
  });
});

describe('validation', () => {
  const t = (shape: number[], dtype: DType = 'f32'): Tensor => Tensor.zeros(shape, dtype, cpu());

  it('names both shapes when k disagrees', () => {
    expect(() => gemm(t([4, 7]), t([5, 8]), { transB: true })).toThrow(ShapeMismatchError);
    expect(() => gemm(t([4, 7]), t([5, 8]), { transB: true })).toThrow('gemm: a [4, 7] and b [5, 8] (transB) disagree on k: 7 vs 8');
    expect(() => gemm(t([7, 4]), t([5, 8]), { transA: true })).toThrow('gemm: a [7, 4] (transA) and b [5, 8] disagree on k: 7 vs 5');
    expect(() => gemmBatched(t([2, 4, 7]), t([3, 7, 5]))).toThrow(/a \[2, 4, 7\] and b \[3, 7, 5\] disagree on batch/);
    expect(() => gemmBatched(t([2, 4, 7]), t([6, 5]))).toThrow(/a \[2, 4, 7\] and b \[6, 5\] disagree on k: 7 vs 6/);
    expect(() => linear(t([3, 16]), t([10, 15]))).toThrow(/x \[3, 16\] and weight \[10, 15\] disagree on in_features/);
  });

  it('rejects wrong ranks, bias and out shapes', () => {
    expect(() => gemm(t([4]), t([4, 2]))).toThrow(ShapeMismatchError);
    expect(() => gemm(t([4, 3]), t([3, 2]), { bias: t([3]) })).toThrow(/bias \[3\] must be \[2\].*a \[4, 3\] and b \[3, 2\]/);
    expect(() => gemm(t([4, 3]), t([3, 2]), { out: t([2, 4]) })).toThrow(ShapeMismatchError);
  });

  it('rejects dtypes other than f32 activations and f32/f16/bf16 weights', () => {
    expect(() => gemm(t([4, 3], 'bf16'), t([3, 2]))).toThrow(DTypeMismatchError);
    expect(() => gemm(t([4, 3]), t([3, 2], 'i32'))).toThrow(DTypeMismatchError);
    expect(() => gemm(t([4, 3]), t([3, 2]), { bias: t([2], 'f16') })).toThrow(DTypeMismatchError);
  });

  it('requires out when beta != 0', () => {
    expect(() => gemm(t([4, 3]), t([3, 2]), { beta: 1 })).toThrow(InvalidArgumentError);
    expect(() => gemm(t([4, 3]), t([3, 2]), { beta: 1 })).toThrow(/beta = 1 accumulates into C, so pass C as `out`/);
  });

  it('the native binding validates on its own: bad direct calls throw instead of crashing', () => {
    const b = cpu().binding;
    const opts = { transA: false, transB: true, alpha: 1, beta: 0, bias: null };
    expect(() => b.gemm(t([4, 7]).native, t([5, 8]).native, t([4, 5]).native, opts)).toThrow(/disagree on k: 7 vs 8/);
    expect(() => b.gemm(t([4, 8]).native, t([5, 8]).native, t([5, 4]).native, opts)).toThrow(
      /c has shape \[5, 4\], expected \[4, 5\]/,
    );
    expect(() => b.gemm(t([4, 8]).native, t([5, 8], 'i32').native, t([4, 5]).native, opts)).toThrow(/must be f32, f16 or bf16/);
    const wrongBias = { ...opts, bias: t([4]).native };
    expect(() => b.gemm(t([4, 8]).native, t([5, 8]).native, t([4, 5]).native, wrongBias)).toThrow(/bias \[4\]/);
    const a = t([4, 4]);
    expect(() => b.gemm(a.native, t([4, 4]).native, a.native, opts)).toThrow(/overlaps an input/);
    expect(() => b.gemmBatched(t([2, 4, 8]).native, t([3, 5, 8]).native, t([2, 4, 5]).native, opts)).toThrow(/disagree on batch/);
    expect(() => b.gemmBatched(t([4, 8]).native, t([5, 8]).native, t([4, 5]).native, opts)).toThrow(/rank 3/);
  });
});

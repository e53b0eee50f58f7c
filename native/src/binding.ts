/**
 * The raw contract of a Tessera addon (`tessera_cpu.node` and `tessera_cuda.node` export the same names).
 * Ops write into caller-allocated outputs; the TS layer in `ops/` validates shapes and dtypes first.
 * Most users want the typed wrappers in `ops/`, not this.
 */
export type DType = 'f32' | 'f16' | 'bf16' | 'i32' | 'i64' | 'u8';
export type DeviceKind = 'cpu' | 'cuda';
export type Isa = 'scalar' | 'avx2' | 'avx512';

/** An opaque native PLOT index (an External owning its table). */
export type PlotIndexHandle = { readonly __plotIndex: unique symbol };

export interface NativeTensor {
  readonly dtype: DType;
  readonly shape: number[];
  readonly nbytes: number;
  readonly disposed: boolean;
  dispose(): void;
  read(dst: ArrayBufferView): void;
  write(src: ArrayBufferView): void;
  writeAsync(src: ArrayBufferView): Promise<void>;
  rowsView(start: number, count: number): NativeTensor;
  reshape(shape: readonly number[]): NativeTensor;
  sameStorage(other: NativeTensor): boolean;
}

export interface AllocatorStats {
  /** Bytes allocated now (each allocation rounded up to 64 bytes). */
  inUse: number;
  /** High-water mark of `inUse` since start or `resetPeak()`. */
  peak: number;
  /** Allocations beyond this fail with BudgetExceededError. */
  budget: number;
  /** Live allocations. */
  allocations: number;
  totalAllocations: number;
  /** Allocations rejected for the budget. */
  failed: number;
}

export interface DeviceInfo {
  device: DeviceKind;
  /** cpu: the ISA kernels dispatch to now, and the best one this CPU supports. */
  isa?: Isa;
  bestIsa?: Isa;
  threads?: number;
  hardwareThreads?: number;
  features?: Record<string, boolean>;
  /** cpu: the kernel gemm's compute 'bf16' runs on bf16 weights ({@link Bf16Kernel}). */
  bf16Kernel?: Bf16Kernel;
  /** cuda: device name, compute capability, memory. */
  name?: string;
  computeCapability?: string;
  totalMemory?: number;
  multiprocessors?: number;
}

/** Shared by every op: `reference: true` runs the plain scalar reference kernel (CPU only). */
export interface RefOption {
  reference?: boolean;
}

export interface NativeGemmOptions extends RefOption {
  transA: boolean;
  transB: boolean;
  alpha: number;
  beta: number;
  bias: NativeTensor | null;
  /** 'bf16': round both operands to bf16 and sum their products in f32 (CPU only). Default 'f32'. */
  compute?: ComputeMode;
  /**
   * CUDA: force a GEMM path (tests use it to tell a tensor-core bug from a harness bug). CPU: the bf16-compute
   * kernel ({@link Bf16Kernel}); a kernel the CPU lacks is an UnsupportedError.
   */
  kernel?: 'auto' | 'tensor' | 'simt' | 'skinny' | 'reference' | Bf16Kernel;
}

/** How a GEMM multiplies: in f32, or with both operands rounded to bf16 and f32 accumulation. */
export type ComputeMode = 'f32' | 'bf16';
/**
 * The CPU's bf16-compute GEMM kernels: `amx` (AMX-BF16 tiles), `avx512bf16` (VDPBF16PS), `rounded` (operands rounded,
 * f32 kernels), `amx-emulated` (the AMX tiling over a C++ emulation of the tile instructions: tests only), `auto`
 * (the best this CPU has: deviceInfo().bf16Kernel).
 */
export type Bf16Kernel = 'auto' | 'rounded' | 'avx512bf16' | 'amx' | 'amx-emulated';

export type BinaryOpName = 'add' | 'mul';
export type ActivationName = 'gelu_erf' | 'gelu_tanh' | 'silu';

export interface NativeBinding {
  readonly device: DeviceKind;
  readonly NativeTensor: new (dtype: DType, shape: readonly number[]) => NativeTensor;
  empty(dtype: DType, shape: readonly number[]): NativeTensor;
  allocatorStats(): AllocatorStats;
  setBudget(bytes: number): AllocatorStats;
  resetPeak(): AllocatorStats;
  synchronize(): void;
  info(): DeviceInfo;
  copy(src: NativeTensor, dst: NativeTensor): void;

  // CPU-only controls (tests compare thread counts and ISA paths).
  setThreads?(n: number): number;
  setIsa?(isa: Isa | 'best'): Isa;
  // CUDA-only: probe without creating a context on failure.
  cudaDeviceCount?(): { count: number; error: string | null };
  /** CUDA-only: which GEMM path `auto` picks for (m, n, k). */
  cudaGemmKernel?(m: number, n: number, k: number): string;

  // ---- ops: outputs are preallocated by the caller
  gemm(a: NativeTensor, b: NativeTensor, c: NativeTensor, opts: NativeGemmOptions): void;
  /** a [batch,m,k] (or [batch,k,m]); b [batch,...] or rank 2 (shared); c [batch,m,n]. */
  gemmBatched(a: NativeTensor, b: NativeTensor, c: NativeTensor, opts: NativeGemmOptions): void;
  embedding(table: NativeTensor, ids: NativeTensor, out: NativeTensor, opts: RefOption): void;
  gatherRows(src: NativeTensor, idx: NativeTensor, out: NativeTensor): void;
  scatterRows(src: NativeTensor, idx: NativeTensor, dst: NativeTensor): void;
  convert(src: NativeTensor, dst: NativeTensor, opts: RefOption): void;
  binary(op: BinaryOpName, a: NativeTensor, b: NativeTensor, out: NativeTensor, opts: RefOption): void;
  scale(x: NativeTensor, s: number, out: NativeTensor, opts: RefOption): void;
  activation(act: ActivationName, x: NativeTensor, out: NativeTensor, opts: RefOption): void;
  siluMul(gate: NativeTensor, up: NativeTensor, out: NativeTensor, opts: RefOption): void;
  layerNorm(x: NativeTensor, gamma: NativeTensor | null, beta: NativeTensor | null, out: NativeTensor, opts: RefOption & { eps: number }): void;
  rmsNorm(x: NativeTensor, gamma: NativeTensor | null, out: NativeTensor, opts: RefOption & { eps: number }): void;
  softmax(x: NativeTensor, out: NativeTensor, opts: RefOption & { scale: number }): void;
  rope(x: NativeTensor, positions: NativeTensor, opts: RefOption & { rotDim: number; base: number; inverse?: boolean }): void;
  attentionPrefill(q: NativeTensor, k: NativeTensor, v: NativeTensor, out: NativeTensor,
    opts: RefOption & { causal: boolean; scale: number; keyMask: NativeTensor | null }): void;
  attentionDecode(q: NativeTensor, kCache: NativeTensor, vCache: NativeTensor, blockTable: NativeTensor,
    contextLens: NativeTensor, out: NativeTensor, opts: RefOption & { scale: number }): void;
  /** y [rows, rMax] += x [rows, hIn] · W_i[layer]ᵀ per segment (weights[i] [L, r_i, hIn] or null; indptr i32 [n + 1]). */
  sgmvShrink(y: NativeTensor, x: NativeTensor, weights: readonly (NativeTensor | null)[], indptr: NativeTensor,
    opts: RefOption & { layer: number }): void;
  /** y [rows, hOut] += scale_i · v [rows, 0:r_i] · W_i[layer] per segment (weights[i] [L, r_i, hOut] or null). */
  sgmvExpand(y: NativeTensor, v: NativeTensor, weights: readonly (NativeTensor | null)[], indptr: NativeTensor,
    opts: RefOption & { layer: number; scales?: readonly number[] | null }): void;
  /** sgmvShrink with a per-row adapter index (rowIndex i32 [rows]; -1 = none) instead of segments. */
  bgmvShrink(y: NativeTensor, x: NativeTensor, weights: readonly (NativeTensor | null)[], rowIndex: NativeTensor,
    opts: RefOption & { layer: number }): void;
  /** sgmvExpand with a per-row adapter index; scales are one per weight. */
  bgmvExpand(y: NativeTensor, v: NativeTensor, weights: readonly (NativeTensor | null)[], rowIndex: NativeTensor,
    opts: RefOption & { layer: number; scales?: readonly number[] | null }): void;

  // ---- training (f32): backward kernels, loss, optimiser
  layerNormBackward(x: NativeTensor, gamma: NativeTensor | null, dy: NativeTensor, dx: NativeTensor | null, dgamma: NativeTensor | null,
    dbeta: NativeTensor | null, opts: RefOption & { eps: number; accumulate: boolean }): void;
  rmsNormBackward(x: NativeTensor, gamma: NativeTensor | null, dy: NativeTensor, dx: NativeTensor | null, dgamma: NativeTensor | null,
    opts: RefOption & { eps: number; accumulate: boolean }): void;
  softmaxBackward(y: NativeTensor, dy: NativeTensor, dx: NativeTensor, opts: RefOption & { scale: number }): void;
  activationBackward(act: ActivationName, x: NativeTensor, dy: NativeTensor, dx: NativeTensor, opts: RefOption): void;
  siluMulBackward(gate: NativeTensor, up: NativeTensor, dy: NativeTensor, dgate: NativeTensor, dup: NativeTensor, opts: RefOption): void;
  crossEntropy(logits: NativeTensor, targets: NativeTensor, loss: NativeTensor, dlogits: NativeTensor | null,
    opts: RefOption & { ignoreIndex: number; labelSmoothing: number; gradScale: number }): void;
  columnSum(x: NativeTensor, out: NativeTensor, opts: RefOption & { accumulate: boolean }): void;
  embeddingBackward(dy: NativeTensor, ids: NativeTensor, dtable: NativeTensor, opts: RefOption & { accumulate: boolean }): void;
  attentionPrefillBackward(q: NativeTensor, k: NativeTensor, v: NativeTensor, dout: NativeTensor, dq: NativeTensor, dk: NativeTensor,
    dv: NativeTensor, opts: RefOption & { causal: boolean; scale: number; keyMask: NativeTensor | null }): void;
  adamw(param: NativeTensor, grad: NativeTensor, m: NativeTensor, v: NativeTensor, opts: RefOption & {
    lr: number; beta1: number; beta2: number; eps: number; weightDecay: number; step: number; gradScale: number }): void;
  /** Sum of the squared elements, accumulated in double in a fixed order. */
  sumSquares(x: NativeTensor, opts: RefOption): number;

  // ---- machine probes (CPU; bench roofline)
  streamTriad?(a: NativeTensor, b: NativeTensor, c: NativeTensor, s: number): void;
  fmaPeakProbe?(iters: number): number;
  readSumProbe?(x: NativeTensor): number;

  // ---- Q8_0 int8 weights (CPU; ops/q8.ts): w is u8 [n, k/32 * 34]
  q8Quantize?(src: NativeTensor, dst: NativeTensor): void;
  q8Dequantize?(src: NativeTensor, dst: NativeTensor): void;
  q8Gemm?(x: NativeTensor, w: NativeTensor, y: NativeTensor, opts: RefOption & { bias: NativeTensor | null; kernel: string }): void;
  q8Kernels?(): { available: string[]; auto: string };

  // ---- PLOT index and fused lookup (CPU; ops/plot.ts): an index is an opaque handle owning native memory
  plotIndexCreate?(expectedKeys: number): PlotIndexHandle;
  plotIndexClone?(h: PlotIndexHandle): PlotIndexHandle;
  plotIndexDispose?(h: PlotIndexHandle): void;
  plotIndexSet?(h: PlotIndexHandle, key: bigint, row: number): number;
  plotIndexGet?(h: PlotIndexHandle, key: bigint): number;
  plotIndexDelete?(h: PlotIndexHandle, key: bigint): number;
  plotIndexGetBatch?(h: PlotIndexHandle, keys: BigUint64Array, out: Int32Array): void;
  plotIndexSize?(h: PlotIndexHandle): number;
  plotIndexCapacity?(h: PlotIndexHandle): number;
  plotIndexByteLength?(h: PlotIndexHandle): number;
  plotIndexClear?(h: PlotIndexHandle): void;
  plotIndexEntries?(h: PlotIndexHandle): { keys: BigUint64Array; rows: Int32Array };
  plotLookupRows?(chain: PlotIndexHandle[], keys: BigUint64Array, out: Int32Array, opts: { backoff: string }): void;
  plotLookupAggregate?(
    chain: PlotIndexHandle[],
    keys: BigUint64Array,
    lengths: Int32Array,
    types: Int32Array | null,
    values: NativeTensor,
    posEmb: NativeTensor,
    typeEmb: NativeTensor,
    gamma: NativeTensor | null,
    beta: NativeTensor | null,
    out: NativeTensor,
    opts: RefOption & { eps: number; backoff: string },
  ): void;
}

/**
 * @tessera/native: tensors under a byte budget and the CPU/CUDA kernels every Tessera app shares.
 *
 *   import { Tensor, gemm } from '@tessera/native';
 *   const x = Tensor.from(new Float32Array(4 * 8), [4, 8]);
 *   const w = Tensor.from(new Float32Array(16 * 8), [16, 8]);   // HF Linear layout [out, in]
 *   const y = gemm(x, w, { transB: true });                      // [4, 16]
 */
export type {
  ActivationName,
  AllocatorStats,
  BinaryOpName,
  Bf16Kernel,
  ComputeMode,
  DType,
  DeviceInfo,
  DeviceKind,
  Isa,
  NativeBinding,
  NativeTensor,
  PlotIndexHandle,
} from './binding.js';
export * from './errors.js';
export { type Backend, type DeviceRequest, addonDirectory, cpuAddonPath, getBackend, getCpuBackend, loadBackend, parseDeviceRequest } from './loader.js';
export { allocatorStats, deviceInfo, resetPeak, setBudget, setIsa, setThreads, synchronize } from './runtime.js';
export { formatShape } from './shape.js';
export { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, fromHalfBits, type HalfDtype, toHalfBits } from './half.js';
export { type AnyTypedArray, type TensorOptions, Tensor, dtypeSize, sameBackend } from './tensor.js';
export * from './ops/index.js';

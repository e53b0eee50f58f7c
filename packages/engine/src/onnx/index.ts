/** ONNX export of both model families and the onnxruntime-node runner (baselines and the numerics cross-check). */
export { CheckedWeights, HOST_WEIGHTS_SOURCE, type HostWeights } from './host-weights.js';
export { ONNX_IR_VERSION, ONNX_OPSET } from './graph-builder.js';
export { type OnnxExportShape } from './common.js';
export { type EncoderOnnxAdapter, type EncoderOnnxAdapterSite, type EncoderOnnxExtensions, type EncoderOnnxPrefix, exportEncoderOnnx } from './export-encoder.js';
export { exportDecoderOnnx, ropeTables } from './export-decoder.js';
export {
  type EncoderOrtResult,
  OrtModel,
  type OrtFeed,
  type OrtModelOptions,
  type OrtOutput,
  runDecoderBatchOrt,
  runDecoderOrt,
  runEncoderOrt,
} from './ort-runner.js';

/** ONNX graphs the comparisons run in onnxruntime, built in TS with onnx-proto (no Python, no files on disk). */
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

export const ONNX_IR_VERSION = 8;
export const ONNX_OPSET = 17;

function valueInfo(name: string, dims: (number | string)[]): InstanceType<typeof onnx.ValueInfoProto> {
  return onnx.ValueInfoProto.create({
    name,
    type: {
      tensorType: {
        elemType: onnx.TensorProto.DataType.FLOAT,
        shape: { dim: dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) },
      },
    },
  });
}

/**
 * Y[m, n] = X[m, k] @ W[k, n], with W an initializer stored as raw little-endian f32 and m a symbolic
 * dimension, so one session serves every batch size. `wKN` is W in [k, n] order (the transpose of a
 * Hugging Face Linear weight).
 */
export function matmulModel(wKN: Float32Array, k: number, n: number): Uint8Array {
  if (wKN.length !== k * n) throw new RangeError(`matmulModel: W has ${wKN.length} elements, want ${k} x ${n}`);
  const model = onnx.ModelProto.create({
    irVersion: ONNX_IR_VERSION,
    producerName: '@tessera/bench',
    opsetImport: [{ domain: '', version: ONNX_OPSET }],
    graph: {
      name: `matmul_${k}x${n}`,
      node: [{ name: 'matmul', opType: 'MatMul', input: ['X', 'W'], output: ['Y'] }],
      initializer: [
        {
          name: 'W',
          dataType: onnx.TensorProto.DataType.FLOAT,
          dims: [k, n],
          rawData: new Uint8Array(wKN.buffer, wKN.byteOffset, wKN.byteLength),
        },
      ],
      input: [valueInfo('X', ['m', k])],
      output: [valueInfo('Y', ['m', n])],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

/**
 * A small builder for ONNX graphs in TypeScript (onnx-proto's protobufjs classes underneath): named values,
 * initializers stored as raw little-endian bytes, nodes with typed attributes, and the ModelProto encoding.
 * The exporters describe the model op by op with it; no Python, no files on disk.
 */
import { InvalidArgumentError } from '@tessera/native';
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

type NodeProto = InstanceType<typeof onnx.NodeProto>;
type TensorProto = InstanceType<typeof onnx.TensorProto>;
type ValueInfoProto = InstanceType<typeof onnx.ValueInfoProto>;
type AttributeProto = InstanceType<typeof onnx.AttributeProto>;

export const ONNX_IR_VERSION = 8;
export const ONNX_OPSET = 17;

/**
 * ModelProto is one protobuf message, and protobuf caps a message at 2 GiB; past that a model needs ONNX's
 * external-data files, which these exporters do not write.
 */
export const ONNX_MAX_MODEL_BYTES = 2 ** 31 - 1;

/** A dimension: a fixed size, or a symbolic name ('batch', 'seq') left free until run time. */
export type OnnxDim = number | string;

/** Element types the exporters use on graph inputs and outputs. */
export type OnnxElemType = 'float32' | 'int64';

const ELEM_TYPE: Record<OnnxElemType, number> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  int64: onnx.TensorProto.DataType.INT64,
};

/** The `to` attribute of Cast, by element type. */
export const ONNX_FLOAT = onnx.TensorProto.DataType.FLOAT;

/** A node attribute; the kind picks the protobuf field (ONNX distinguishes an int 1 from a float 1). */
export type OnnxAttribute =
  | { kind: 'int'; value: number }
  | { kind: 'float'; value: number }
  | { kind: 'ints'; value: readonly number[] };

export const attrInt = (value: number): OnnxAttribute => ({ kind: 'int', value });
export const attrFloat = (value: number): OnnxAttribute => ({ kind: 'float', value });
export const attrInts = (value: readonly number[]): OnnxAttribute => ({ kind: 'ints', value });

function attributeProto(name: string, a: OnnxAttribute): AttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  switch (a.kind) {
    case 'int':
      return onnx.AttributeProto.create({ name, type: T.INT, i: a.value });
    case 'float':
      return onnx.AttributeProto.create({ name, type: T.FLOAT, f: a.value });
    case 'ints':
      return onnx.AttributeProto.create({ name, type: T.INTS, ints: [...a.value] });
  }
}

function valueInfo(name: string, elemType: OnnxElemType, dims: readonly OnnxDim[]): ValueInfoProto {
  return onnx.ValueInfoProto.create({
    name,
    type: {
      tensorType: {
        elemType: ELEM_TYPE[elemType],
        shape: { dim: dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) },
      },
    },
  });
}

function bytesOf(a: Float32Array | BigInt64Array): Uint8Array {
  // ONNX raw_data is little-endian; typed arrays are in host order, little-endian on every platform we build for.
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

export class GraphBuilder {
  readonly #nodes: NodeProto[] = [];
  readonly #initializers: TensorProto[] = [];
  readonly #inputs: ValueInfoProto[] = [];
  readonly #outputs: ValueInfoProto[] = [];
  readonly #names = new Set<string>();
  readonly #constants = new Map<string, string>();
  readonly #opCounts = new Map<string, number>();
  #initializerBytes = 0;

  constructor(readonly graphName: string) {}

  /** A value name not used yet, derived from `hint` (names show up in ORT's error messages and in Netron). */
  #unused(hint: string): string {
    let name = hint;
    for (let k = 1; this.#names.has(name); k++) name = `${hint}_${k}`;
    return name;
  }

  #claim(name: string): string {
    if (this.#names.has(name)) throw new RangeError(`GraphBuilder(${this.graphName}): value name ${name} is already taken`);
    this.#names.add(name);
    return name;
  }

  /** Declares a graph input and returns its value name. */
  input(name: string, elemType: OnnxElemType, dims: readonly OnnxDim[]): string {
    this.#inputs.push(valueInfo(this.#claim(name), elemType, dims));
    return name;
  }

  /** Declares the already-produced value `name` a graph output. */
  output(name: string, elemType: OnnxElemType, dims: readonly OnnxDim[]): void {
    if (!this.#names.has(name)) throw new RangeError(`GraphBuilder(${this.graphName}): output ${name} is produced by no node`);
    this.#outputs.push(valueInfo(name, elemType, dims));
  }

  /** An f32 initializer (a weight or a table), stored as raw bytes. */
  f32(name: string, data: Float32Array, dims: readonly number[]): string {
    const n = dims.reduce((a, b) => a * b, 1);
    if (data.length !== n) throw new RangeError(`GraphBuilder: initializer ${name} has ${data.length} elements, dims [${dims.join(', ')}] want ${n}`);
    this.#initializers.push(
      onnx.TensorProto.create({ name: this.#claim(name), dataType: onnx.TensorProto.DataType.FLOAT, dims: [...dims], rawData: bytesOf(data) }),
    );
    this.#initializerBytes += data.byteLength;
    return name;
  }

  /** An int64 initializer (indices, shapes, axes). */
  i64(name: string, values: readonly number[], dims: readonly number[]): string {
    const data = BigInt64Array.from(values, (v) => BigInt(v));
    this.#initializers.push(
      onnx.TensorProto.create({ name: this.#claim(name), dataType: onnx.TensorProto.DataType.INT64, dims: [...dims], rawData: bytesOf(data) }),
    );
    this.#initializerBytes += data.byteLength;
    return name;
  }

  /** A shared f32 scalar constant (rank 0, so it broadcasts against anything). */
  scalarF32(value: number): string {
    const key = `f32:${Object.is(value, -0) ? '-0' : String(value)}`;
    const cached = this.#constants.get(key);
    if (cached !== undefined) return cached;
    const name = this.f32(this.#unused('const_f32'), Float32Array.of(value), []);
    this.#constants.set(key, name);
    return name;
  }

  /** A shared int64 constant: a scalar when `values` is a number, else a 1-D tensor (axes, shapes). */
  constI64(values: number | readonly number[]): string {
    const key = `i64:${typeof values === 'number' ? String(values) : `[${values.join(',')}]`}`;
    const cached = this.#constants.get(key);
    if (cached !== undefined) return cached;
    const name =
      typeof values === 'number'
        ? this.i64(this.#unused('const_i64'), [values], [])
        : this.i64(this.#unused('const_i64'), values, [values.length]);
    this.#constants.set(key, name);
    return name;
  }

  /** Appends a node with one output; returns the output's value name (`output` when given, else an unused one). */
  op(opType: string, inputs: readonly string[], attributes: Record<string, OnnxAttribute> = {}, output?: string): string {
    const out = this.#claim(output ?? this.#unused(opType.toLowerCase()));
    this.#node(opType, inputs, [out], attributes);
    return out;
  }

  /** Appends a node with `count` outputs (Split) and returns their value names. */
  opMulti(opType: string, inputs: readonly string[], count: number, attributes: Record<string, OnnxAttribute> = {}): string[] {
    const outs = Array.from({ length: count }, () => this.#claim(this.#unused(opType.toLowerCase())));
    this.#node(opType, inputs, outs, attributes);
    return outs;
  }

  #node(opType: string, inputs: readonly string[], outputs: string[], attributes: Record<string, OnnxAttribute>): void {
    for (const name of inputs) {
      if (!this.#names.has(name)) throw new RangeError(`GraphBuilder(${this.graphName}): ${opType} reads ${name}, which nothing defines`);
    }
    const k = (this.#opCounts.get(opType) ?? 0) + 1;
    this.#opCounts.set(opType, k);
    this.#nodes.push(
      onnx.NodeProto.create({
        name: `${opType}_${k}`,
        opType,
        input: [...inputs],
        output: outputs,
        attribute: Object.entries(attributes).map(([name, a]) => attributeProto(name, a)),
      }),
    );
  }

  /** The ModelProto bytes (IR 8, default-domain opset 17). `metadata` lands in metadata_props. */
  encode(options: { producer: string; docString?: string; metadata?: Record<string, string> }): Uint8Array {
    if (this.#initializerBytes > ONNX_MAX_MODEL_BYTES) {
      throw new InvalidArgumentError(
        `ONNX export of ${this.graphName}: ${this.#initializerBytes} bytes of weights exceed protobuf's 2 GiB message limit; ` +
          'this exporter writes no ONNX external-data files',
      );
    }
    const model = onnx.ModelProto.create({
      irVersion: ONNX_IR_VERSION,
      producerName: options.producer,
      docString: options.docString ?? '',
      opsetImport: [{ domain: '', version: ONNX_OPSET }],
      metadataProps: Object.entries(options.metadata ?? {}).map(([key, value]) => ({ key, value })),
      graph: {
        name: this.graphName,
        node: this.#nodes,
        initializer: this.#initializers,
        input: this.#inputs,
        output: this.#outputs,
      },
    });
    return onnx.ModelProto.encode(model).finish();
  }
}

import { describe, expect, it } from 'vitest';
import onnxProto from 'onnx-proto';
import { maxRelErr, randomFloats, transpose } from '../src/data.js';
import { matmulModel, ONNX_IR_VERSION, ONNX_OPSET } from '../src/onnx.js';
import { formatNumber, formatTable } from '../src/table.js';

describe('helpers', () => {
  it('maxRelErr is normwise and reports NaN', () => {
    expect(maxRelErr([1, 2, 4], [1, 2, 4])).toBe(0);
    expect(maxRelErr([1, 0.01, 4.1], [1, 0, 4])).toBeCloseTo(0.1 / 4, 12);
    expect(maxRelErr([Number.NaN], [1])).toBeNaN();
    expect(() => maxRelErr([1], [1, 2])).toThrow(RangeError);
  });

  it('transpose swaps axes, including ragged block edges', () => {
    const rows = 70;
    const cols = 130;
    const src = Float32Array.from({ length: rows * cols }, (_, i) => i);
    const t = transpose(src, rows, cols);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) expect(t[c * rows + r]).toBe(src[r * cols + c]);
    expect(() => transpose(src, 3, 3)).toThrow(RangeError);
  });

  it('formatTable aligns columns: text left, numbers right', () => {
    const text = formatTable({
      columns: [
        { key: 'name', header: 'name' },
        { key: 'v', header: 'value' },
      ],
      rows: [
        { name: 'a', v: 1.23456 },
        { name: 'longer', v: 1234.5 },
        { name: 'none', v: null },
      ],
      notes: ['note'],
    });
    expect(text.split('\n')).toEqual(['name    value', '------  -----', 'a        1.23', 'longer   1235', 'none        -', 'note']);
    expect(formatNumber(0.000123)).toBe('1.23e-4');
    expect(formatNumber(0)).toBe('0');
  });
});

describe('ONNX MatMul graph', () => {
  it('encodes IR 8 / opset 17 with W as raw f32 data and a symbolic batch', () => {
    const w = Float32Array.from({ length: 6 }, (_, i) => i + 0.5);
    const model = onnxProto.onnx.ModelProto.decode(matmulModel(w, 2, 3));
    expect(Number(model.irVersion)).toBe(ONNX_IR_VERSION);
    expect(Number(model.opsetImport[0]!.version)).toBe(ONNX_OPSET);
    const g = model.graph!;
    expect(g.node![0]!.opType).toBe('MatMul');
    const init = g.initializer![0]!;
    expect(init.dims!.map(Number)).toEqual([2, 3]);
    const raw = init.rawData!;
    expect(Array.from(new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength)))).toEqual(Array.from(w));
    expect(g.input![0]!.type!.tensorType!.shape!.dim![0]!.dimParam).toBe('m');
    expect(() => matmulModel(w, 4, 4)).toThrow(RangeError);
  });

  it('onnxruntime runs it and computes X @ W', async () => {
    const ort = await import('onnxruntime-node');
    const k = 5;
    const n = 3;
    const m = 2;
    const w = randomFloats(k * n, 1);
    const x = randomFloats(m * k, 2);
    const session = await ort.InferenceSession.create(matmulModel(w, k, n), { intraOpNumThreads: 1, graphOptimizationLevel: 'all' });
    try {
      const y = (await session.run({ X: new ort.Tensor('float32', x, [m, k]) })).Y!.data as Float32Array;
      const want: number[] = [];
      for (let r = 0; r < m; r++) for (let c = 0; c < n; c++) {
        let s = 0;
        for (let j = 0; j < k; j++) s += x[r * k + j]! * w[j * n + c]!;
        want.push(s);
      }
      expect(maxRelErr(y, want)).toBeLessThan(1e-6);
    } finally {
      await session.release();
    }
  });
});

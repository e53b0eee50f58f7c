/**
 * PET parameter files: round trips in memory and on disk (byte-identical to the engine's safetensors writer),
 * and malformed files (truncated, bad JSON, wrong metadata, wrong dtype, overlaps) rejected with PetFormatError.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EncoderConfig, SafetensorsFile, writeSafetensors } from '@tessera/engine';
import { afterAll, describe, expect, it } from 'vitest';
import { PET_TYPES, type PetParams, PetFormatError, PetShapeError, generatePetParams, readPetParams, readPetParamsFile, writePetParams, writePetParamsFile } from '../src/index.js';

const config: EncoderConfig = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 40,
  hiddenSize: 16,
  numLayers: 2,
  numHeads: 2,
  intermediateSize: 24,
  maxPositions: 16,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 2,
  labels: ['no', 'yes'],
};

const dir = mkdtempSync(join(tmpdir(), 'pet-formats-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function expectSameParams(a: PetParams, b: PetParams): void {
  expect(a.type).toBe(b.type);
  expect(a.config).toEqual(b.config);
  expect([...a.tensors.keys()].sort()).toEqual([...b.tensors.keys()].sort());
  for (const [name, t] of a.tensors) {
    const u = b.tensors.get(name)!;
    expect(u.dtype, name).toBe(t.dtype);
    expect(u.shape, name).toEqual(t.shape);
    expect(u.data.constructor, name).toBe(t.data.constructor);
    expect(Buffer.from(u.data.buffer, u.data.byteOffset, u.data.byteLength).equals(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)), name).toBe(true);
  }
}

/** A safetensors header + data built by hand, to craft malformed files. */
function craft(header: unknown, data = new Uint8Array(0), headerLength?: number): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerLength ?? json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

const meta = (over: Record<string, string> = {}) => ({ format: 'tessera-pet', format_version: '1', pet_type: 'standard', pet_config: '{"labels":["a"]}', ...over });

describe('PET files', () => {
  it('round-trip every type in memory and on disk, with identical bytes both ways', () => {
    for (const type of PET_TYPES) {
      const params = generatePetParams(type, config, { seed: 3, activation: 'gelu_tanh' });
      const bytes = writePetParams(params);
      expectSameParams(readPetParams(bytes), params);
      const path = join(dir, `${type}.safetensors`);
      writePetParamsFile(path, params);
      expect(Buffer.from(readFileSync(path)).equals(Buffer.from(bytes)), type).toBe(true);
      expectSameParams(readPetParamsFile(path), params);
      // A Buffer from readFileSync (pooled, offset) parses too.
      expectSameParams(readPetParams(readFileSync(path)), params);
    }
  });

  it('stores the metadata the format documents, readable by the engine reader', () => {
    const params = generatePetParams('lora', config, { seed: 1, rank: 2 });
    const path = join(dir, 'meta.safetensors');
    writePetParamsFile(path, params);
    const f = SafetensorsFile.open(path);
    try {
      expect(f.metadata).toEqual({ format: 'tessera-pet', format_version: '1', pet_type: 'lora', pet_config: '{"labels":["no","yes"],"rank":2,"alpha":4,"targetModules":["query","value"]}' });
      expect(f.info('bert.encoder.layer.0.attention.self.query.lora_A.weight').dtype).toBe('f32');
    } finally {
      f.close();
    }
    const mask = generatePetParams('maskbert', config, { seed: 1 });
    const mpath = join(dir, 'mask.safetensors');
    writePetParamsFile(mpath, mask);
    const m = SafetensorsFile.open(mpath);
    try {
      expect(m.info('bert.encoder.layer.1.output.dense.mask')).toMatchObject({ dtype: 'u8', shape: [16, 3] });
    } finally {
      m.close();
    }
  });

  it('the parsed tensors do not alias the input bytes', () => {
    const bytes = writePetParams(generatePetParams('bitfit', config, { seed: 2 }));
    const params = readPetParams(bytes);
    const before = (params.tensors.get('classifier.bias')!.data as Float32Array).slice();
    bytes.fill(0xff, 8);
    expect(params.tensors.get('classifier.bias')!.data).toEqual(before);
  });

  it('rejects a truncated file at every cut', () => {
    const bytes = writePetParams(generatePetParams('diff', config, { seed: 4, density: 0.2 }));
    for (const cut of [0, 4, 7, 8, 20, bytes.length - 100, bytes.length - 1]) {
      expect(() => readPetParams(bytes.subarray(0, cut)), `cut ${cut}`).toThrow(PetFormatError);
      const path = join(dir, `cut-${cut}.safetensors`);
      writeFileSync(path, bytes.subarray(0, cut));
      expect(() => readPetParamsFile(path), `file cut ${cut}`).toThrow(PetFormatError);
    }
    expect(() => readPetParams(bytes.subarray(0, bytes.length - 1))).toThrow(/truncated/);
  });

  it('rejects corrupted headers and random bytes without crashing', () => {
    const bytes = writePetParams(generatePetParams('adapter', config, { seed: 5 }));
    let state = 12345;
    for (let trial = 0; trial < 200; trial++) {
      const copy = bytes.slice();
      const headerEnd = 8 + Number(new DataView(copy.buffer).getBigUint64(0, true));
      for (let k = 0; k < 3; k++) {
        state = (Math.imul(state, 1103515245) + 12345) >>> 0;
        copy[state % headerEnd] = (state >>> 8) & 0xff;
      }
      try {
        readPetParams(copy);
      } catch (err) {
        expect(err).toBeInstanceOf(PetFormatError);
      }
    }
  });

  it('names what is wrong: JSON, metadata, config, dtype, offsets', () => {
    const f32 = { dtype: 'F32', shape: [1], data_offsets: [0, 4] };
    const four = new Uint8Array(4);
    const cases: [Uint8Array, RegExp][] = [
      [craft({ a: f32 }, four, 10_000), /runs past the end/],
      [(() => { const b = craft({ __metadata__: meta() }); b[9] = 0x7b; b[10] = 0x7b; return b; })(), /not valid UTF-8 JSON/],
      [craft([1, 2]), /must be a JSON object/],
      [craft({ a: f32 }, four), /no __metadata__/],
      [craft({ __metadata__: meta({ format: 'pt' }) }), /format is "pt"/],
      [craft({ __metadata__: meta({ format_version: '2' }) }), /format_version is "2"/],
      [craft({ __metadata__: meta({ pet_type: 'ia3' }) }), /pet_type is "ia3"/],
      [craft({ __metadata__: { format: 'tessera-pet', format_version: '1', pet_type: 'diff' } }), /no pet_config/],
      [craft({ __metadata__: meta({ pet_config: '{labels' }) }), /pet_config is not valid JSON/],
      [craft({ __metadata__: meta({ pet_config: '{"labels":"a"}' }) }), /labels must be a list of strings/],
      [craft({ __metadata__: meta({ pet_config: '{"labels":["a"],"rank":1.5}' }) }), /rank must be an integer/],
      [craft({ __metadata__: meta({ pet_config: '{"labels":["a"],"bottle_neck":4}' }) }), /unknown key "bottle_neck"/],
      [craft({ __metadata__: meta({ pet_config: '{"labels":["a"],"activation":"swish"}' }) }), /activation must be one of gelu, gelu_tanh, relu/],
      [craft({ __metadata__: meta(), a: { dtype: 'F16', shape: [2], data_offsets: [0, 4] } }, four), /dtype "F16".*F32, I32, U8 only/],
      [craft({ __metadata__: meta(), a: { dtype: 'F32', shape: [2], data_offsets: [0, 4] } }, four), /span 4 bytes but \[2\] F32 needs 8/],
      [craft({ __metadata__: meta(), a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, four), /shape must be/],
      [craft({ __metadata__: meta(), a: f32, b: { dtype: 'U8', shape: [2], data_offsets: [2, 4] } }, four), /overlap/],
      [craft({ __metadata__: { format: 1 } }), /__metadata__.format must be a string/],
    ];
    for (const [bytes, message] of cases) {
      expect(() => readPetParams(bytes), String(message)).toThrow(PetFormatError);
      expect(() => readPetParams(bytes), String(message)).toThrow(message);
    }
  });

  it('the file reader rejects wrong dtypes and missing metadata too', () => {
    const path = join(dir, 'f16.safetensors');
    writeSafetensors(path, { a: { dtype: 'f16', shape: [2], data: new Uint16Array(2) } }, meta());
    expect(() => readPetParamsFile(path)).toThrow(/dtype f16/);
    const plain = join(dir, 'plain.safetensors');
    writeSafetensors(plain, { a: { dtype: 'f32', shape: [1], data: new Float32Array(1) } });
    expect(() => readPetParamsFile(plain)).toThrow(/no __metadata__/);
    expect(() => readPetParamsFile(join(dir, 'missing.safetensors'))).toThrow(PetFormatError);
  });

  it('refuses to write tensors whose data does not match their dtype and shape', () => {
    const params = generatePetParams('standard', config, { seed: 1 });
    const bad = { ...params, tensors: new Map([...params.tensors, ['x', { dtype: 'i32' as const, shape: [3], data: new Int32Array(2) }]]) };
    expect(() => writePetParams(bad)).toThrow(PetShapeError);
    expect(() => writePetParamsFile(join(dir, 'bad.safetensors'), bad)).toThrow(/x: expected a Int32Array of 3/);
  });
});

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { SafetensorsFile, writeSafetensors } from '@tessera/engine';
import { fromHalfBits, toHalfBits } from '@tessera/native';
import { describe, expect, it } from 'vitest';

import { convertToBf16 } from '../src/recipe.js';

describe('convertToBf16', () => {
  it('rounds every f32 tensor to bf16, keeps other dtypes and the metadata', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'fortunes-bf16-')), 'w.safetensors');
    const w = Float32Array.from({ length: 24 }, (_, i) => Math.sin(i) * 3.3 + 1e-3 * i);
    const ids = Int32Array.from([1, -2, 3]);
    writeSafetensors(path, [['a.weight', { dtype: 'f32', shape: [4, 6], data: w }], ['ids', { dtype: 'i32', shape: [3], data: ids }]], { format: 'pt' });
    convertToBf16(path);
    const f = SafetensorsFile.open(path);
    try {
      expect(f.metadata).toEqual({ format: 'pt' });
      expect(f.info('a.weight')).toMatchObject({ dtype: 'bf16', shape: [4, 6] });
      expect(f.info('ids')).toMatchObject({ dtype: 'i32', shape: [3] });
      const bits = f.readHost('a.weight') as Uint16Array;
      expect(Array.from(bits)).toEqual(Array.from(toHalfBits(w, 'bf16')));
      const back = fromHalfBits(bits, 'bf16');
      for (let i = 0; i < w.length; i++) expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual(Math.abs(w[i]!) * 2 ** -8);
      expect(Array.from(f.readHost('ids') as Int32Array)).toEqual([1, -2, 3]);
    } finally {
      f.close();
    }
  });
});

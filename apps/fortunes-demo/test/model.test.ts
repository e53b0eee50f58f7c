/**
 * The committed weights (apps/fortunes-demo/model): they load as the server loads them, every tensor is bf16, the
 * whole demo stays under 25 MB, and a greedy completion of a fixed prompt is the same on every run, for the base
 * and for an adapter. Nothing is trained here.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

import {
  generateBatch,
  LoraDelta,
  loadDecoder,
  loadLoraAdapter,
  PagedKvCache,
  SafetensorsFile,
  TextTokenizer,
} from '@tessera/engine';
import { describe, expect, it } from 'vitest';

import { DEMO_OUT_DIR } from '../src/cli.js';
import { DEFAULT_LORA_CATEGORIES, DEMO_MODEL_NAME } from '../src/recipe.js';

const modelDir = join(DEMO_OUT_DIR, DEMO_MODEL_NAME);
const adaptersDir = join(DEMO_OUT_DIR, 'adapters');
const PROMPT = 'The meaning of life is';

function bytesUnder(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? bytesUnder(join(dir, e.name)) : statSync(join(dir, e.name)).size;
  return n;
}

function dtypes(path: string): Set<string> {
  const f = SafetensorsFile.open(path);
  try {
    return new Set(f.names().map((n) => f.info(n).dtype));
  } finally {
    f.close();
  }
}

describe('the committed fortunes demo', () => {
  it('holds the bf16 base model and one bf16 PEFT adapter per default category, under 25 MB in all', () => {
    expect(readdirSync(adaptersDir).sort()).toEqual([...DEFAULT_LORA_CATEGORIES].sort());
    expect(dtypes(join(modelDir, 'model.safetensors'))).toEqual(new Set(['bf16']));
    expect(JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')).torch_dtype).toBe('bfloat16');
    for (const c of DEFAULT_LORA_CATEGORIES) {
      expect(dtypes(join(adaptersDir, c, 'adapter_model.safetensors'))).toEqual(new Set(['bf16']));
      expect(JSON.parse(readFileSync(join(adaptersDir, c, 'adapter_config.json'), 'utf8'))).toMatchObject({ peft_type: 'LORA', task_type: 'CAUSAL_LM' });
    }
    expect(bytesUnder(DEMO_OUT_DIR)).toBeLessThan(25 * 1024 * 1024);
  });

  it('loads, and completes a fixed prompt greedily the same way every time, with and without an adapter', () => {
    const model = loadDecoder(modelDir);
    const tokenizer = TextTokenizer.fromDir(modelDir);
    const adapters = new Map(DEFAULT_LORA_CATEGORIES.map((c) => [c, loadLoraAdapter(join(adaptersDir, c), { base: model.config, name: c })]));
    const complete = () => {
      const cache = PagedKvCache.create({ ...model.kvShape, numPages: 64 });
      try {
        const prompt = tokenizer.encode(PROMPT);
        return generateBatch(model, [{ prompt, maxTokens: 24 }, { prompt, maxTokens: 24, key: 'science' }, { prompt, maxTokens: 24, key: 'songs-poems' }], {
          cache, deltas: [new LoraDelta(adapters)], decode: (ids) => tokenizer.decode(ids),
        }).map((r) => r.text);
      } finally {
        cache.dispose();
      }
    };
    try {
      const first = complete();
      expect(complete()).toEqual(first);
      for (const text of first) {
        expect(text.length).toBeGreaterThan(0);
        // Trained, not byte soup: mostly letters, spaces and ordinary punctuation.
        const plain = text.match(/[A-Za-z ,.'\n]/g)?.length ?? 0;
        expect(plain / text.length).toBeGreaterThan(0.8);
      }
    } finally {
      for (const a of adapters.values()) a.dispose();
      model.dispose();
    }
  });
});

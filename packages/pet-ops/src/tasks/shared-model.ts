/**
 * The shared pre-trained encoder of one tag, loaded once whatever the task count (pets.md §3.3). Its device bytes
 * are counted once against the budget; MaskBert and BitFit read host copies of its weights at task load.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { type EncoderConfig, EncoderModel, ModelTensors, SafetensorsFile, TextTokenizer, type TensorSource, loadEncoder } from '@tessera/engine';
import type { Backend } from '@tessera/native';
import { allocationBytes } from '../operators/base.js';
import type { SharedModel } from '../types.js';

/** Where a shared model comes from: a HF model directory, or a config plus a weights file/directory. */
export type SharedModelSource = { dir: string } | { config: EncoderConfig; weights: string; tokenizer?: TextTokenizer | null };

export class SharedEncoder implements SharedModel {
  readonly tag: string;
  readonly config: EncoderConfig;
  readonly model: EncoderModel;
  readonly tokenizer: TextTokenizer | null;
  readonly bytes: number;
  private readonly hostCache = new Map<string, Float32Array>();

  constructor(tag: string, model: EncoderModel, tokenizer: TextTokenizer | null) {
    this.tag = tag;
    this.model = model;
    this.config = model.config;
    this.tokenizer = tokenizer;
    let bytes = 0;
    for (const t of model.weights.tensors.values()) bytes += allocationBytes(t.nbytes);
    this.bytes = bytes;
  }

  /** Loads the model's weights onto `backend`. */
  static load(tag: string, source: SharedModelSource, backend: Backend): SharedEncoder {
    if ('dir' in source) {
      const model = loadEncoder(source.dir, { backend });
      try {
        const tokenizer = existsSync(join(source.dir, 'tokenizer.json')) ? TextTokenizer.fromDir(source.dir) : null;
        return new SharedEncoder(tag, model, tokenizer);
      } catch (err) {
        model.dispose();
        throw err;
      }
    }
    const isDir = statSync(source.weights, { throwIfNoEntry: false })?.isDirectory() ?? false;
    const tensors: TensorSource & { close(): void } = isDir ? ModelTensors.open(source.weights) : SafetensorsFile.open(source.weights);
    try {
      return new SharedEncoder(tag, EncoderModel.fromSource(source.config, tensors, backend), source.tokenizer ?? null);
    } finally {
      tensors.close();
    }
  }

  hostWeight(name: string): Float32Array {
    let w = this.hostCache.get(name);
    if (!w) {
      w = this.model.weights.hostF32(name);
      this.hostCache.set(name, w);
    }
    return w;
  }

  dispose(): void {
    this.hostCache.clear();
    this.model.dispose();
  }
}

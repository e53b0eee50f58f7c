/**
 * Checkpoints: the trainable params and the AdamW moments in one safetensors file, with the loop's position in its
 * metadata, so a resumed run continues bit for bit where an uninterrupted one would be.
 *
 * Tensors: `<param name>` (the f32 value), `optimizer.exp_avg.<param name>`, `optimizer.exp_avg_sq.<param name>`
 * (PyTorch's AdamW state names). Metadata `tessera.train` (JSON): step, optimiser t, sampler epoch and cursor,
 * LoRA dropout draws, the trainable spec and seed (checked on resume).
 */
import { SafetensorsFile, type SafetensorsEntry, writeSafetensors } from '../formats/safetensors.js';
import type { AdamW } from './optim.js';
import type { BatchSampler } from './data.js';
import type { TrainableModel } from './trainable.js';
import { TrainConfigError } from './errors.js';

export const CHECKPOINT_METADATA_KEY = 'tessera.train';

export interface CheckpointState {
  step: number;
  optimizerStep: number;
  epoch: number;
  cursor: number;
  dropoutDraws: number;
  maskDraws?: number;
  spec: unknown;
  seed: number;
}

export interface CheckpointParts {
  trainable: TrainableModel<unknown, unknown>;
  optimizer: AdamW;
  sampler: BatchSampler;
  step: number;
  seed: number;
}

export function saveCheckpoint(path: string, parts: CheckpointParts): void {
  const { trainable, optimizer, sampler } = parts;
  const entries: Array<[string, SafetensorsEntry]> = [];
  trainable.params.forEach((p, i) => {
    const shape = p.value.shape;
    entries.push([p.name, { dtype: 'f32', shape, data: p.value.toArray() as Float32Array }]);
    entries.push([`optimizer.exp_avg.${p.name}`, { dtype: 'f32', shape, data: optimizer.m[i]!.toArray() as Float32Array }]);
    entries.push([`optimizer.exp_avg_sq.${p.name}`, { dtype: 'f32', shape, data: optimizer.v[i]!.toArray() as Float32Array }]);
  });
  const state: CheckpointState = {
    step: parts.step,
    optimizerStep: optimizer.t,
    epoch: sampler.epoch,
    cursor: sampler.cursor,
    dropoutDraws: trainable.dropoutDraws,
    ...(trainable.maskDraws === undefined ? {} : { maskDraws: trainable.maskDraws }),
    spec: trainable.spec,
    seed: parts.seed,
  };
  writeSafetensors(path, entries, { format: 'pt', [CHECKPOINT_METADATA_KEY]: JSON.stringify(state) });
}

/**
 * Restores params, moments and positions from `path` into a trainer built with the same model, trainable spec and
 * seed. Everything is checked (names, shapes, spec) before anything is written. Returns the saved state.
 */
export function loadCheckpoint(path: string, parts: Omit<CheckpointParts, 'step'>): CheckpointState {
  const file = SafetensorsFile.open(path);
  try {
    const raw = file.metadata[CHECKPOINT_METADATA_KEY];
    if (raw === undefined) throw new TrainConfigError(`${path}: not a training checkpoint (no ${CHECKPOINT_METADATA_KEY} metadata)`);
    const state = JSON.parse(raw) as CheckpointState;
    const { trainable, optimizer, sampler } = parts;
    if (JSON.stringify(state.spec) !== JSON.stringify(trainable.spec)) {
      throw new TrainConfigError(`${path}: saved for trainable set ${JSON.stringify(state.spec)}, not ${JSON.stringify(trainable.spec)}`);
    }
    if (state.seed !== parts.seed) throw new TrainConfigError(`${path}: saved with seed ${state.seed}, not ${parts.seed}`);
    const names = trainable.params.flatMap((p) => [p.name, `optimizer.exp_avg.${p.name}`, `optimizer.exp_avg_sq.${p.name}`]);
    const shapes = trainable.params.flatMap((p) => [p.value.shape, p.value.shape, p.value.shape]);
    names.forEach((n, i) => {
      if (!file.has(n)) throw new TrainConfigError(`${path}: lacks ${n}`);
      const info = file.info(n);
      if (info.dtype !== 'f32' || info.shape.join() !== shapes[i]!.join()) {
        throw new TrainConfigError(`${path}: ${n} is ${info.dtype} [${info.shape.join(', ')}], expected f32 [${shapes[i]!.join(', ')}]`);
      }
    });
    if (file.names().length !== names.length) throw new TrainConfigError(`${path}: holds ${file.names().length} tensors, expected ${names.length}`);
    trainable.params.forEach((p, i) => {
      p.value.write(file.readHost(p.name) as Float32Array);
      optimizer.m[i]!.write(file.readHost(`optimizer.exp_avg.${p.name}`) as Float32Array);
      optimizer.v[i]!.write(file.readHost(`optimizer.exp_avg_sq.${p.name}`) as Float32Array);
    });
    optimizer.t = state.optimizerStep;
    sampler.seek(state.epoch, state.cursor);
    trainable.dropoutDraws = state.dropoutDraws;
    if (state.maskDraws !== undefined) trainable.maskDraws = state.maskDraws;
    return state;
  } finally {
    file.close();
  }
}

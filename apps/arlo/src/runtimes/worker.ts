/**
 * One runtime instance's worker thread: loads the model once and runs batches at its static shape. Native: our
 * encoder with `padTo` = the length (every sequence takes `length` rows through the linear layers, attention reads
 * only its own tokens). ORT: one graph exported per length with [maxBatch, length] baked in (ARCHITECTURE.md
 * decision 1), sessions cached per length so a swap back is instant. Both with one intra-op thread, so two
 * instances run side by side on two cores. Messages: infer, retarget, measure (the profiler), and close.
 */
import { parentPort, workerData } from 'node:worker_threads';

import { serializeError } from '@tessera/core';
import { type EncoderConfig, exportEncoderOnnx, loadEncoder, ModelTensors, OrtModel, readHfConfig, runEncoderOrt } from '@tessera/engine';

import type { RuntimeKind } from './runtime.js';

export type RuntimeWorkerInit = { kind: RuntimeKind; modelDir: string; length: number; maxBatch: number };

export type RuntimeRequest =
  | { type: 'infer'; id: number; ids: number[][] }
  | { type: 'retarget'; id: number; length: number }
  | { type: 'measure'; id: number; length: number; batch: number };

export type RuntimeReply =
  | { type: 'ready'; numLabels: number; vocabSize: number; maxPositions: number }
  | { type: 'init-failed'; error: ReturnType<typeof serializeError> }
  | { type: 'done'; id: number; logits: Float32Array | null; numLabels: number; execMs: number }
  | { type: 'failed'; id: number; error: ReturnType<typeof serializeError> };

/** Runs `ids` padded to `length`; returns the logits of each sequence, concatenated. */
type Runner = (ids: number[][], length: number) => Promise<Float32Array>;

async function nativeRunner(modelDir: string): Promise<Runner> {
  const model = loadEncoder(modelDir);
  return async (ids, length) => {
    const out = model.forward(
      ids.map((s) => ({ ids: s })),
      { padTo: length, outputs: { hidden: false, pooled: false, logits: true } },
    );
    try {
      return out.logits!.toArray() as Float32Array;
    } finally {
      out.logits?.dispose();
    }
  };
}

async function ortRunner(modelDir: string, config: EncoderConfig, maxBatch: number): Promise<Runner> {
  const tensors = ModelTensors.open(modelDir);
  const weights = (name: string): Float32Array => {
    const data = tensors.readHost(name);
    return data instanceof Float32Array ? data : Float32Array.from(data as ArrayLike<number>);
  };
  const sessions = new Map<number, OrtModel>();
  const session = async (length: number): Promise<OrtModel> => {
    let s = sessions.get(length);
    if (s === undefined) {
      s = await OrtModel.create(exportEncoderOnnx(config, weights, { batch: maxBatch, seq: length }), { threads: 1 });
      sessions.set(length, s);
    }
    return s;
  };
  return async (ids, length) => {
    // runEncoderOrt pads each row to the graph's static seq and fills the static batch with padding rows.
    const { logits } = await runEncoderOrt(await session(length), ids, undefined, { padTokenId: config.padTokenId });
    const n = logits![0]!.length;
    const flat = new Float32Array(ids.length * n);
    logits!.forEach((row, b) => flat.set(row, b * n));
    return flat;
  };
}

const port = parentPort!;
const init = workerData as RuntimeWorkerInit;
try {
  const config = readHfConfig(init.modelDir);
  if (config.family !== 'encoder' || config.architecture !== 'BertForSequenceClassification') {
    throw new Error(`${init.modelDir} is a ${config.architecture}; Arlo serves a BertForSequenceClassification encoder`);
  }
  const run = init.kind === 'native' ? await nativeRunner(init.modelDir) : await ortRunner(init.modelDir, config, init.maxBatch);
  let length = init.length;
  await run([[config.padTokenId]], length); // warm up (and, for ORT, build the first session) before ready
  const numLabels = config.numLabels;
  port.on('message', (msg: RuntimeRequest) => {
    void (async () => {
      try {
        if (msg.type === 'retarget') {
          await run([[config.padTokenId]], msg.length);
          length = msg.length;
          port.postMessage({ type: 'done', id: msg.id, logits: null, numLabels, execMs: 0 } satisfies RuntimeReply);
          return;
        }
        const ids = msg.type === 'infer' ? msg.ids : Array.from({ length: msg.batch }, (_, b) => Array.from({ length: msg.length }, (_, t) => (b * 31 + t * 7) % config.vocabSize));
        const start = performance.now();
        const logits = await run(ids, msg.type === 'infer' ? length : msg.length);
        const execMs = performance.now() - start;
        const reply: RuntimeReply = { type: 'done', id: msg.id, logits: msg.type === 'infer' ? logits : null, numLabels, execMs };
        port.postMessage(reply, reply.logits ? [reply.logits.buffer as ArrayBuffer] : []);
      } catch (err) {
        port.postMessage({ type: 'failed', id: msg.id, error: serializeError(err) } satisfies RuntimeReply);
      }
    })();
  });
  port.postMessage({ type: 'ready', numLabels, vocabSize: config.vocabSize, maxPositions: config.maxPositions } satisfies RuntimeReply);
} catch (err) {
  port.postMessage({ type: 'init-failed', error: serializeError(err) } satisfies RuntimeReply);
  port.close(); // nothing else keeps the thread alive: it exits
}

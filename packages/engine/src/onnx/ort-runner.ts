/**
 * onnxruntime-node sessions for the exported models: the baselines' runtime and the engine's independent
 * numerics oracle. onnxruntime-node is imported lazily, so importing @tessera/engine never loads its binary.
 *
 * ORT's Node binding ignores `freeDimensionOverrides`; a static shape lives in the graph itself (export with
 * `{ batch, seq }`). The typed helpers read those dims from the session and pad / chunk to fit them.
 */
import { InvalidArgumentError } from '@tessera/native';
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';

type Ort = typeof import('onnxruntime-node');

/** A graph input: int64 ids/masks or f32 data, row-major in `dims`. */
export interface OrtFeed {
  data: BigInt64Array | Float32Array;
  dims: readonly number[];
}

/** A graph output as plain host arrays. */
export interface OrtOutput {
  data: Float32Array | BigInt64Array;
  dims: number[];
}

export interface OrtModelOptions {
  /** intraOpNumThreads (default 2, the project machines' core count). */
  threads?: number;
}

export class OrtModel {
  #session: InferenceSession | null;
  readonly #ort: Ort;
  /** Each input's dims as the graph declares them: numbers are static, strings symbolic. */
  readonly inputDims: ReadonlyMap<string, readonly (number | string)[]>;
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];

  private constructor(ort: Ort, session: InferenceSession) {
    this.#ort = ort;
    this.#session = session;
    this.inputNames = [...session.inputNames];
    this.outputNames = [...session.outputNames];
    this.inputDims = new Map(session.inputMetadata.map((m) => [m.name, m.isTensor ? [...m.shape] : []]));
  }

  /** A CPU session over ModelProto bytes, graph optimisation level 'all', sequential, `threads` intra-op threads. */
  static async create(bytes: Uint8Array, options: OrtModelOptions = {}): Promise<OrtModel> {
    const threads = options.threads ?? 2;
    if (!(Number.isInteger(threads) && threads >= 1)) throw new InvalidArgumentError(`OrtModel: threads must be a positive integer, got ${threads}`);
    const ort = await import('onnxruntime-node');
    const session = await ort.InferenceSession.create(bytes, {
      executionProviders: ['cpu'],
      graphOptimizationLevel: 'all',
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      executionMode: 'sequential',
    });
    return new OrtModel(ort, session);
  }

  /**
   * Runs the graph on `feeds` (one per graph input) and returns every output. The binding runs the session
   * synchronously on the calling thread (behind a setImmediate), so keep it off an HTTP event loop.
   */
  async run(feeds: Readonly<Record<string, OrtFeed>>): Promise<Record<string, OrtOutput>> {
    const session = this.#session;
    if (session === null) throw new InvalidArgumentError('OrtModel.run: the session was released');
    const ortFeeds: Record<string, OrtTensor> = {};
    for (const [name, feed] of Object.entries(feeds)) {
      const type = feed.data instanceof BigInt64Array ? 'int64' : 'float32';
      ortFeeds[name] = new this.#ort.Tensor(type, feed.data, [...feed.dims]);
    }
    const results = await session.run(ortFeeds);
    const out: Record<string, OrtOutput> = {};
    for (const [name, value] of Object.entries(results)) {
      const data = value.data;
      if (!(data instanceof Float32Array || data instanceof BigInt64Array)) {
        throw new InvalidArgumentError(`OrtModel.run: output ${name} has type ${value.type}; only float32 and int64 outputs are read`);
      }
      out[name] = { data, dims: [...value.dims] };
    }
    return out;
  }

  /** Frees the native session; later runs throw. Idempotent. */
  async release(): Promise<void> {
    const session = this.#session;
    this.#session = null;
    await session?.release();
  }
}

/** Static batch / seq of a [batch, seq] input, or null where the dim is symbolic. */
function staticDims(model: OrtModel, input: string): { batch: number | null; seq: number | null } {
  const dims = model.inputDims.get(input);
  if (dims === undefined) throw new InvalidArgumentError(`OrtModel: the graph has no input ${input} (inputs: ${model.inputNames.join(', ')})`);
  const [b, s] = dims;
  return { batch: typeof b === 'number' ? b : null, seq: typeof s === 'number' ? s : null };
}

function checkIds(ids: readonly (readonly number[])[], what: string): void {
  ids.forEach((row, r) => {
    if (row.length === 0) throw new InvalidArgumentError(`${what}: sequence ${r} is empty`);
    row.forEach((id, t) => {
      if (!Number.isSafeInteger(id) || id < 0) throw new InvalidArgumentError(`${what}: sequence ${r} position ${t} has id ${id}, not a non-negative integer`);
    });
  });
}

/**
 * Splits `count` rows into runs of the static batch (or one run), and picks each run's padded length: the static
 * seq, or the longest row of the run.
 */
function* chunks(
  lengths: readonly number[],
  fixed: { batch: number | null; seq: number | null },
  what: string,
): Generator<{ start: number; rows: number; batch: number; seq: number }> {
  const longest = Math.max(...lengths);
  if (fixed.seq !== null && longest > fixed.seq) {
    throw new InvalidArgumentError(`${what}: a sequence of ${longest} tokens does not fit the model's static seq ${fixed.seq}`);
  }
  const step = fixed.batch ?? lengths.length;
  for (let start = 0; start < lengths.length; start += step) {
    const rows = Math.min(step, lengths.length - start);
    const seq = fixed.seq ?? Math.max(...lengths.slice(start, start + rows));
    yield { start, rows, batch: fixed.batch ?? rows, seq };
  }
}

function float32Output(out: Record<string, OrtOutput>, name: string): OrtOutput & { data: Float32Array } {
  const o = out[name];
  if (o === undefined) throw new InvalidArgumentError(`OrtModel: the graph returned no output ${name}`);
  if (!(o.data instanceof Float32Array)) throw new InvalidArgumentError(`OrtModel: output ${name} is not float32`);
  return o as OrtOutput & { data: Float32Array };
}

export interface EncoderOrtResult {
  /** Per sequence, its real positions only: [length, hidden] row-major. */
  lastHidden: Float32Array[];
  /** Per sequence [hidden] (BertForSequenceClassification only). */
  pooler?: Float32Array[];
  /** Per sequence [numLabels] (BertForSequenceClassification only). */
  logits?: Float32Array[];
}

/**
 * Runs an exported encoder over ragged sequences: right-pads each run to a common length with `padTokenId`
 * (attention_mask 0 there, token type 0), fills a static batch with all-padding rows, and returns each
 * sequence's outputs. Masked keys get weight exactly 0, so padding never changes the real positions.
 */
export async function runEncoderOrt(
  model: OrtModel,
  ids: readonly (readonly number[])[],
  tokenTypes?: readonly (readonly number[])[],
  options: { padTokenId?: number } = {},
): Promise<EncoderOrtResult> {
  const what = 'runEncoderOrt';
  checkIds(ids, what);
  if (tokenTypes !== undefined) {
    if (tokenTypes.length !== ids.length) throw new InvalidArgumentError(`${what}: ${tokenTypes.length} token type rows for ${ids.length} sequences`);
    tokenTypes.forEach((row, r) => {
      if (row.length !== ids[r]!.length) throw new InvalidArgumentError(`${what}: sequence ${r} has ${ids[r]!.length} ids but ${row.length} token types`);
    });
    checkIds(tokenTypes, `${what} (token types)`);
  }
  const pad = BigInt(options.padTokenId ?? 0);
  const withHead = model.outputNames.includes('logits');
  const result: EncoderOrtResult = { lastHidden: [], ...(withHead ? { pooler: [], logits: [] } : {}) };
  if (ids.length === 0) return result;

  for (const run of chunks(
    ids.map((r) => r.length),
    staticDims(model, 'input_ids'),
    what,
  )) {
    const n = run.batch * run.seq;
    const inputIds = new BigInt64Array(n).fill(pad);
    const mask = new BigInt64Array(n);
    const types = new BigInt64Array(n);
    for (let r = 0; r < run.rows; r++) {
      const row = ids[run.start + r]!;
      const typeRow = tokenTypes?.[run.start + r];
      for (let t = 0; t < row.length; t++) {
        inputIds[r * run.seq + t] = BigInt(row[t]!);
        mask[r * run.seq + t] = 1n;
        types[r * run.seq + t] = BigInt(typeRow?.[t] ?? 0);
      }
    }
    const dims = [run.batch, run.seq];
    const out = await model.run({
      input_ids: { data: inputIds, dims },
      attention_mask: { data: mask, dims },
      token_type_ids: { data: types, dims },
    });
    const hidden = float32Output(out, 'last_hidden_state');
    const h = hidden.dims[2]!;
    for (let r = 0; r < run.rows; r++) {
      const len = ids[run.start + r]!.length;
      result.lastHidden.push(hidden.data.slice(r * run.seq * h, (r * run.seq + len) * h));
    }
    if (withHead) {
      const pooled = float32Output(out, 'pooler_output');
      const logits = float32Output(out, 'logits');
      const ph = pooled.dims[1]!;
      const labels = logits.dims[1]!;
      for (let r = 0; r < run.rows; r++) {
        result.pooler!.push(pooled.data.slice(r * ph, (r + 1) * ph));
        result.logits!.push(logits.data.slice(r * labels, (r + 1) * labels));
      }
    }
  }
  return result;
}

/**
 * Runs an exported decoder over ragged sequences, right-padded with `padTokenId` (causal attention keeps
 * padding out of every real position). Returns per sequence its logits [length, vocab] row-major.
 */
export async function runDecoderBatchOrt(
  model: OrtModel,
  ids: readonly (readonly number[])[],
  options: { padTokenId?: number } = {},
): Promise<Float32Array[]> {
  const what = 'runDecoderOrt';
  checkIds(ids, what);
  const pad = BigInt(options.padTokenId ?? 0);
  const result: Float32Array[] = [];
  if (ids.length === 0) return result;
  for (const run of chunks(
    ids.map((r) => r.length),
    staticDims(model, 'input_ids'),
    what,
  )) {
    const inputIds = new BigInt64Array(run.batch * run.seq).fill(pad);
    for (let r = 0; r < run.rows; r++) {
      const row = ids[run.start + r]!;
      for (let t = 0; t < row.length; t++) inputIds[r * run.seq + t] = BigInt(row[t]!);
    }
    const logits = float32Output(await model.run({ input_ids: { data: inputIds, dims: [run.batch, run.seq] } }), 'logits');
    const vocab = logits.dims[2]!;
    for (let r = 0; r < run.rows; r++) {
      const len = ids[run.start + r]!.length;
      result.push(logits.data.slice(r * run.seq * vocab, (r * run.seq + len) * vocab));
    }
  }
  return result;
}

/** Logits [ids.length, vocab] row-major of one sequence. */
export async function runDecoderOrt(model: OrtModel, ids: readonly number[], options: { padTokenId?: number } = {}): Promise<Float32Array> {
  const [logits] = await runDecoderBatchOrt(model, [ids], options);
  return logits!;
}

/**
 * The engine worker thread: everything that touches the model runs here, off the HTTP event loop. The engine
 * itself (model, KV cache, adapter cache, SGMV delta, batcher) is assembled by stack.ts, which a cluster worker
 * process uses too; this file adds the thread's message loop, request bookkeeping and adapter unloading.
 *
 * The batcher's `run()` loop yields between steps, so messages (submit, cancel, admin) are handled between two
 * engine steps. Events are batched per step and posted in order (see protocol.ts).
 */
import { parentPort, workerData } from 'node:worker_threads';

import { UnknownAdapterError } from '@tessera/adapter-swap';

import {
  type AdapterStatus,
  type AdminCall,
  type EngineEventMessage,
  type EngineStats,
  type FromWorker,
  type SubmitRequest,
  type ToWorker,
  type WorkerInit,
  serializeError,
} from './protocol.js';
import { buildEngineStack, duplicateAdapter } from './stack.js';

const port = parentPort;
if (!port) throw new Error('worker.ts runs as the engine worker thread (started by EngineClient), not as a script');
const init = workerData as WorkerInit;

function post(msg: FromWorker): void {
  port!.postMessage(msg);
}

// Events of one step are collected and posted together, in order, once the step's synchronous work is done.
let outbox: EngineEventMessage[] = [];
function emit(ev: EngineEventMessage): void {
  if (outbox.length === 0) queueMicrotask(flush);
  outbox.push(ev);
}
function flush(): void {
  if (outbox.length === 0) return;
  const events = outbox;
  outbox = [];
  post({ type: 'events', events });
}

/** A request the batcher holds: its adapter (for unload and the lora metrics) and how many tokens it produced. */
interface LiveRequest {
  adapter: string | null;
  promptTokens: number;
  generated: number;
}

async function start() {
  const stack = buildEngineStack(init);
  const { model, kv, cache, batcher } = stack;

  cache.on('load-start', ({ name, from }) => emit({ kind: 'adapter-load-start', name, from }));
  cache.on('loaded', ({ name, ms, bytes }) => emit({ kind: 'adapter-loaded', name, seconds: ms / 1000, bytes }));
  cache.on('load-failed', ({ name, error }) => emit({ kind: 'adapter-load-failed', name, error: serializeError(error) }));
  cache.on('evicted', ({ name, tier, reason }) => emit({ kind: 'adapter-evicted', name, tier, reason }));

  const live = new Map<string, LiveRequest>();
  /** Adapters being unloaded: new requests for them are refused; the unregister waits for their live requests. */
  const unloading = new Map<string, (() => void)[]>();

  /** Reads the adapter once (validating it against the model) and registers it; refused while it is unloading. */
  async function register(name: string, path: string): Promise<AdapterStatus> {
    if (unloading.has(name)) throw duplicateAdapter(name);
    return stack.register(name, path);
  }
  const status = (name: string) => stack.status(name);

  function usersOf(name: string): number {
    let n = 0;
    for (const r of live.values()) if (r.adapter === name) n++;
    return n;
  }

  function settleUnloads(): void {
    for (const [name, waiters] of unloading) {
      if (usersOf(name) > 0) continue;
      unloading.delete(name);
      for (const w of waiters) w();
    }
  }

  function submit(request: SubmitRequest): void {
    const { id } = request;
    try {
      if (request.adapter !== null && (!cache.has(request.adapter) || unloading.has(request.adapter))) {
        throw new UnknownAdapterError(request.adapter);
      }
      const entry: LiveRequest = { adapter: request.adapter, promptTokens: request.prompt.length, generated: 0 };
      live.set(id, entry);
      batcher.submit(
        {
          id,
          adapter: request.adapter,
          prompt: request.prompt,
          maxTokens: request.maxTokens,
          sampling: request.sampling,
          stop: request.stop,
          ignoreEos: request.ignoreEos,
        },
        {
          onToken(token, text) {
            entry.generated++;
            emit({ kind: 'token', id, token, text });
          },
          onFinish(result) {
            if (!live.delete(id)) return;
            emit({ kind: 'finish', id, result: { ...result, tokens: [...result.tokens] } });
            settleUnloads();
          },
          onError(err) {
            if (!live.delete(id)) return;
            emit({ kind: 'error', id, error: serializeError(err) });
            settleUnloads();
          },
        },
      );
    } catch (err) {
      live.delete(id);
      emit({ kind: 'error', id, error: serializeError(err) });
    }
  }

  function cancel(id: string): void {
    const entry = live.get(id);
    if (!entry) return;
    batcher.cancel(id);
    // The batcher may or may not report a cancelled finish itself; either way the request ends exactly once.
    if (live.delete(id)) {
      emit({
        kind: 'finish',
        id,
        result: { id, tokens: [], text: '', finishReason: 'cancelled', promptTokens: entry.promptTokens, completionTokens: entry.generated },
      });
      settleUnloads();
    }
  }

  let lastSteps = 0;
  let lastHistogram = new Map<number, number>();
  function stats(): EngineStats {
    const b = batcher.stats();
    const kvStats = kv.stats();
    const c = cache.stats();
    // Adapters of requests that produced a token (in the running batch) and of those still waiting for admission.
    const running = new Set<string>();
    const waiting = new Set<string>();
    for (const r of live.values()) {
      if (r.adapter === null) continue;
      (r.generated > 0 ? running : waiting).add(r.adapter);
    }
    // Batch sizes since the previous call, from the batcher's cumulative histogram (sequences per step → steps).
    const batchSizes: number[] = [];
    for (const [size, count] of b.batchSizeHistogram) {
      for (let i = lastHistogram.get(size) ?? 0; i < count; i++) batchSizes.push(size);
    }
    lastHistogram = new Map(b.batchSizeHistogram);
    const steps = b.steps - lastSteps;
    lastSteps = b.steps;
    return {
      running: b.running,
      waiting: b.queued,
      runningAdapters: [...running].sort(),
      waitingAdapters: [...waiting].sort(),
      kv: { usedPages: kvStats.usedPages, numPages: kvStats.numPages, sequences: kvStats.sequences, bytesPerPage: kvStats.bytesPerPage },
      adapters: {
        registered: c.registered,
        residentCount: c.residentCount,
        residentBytes: c.residentBytes,
        deviceBudgetBytes: c.deviceBudgetBytes,
        hostCount: c.hostCount,
        hostBytes: c.hostBytes,
        hits: c.hits,
        misses: c.misses,
        loads: c.loads,
        loadFailures: c.loadFailures,
        deviceEvictions: c.deviceEvictions,
        hostEvictions: c.hostEvictions,
      },
      steps,
      batchSizes,
      preemptions: b.preemptions,
    };
  }

  const abort = new AbortController();
  let shuttingDown = false;
  /** The step loop; started once the model and the start-up adapters are ready. */
  let running: Promise<void> = Promise.resolve();

  async function admin(call: AdminCall): Promise<unknown> {
    switch (call.op) {
      case 'load-adapter':
        return register(call.name, call.path);
      case 'unload-adapter': {
        if (!cache.has(call.name) || unloading.has(call.name)) {
          throw new UnknownAdapterError(call.name);
        }
        await new Promise<void>((resolve) => {
          unloading.set(call.name, [resolve]);
          settleUnloads();
        });
        await stack.unregister(call.name);
        return null;
      }
      case 'adapters':
        return cache.names().map(status);
      case 'stats':
        return stats();
      case 'shutdown': {
        shuttingDown = true;
        abort.abort();
        await running;
        for (const id of [...live.keys()]) cancel(id);
        flush();
        stack.dispose();
        return null;
      }
    }
  }

  port!.on('message', (msg: ToWorker) => {
    switch (msg.type) {
      case 'submit':
        submit(msg.request);
        break;
      case 'cancel':
        cancel(msg.id);
        break;
      case 'exit':
        // Between two steps, so no native call is in flight (terminating a thread inside one aborts the process).
        process.exit(msg.code);
        break;
      case 'admin':
        admin(msg.call).then(
          (value) => {
            flush();
            post({ type: 'reply', callId: msg.callId, ok: true, value });
          },
          (err: unknown) => {
            flush();
            post({ type: 'reply', callId: msg.callId, ok: false, error: serializeError(err) });
          },
        );
        break;
    }
  });

  // Every start-up adapter is read once and checked against the model, concurrently (the reads are async I/O).
  // All reads settle before an unusable one fails start-up, naming it, so no read is left in flight.
  const outcomes = await Promise.allSettled(init.adapters.map(({ name, path }) => register(name, path)));
  outcomes.forEach((outcome, i) => {
    if (outcome.status === 'fulfilled') return;
    const { name, path } = init.adapters[i]!;
    const e = serializeError(outcome.reason);
    throw Object.assign(new Error(`start-up adapter ${JSON.stringify(name)} (${path}) is not usable: ${e.message}`), { code: e.code, adapter: name });
  });

  post({
    type: 'ready',
    model: {
      dir: init.modelDir,
      architecture: model.config.architecture,
      maxPositions: model.config.maxPositions,
      vocabSize: model.config.vocabSize,
      numLayers: model.config.numLayers,
      hiddenSize: model.config.hiddenSize,
      device: model.backend.device,
      kvPages: kv.numPages,
    },
    adapters: cache.names().map(status),
  });

  running = batcher.run(abort.signal).catch((err: unknown) => {
    if (shuttingDown) return;
    flush();
    post({ type: 'fatal', error: serializeError(err) });
    process.exit(1);
  });
}

start().catch((err: unknown) => {
  post({ type: 'init-failed', error: serializeError(err) });
  // From JS, with nothing in flight: ending the thread here is safe for the native addon.
  process.exit(1);
});

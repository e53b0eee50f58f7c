/**
 * batcherEngine: an {@link EngineLoop} (scheduler + runner) as a {@link HostEngine}. Placements become requests
 * that resume after their `generated` tokens; the loop's listener callbacks become {@link HostEvent}s with
 * absolute token indices. Behind a cluster scheduler the loop is built with `kvExhaustion: 'evict'`, so KV
 * exhaustion drops the newest request and reports it (the scheduler migrates it); a single host may keep the
 * default 'requeue' (it recomputes the request itself and never emits 'evicted').
 *
 * It also knows which requests it holds and their adapters, so an admin can retire an adapter safely: new
 * placements on it are refused at once, the ones in flight finish, then it is released (unregistered).
 */
import { type Clock, systemClock, UnknownAdapterError } from '@tessera/core';
import { serializeError } from '../errors.js';
import type { HostEngine, HostEventSink, HostLoad, Placement } from '../types.js';
import type { EngineLoop } from './engine-loop.js';

/** What batcherEngine needs of a loop (EngineLoop has it). */
export type HostableLoop = Pick<EngineLoop, 'submit' | 'cancel' | 'stats'>;

export interface BatcherEngineOptions {
  /**
   * Registered adapters and device residency (an AdapterCache), for load reports; omitted = none reported. With
   * `has`, a placement on an adapter it does not know is refused with UnknownAdapterError.
   */
  adapters?: { names(): string[]; isResident(name: string): boolean; has?(name: string): boolean };
  /** For the load report's `at`; default systemClock. */
  clock?: Clock;
}

/** A request the engine holds: its placement's attempt, its adapter, and the tokens it produced in this placement. */
export interface HeldRequest {
  id: string;
  attempt: number;
  adapter: string | null;
  tokens: number;
}

/** The loop's queues and steps for a server's metrics (a sample drains the step record since the previous one). */
export interface HostSample {
  running: number;
  waiting: number;
  /** Distinct adapters of the requests that produced a token (in the running batch), and of those still waiting. */
  runningAdapters: string[];
  waitingAdapters: string[];
  /** Steps, and the rows (sequences) of each step, since the previous sample. */
  steps: number;
  batchSizes: number[];
  /** Preemptions so far (cumulative). */
  preemptions: number;
}

/** A HostEngine over a loop, with what an admin needs besides placements. */
export interface BatcherHostEngine extends HostEngine {
  sample(): HostSample;
  /** The requests held (queued or running), in submission order. */
  requests(): HeldRequest[];
  /**
   * Retires an adapter: placements on it are refused (UnknownAdapterError) from now on, `release` runs once no
   * held request uses it (it unregisters the adapter), and then the name is free again. Rejects with `release`'s error.
   */
  retire(adapter: string, release: () => Promise<void> | void): Promise<void>;
  /** True while `adapter` is being retired. */
  retiring(adapter: string): boolean;
}

export function batcherEngine(batcher: HostableLoop, options: BatcherEngineOptions = {}): BatcherHostEngine {
  const clock = options.clock ?? systemClock;
  /** Placements the batcher holds, by id. */
  const held = new Map<string, HeldRequest>();
  /** Adapters being retired → the waiters for their last request to end. */
  const retiring = new Map<string, (() => void)[]>();
  const settle = () => {
    for (const [adapter, waiters] of retiring) {
      if ([...held.values()].some((r) => r.adapter === adapter)) continue;
      retiring.set(adapter, []);
      for (const w of waiters) w();
    }
  };

  let lastSteps = 0;
  let lastHistogram = new Map<number, number>();

  return {
    submit(placement: Placement, sink: HostEventSink): void {
      const { request, generated, attempt } = placement;
      const { id, adapter } = request;
      if (adapter !== null && (retiring.has(adapter) || options.adapters?.has?.(adapter) === false)) throw new UnknownAdapterError(adapter);
      let next = generated.length;
      // Added before submit: a synchronous callback (none today) would find it; removed again if submit throws.
      const entry: HeldRequest = { id, attempt, adapter, tokens: 0 };
      held.set(id, entry);
      const leave = () => {
        if (held.get(id) !== entry) return;
        held.delete(id);
        if (retiring.size > 0) settle();
      };
      try {
        batcher.submit(
          {
            id,
            adapter: request.adapter,
            prompt: request.prompt,
            maxTokens: request.maxTokens,
            sampling: request.sampling,
            stop: request.stop,
            ignoreEos: request.ignoreEos,
            generated,
            ...(request.logprobs !== undefined ? { logprobs: request.logprobs } : {}),
          },
          {
            onToken: (token, text, logprobs) => {
              entry.tokens++;
              sink(logprobs ? { kind: 'token', id, attempt, index: next++, token, text, logprobs } : { kind: 'token', id, attempt, index: next++, token, text });
            },
            onFinish: (result) => {
              leave();
              sink({ kind: 'finish', id, attempt, result: { ...result, tokens: [...result.tokens] } });
            },
            onError: (err) => {
              leave();
              sink({ kind: 'error', id, attempt, error: serializeError(err) });
            },
            onEvicted: (tokens) => {
              leave();
              sink({ kind: 'evicted', id, attempt, generated: tokens });
            },
          },
        );
      } catch (err) {
        leave();
        throw err;
      }
    },

    cancel(id: string): boolean {
      return batcher.cancel(id);
    },

    requests: () => [...held.values()].map((r) => ({ ...r })),

    sample(): HostSample {
      const s = batcher.stats();
      const running = new Set<string>();
      const waiting = new Set<string>();
      for (const r of held.values()) if (r.adapter !== null) (r.tokens > 0 ? running : waiting).add(r.adapter);
      // Batch sizes since the previous sample, from the loop's cumulative histogram (sequences per step → steps).
      const batchSizes: number[] = [];
      for (const [size, count] of s.batchSizeHistogram) for (let i = lastHistogram.get(size) ?? 0; i < count; i++) batchSizes.push(size);
      lastHistogram = new Map(s.batchSizeHistogram);
      const steps = s.steps - lastSteps;
      lastSteps = s.steps;
      const sorted = (set: Set<string>) => [...set].sort();
      return { running: s.running, waiting: s.queued, runningAdapters: sorted(running), waitingAdapters: sorted(waiting), steps, batchSizes, preemptions: s.preemptions };
    },

    retiring: (adapter) => retiring.has(adapter),

    async retire(adapter, release) {
      if (retiring.has(adapter)) throw new UnknownAdapterError(adapter);
      await new Promise<void>((resolve) => {
        retiring.set(adapter, [resolve]);
        settle();
      });
      try {
        await release();
      } finally {
        retiring.delete(adapter);
      }
    },

    load(): Omit<HostLoad, 'hostId'> {
      const s = batcher.stats();
      const adapters = options.adapters;
      const names = adapters ? adapters.names().sort() : [];
      return {
        maxBatch: s.maxBatch,
        kvPages: s.kvPagesFree + s.kvPagesUsed,
        pageTokens: s.kvPageTokens,
        // Headroom of one page per running decode: those pages will be taken as the decodes grow, so a request
        // placed into them would only be evicted again.
        freeKvPages: s.kvPagesFree - s.queuedInputPages - s.running,
        requests: [...held.values()].map(({ id, attempt }) => ({ id, attempt })),
        adapters: names,
        residentAdapters: adapters ? names.filter((n) => adapters.isResident(n)) : [],
        steps: s.steps,
        tokens: s.tokensGenerated,
        at: clock.now(),
      };
    },
  };
}

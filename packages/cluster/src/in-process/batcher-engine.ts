/**
 * batcherEngine: an {@link EngineLoop} (scheduler + runner) as a {@link HostEngine}. Placements become requests
 * that resume after their `generated` tokens; the loop's listener callbacks become {@link HostEvent}s with
 * absolute token indices. Behind a cluster scheduler the loop is built with `kvExhaustion: 'evict'`, so KV
 * exhaustion drops the newest request and reports it (the scheduler migrates it); a single host may keep the
 * default 'requeue' (it recomputes the request itself and never emits 'evicted').
 */
import { type Clock, systemClock } from '@tessera/core';
import { serializeError } from '../errors.js';
import type { HostEngine, HostEventSink, HostLoad, Placement } from '../types.js';
import type { EngineLoop } from './engine-loop.js';

/** What batcherEngine needs of a loop (EngineLoop has it). */
export type HostableLoop = Pick<EngineLoop, 'submit' | 'cancel' | 'stats'>;

export interface BatcherEngineOptions {
  /** Registered adapters and device residency (an AdapterCache), for load reports; omitted = none reported. */
  adapters?: { names(): string[]; isResident(name: string): boolean };
  /** For the load report's `at`; default systemClock. */
  clock?: Clock;
}

export function batcherEngine(batcher: HostableLoop, options: BatcherEngineOptions = {}): HostEngine {
  const clock = options.clock ?? systemClock;
  /** Placements the batcher holds: id → attempt. */
  const held = new Map<string, number>();

  return {
    submit(placement: Placement, sink: HostEventSink): void {
      const { request, generated, attempt } = placement;
      const { id } = request;
      let next = generated.length;
      // Added before submit: a synchronous callback (none today) would find it; removed again if submit throws.
      held.set(id, attempt);
      const leave = () => {
        if (held.get(id) === attempt) held.delete(id);
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
          },
          {
            onToken: (token, text) => sink({ kind: 'token', id, attempt, index: next++, token, text }),
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
        requests: [...held].map(([id, attempt]) => ({ id, attempt })),
        adapters: names,
        residentAdapters: adapters ? names.filter((n) => adapters.isResident(n)) : [],
        steps: s.steps,
        tokens: s.tokensGenerated,
        at: clock.now(),
      };
    },
  };
}

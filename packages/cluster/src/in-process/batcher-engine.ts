/**
 * batcherEngine: a ContinuousBatcher as a {@link HostEngine}. Placements become batcher requests that resume
 * after their `generated` tokens; batcher callbacks become {@link HostEvent}s with absolute token indices. The
 * batcher must be built with `kvExhaustion: 'evict'`, so KV exhaustion drops the newest request and reports it
 * (the scheduler migrates it) instead of requeueing it on this host.
 */
import type { ContinuousBatcher } from '@tessera/batcher';
import { type Clock, systemClock } from '@tessera/engine';
import { PAGE_SIZE } from '@tessera/native';
import { ClusterArgumentError, serializeError } from '../errors.js';
import type { HostEngine, HostEventSink, HostLoad, Placement } from '../types.js';

export interface BatcherEngineOptions {
  /** Registered adapters and device residency (an AdapterCache), for load reports; omitted = none reported. */
  adapters?: { names(): string[]; isResident(name: string): boolean };
  /** For the load report's `at`; default systemClock. */
  clock?: Clock;
}

export function batcherEngine(batcher: ContinuousBatcher, options: BatcherEngineOptions = {}): HostEngine {
  if (batcher.kvExhaustion !== 'evict') {
    throw new ClusterArgumentError("batcherEngine: the batcher must be built with kvExhaustion: 'evict' (the scheduler re-places evicted requests)");
  }
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
        pageTokens: PAGE_SIZE,
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

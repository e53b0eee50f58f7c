/**
 * Arlo's Prometheus metrics, sampled from the service when /metrics is scraped (server-kit adds the process and
 * HTTP metrics): per-runtime queue lengths and served requests, per-instance utilisation (busy time over wall
 * time since start), padding waste (padded-but-not-real tokens over all padded tokens), the dispatcher's demotions
 * and the current allocation.
 */
import { CumulativeTotals, defineMetrics } from '@tessera/server-kit';
import type { Registry } from 'prom-client';

import type { ArloService } from './service.js';

export function arloMetrics(registry: Registry, service: ArloService) {
  const m = defineMetrics(registry, {
    queue: { type: 'gauge', name: 'arlo_runtime_queue_length', help: 'Outstanding requests (queued plus running) per runtime length.', labels: ['runtime'] },
    allocated: { type: 'gauge', name: 'arlo_runtime_instances', help: 'Instances serving each runtime length (active).', labels: ['runtime'] },
    requests: { type: 'counter', name: 'arlo_requests_total', help: 'Requests run, by the runtime length they ran on.', labels: ['runtime'] },
    utilisation: { type: 'gauge', name: 'arlo_instance_utilisation', help: 'Busy time over wall time since start, per instance.', labels: ['instance', 'runtime', 'kind'] },
    outstanding: { type: 'gauge', name: 'arlo_instance_outstanding', help: 'Outstanding requests per instance.', labels: ['instance'] },
    tokens: { type: 'counter', name: 'arlo_tokens_total', help: 'Tokens run: real (the requests) and padded (what the runtimes computed).', labels: ['kind'] },
    waste: { type: 'gauge', name: 'arlo_padding_waste_ratio', help: '1 − real / padded tokens, since start.' },
    demoted: { type: 'counter', name: 'arlo_demoted_total', help: 'Requests dispatched above their ideal runtime.' },
  });
  const totals = new CumulativeTotals();
  return {
    collect: async () => {
      const elapsed = Math.max(1e-9, service.uptimeMs());
      const queue = new Array<number>(service.lengths.length).fill(0);
      const active = new Array<number>(service.lengths.length).fill(0);
      m.utilisation.reset();
      for (const inst of service.instances()) {
        queue[inst.runtime]! += inst.outstanding;
        if (inst.state === 'active') active[inst.runtime]!++;
        m.utilisation.set({ instance: inst.id, runtime: String(inst.length), kind: inst.kind }, inst.busyMs / elapsed);
        m.outstanding.set({ instance: inst.id }, inst.outstanding);
      }
      service.lengths.forEach((length, i) => {
        const runtime = String(length);
        m.queue.set({ runtime }, queue[i]!);
        m.allocated.set({ runtime }, active[i]!);
        totals.advance(m.requests, service.totals.requests[i]!, { runtime });
      });
      const { realTokens, paddedTokens } = service.totals;
      totals.advance(m.tokens, realTokens, { kind: 'real' });
      totals.advance(m.tokens, paddedTokens, { kind: 'padded' });
      m.waste.set(paddedTokens === 0 ? 0 : 1 - realTokens / paddedTokens);
      totals.advance(m.demoted, service.dispatcher.stats.demoted);
    },
  };
}

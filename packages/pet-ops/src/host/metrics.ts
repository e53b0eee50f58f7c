/**
 * PetS's Prometheus metrics for a served PetsHost, on a prom-client registry. The classify latency is observed by
 * the server (it sees requests end); everything about batching, engine time and memory comes from the host's
 * stats, sampled when the registry is scraped (its batch and plan records are drained, counters advance by them).
 *
 *   tessera_pets_classify_seconds                              classify latency (window wait + batch)
 *   tessera_pets_queries_classified_total                      queries (texts) answered
 *   tessera_pets_macro_batches_total                           macro-batches run
 *   tessera_pets_macro_batch_queries / _segments / _tasks      per macro-batch: rows, PET segments, distinct tasks
 *   tessera_pets_macro_batch_seconds                           per macro-batch engine time
 *   tessera_pets_plans_total{strategy}                         windows planned, by the strategy used ('auto' picks)
 *   tessera_pets_engine_seconds_total{part="pet"|"shared"}     engine time split (pets.md §8.5's breakdown)
 *   tessera_pets_pet_time_share                                PET time / engine time, since start
 *   tessera_pets_rows_total, tessera_pets_padding_rows_total   token rows computed, and those that were padding
 *   tessera_pets_tasks{state="registered"|"loaded"}            tasks registered (loaded ones included), loaded
 *   tessera_pets_device_bytes{kind="shared"|"pet"}, tessera_pets_device_budget_bytes
 *   tessera_pets_pending_queries                               queries waiting in the window or its batches
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

import type { PetsHostStats } from './types.js';

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10];
const SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const COUNT_BUCKETS = [1, 2, 3, 4, 6, 8, 12, 16, 32];
export const PLAN_STRATEGIES = ['cb', 'alpha-only', 'beta-only', 'fixed'] as const;

export class PetsHostMetrics {
  readonly classifySeconds: Histogram;
  readonly queriesClassified: Counter;
  readonly macroBatches: Counter;
  readonly macroBatchQueries: Histogram;
  readonly macroBatchSegments: Histogram;
  readonly macroBatchTasks: Histogram;
  readonly macroBatchSeconds: Histogram;
  readonly plans: Counter<'strategy'>;
  readonly engineSeconds: Counter<'part'>;
  readonly petTimeShare: Gauge;
  readonly rows: Counter;
  readonly paddingRows: Counter;
  readonly tasks: Gauge<'state'>;
  readonly deviceBytes: Gauge<'kind'>;
  readonly budgetBytes: Gauge;
  readonly pendingQueries: Gauge;
  private lastClassified = 0;
  private petMs = 0;
  private totalMs = 0;

  constructor(registry: Registry) {
    const registers = [registry];
    this.classifySeconds = new Histogram({ name: 'tessera_pets_classify_seconds', help: 'Classify latency in the engine: the batch window wait plus the macro-batches.', buckets: LATENCY_BUCKETS, registers });
    this.queriesClassified = new Counter({ name: 'tessera_pets_queries_classified_total', help: 'Queries (texts) classified.', registers });
    this.macroBatches = new Counter({ name: 'tessera_pets_macro_batches_total', help: 'Macro-batches run by the PET inference engine.', registers });
    this.macroBatchQueries = new Histogram({ name: 'tessera_pets_macro_batch_queries', help: 'Queries (rows) per macro-batch.', buckets: SIZE_BUCKETS, registers });
    this.macroBatchSegments = new Histogram({ name: 'tessera_pets_macro_batch_segments', help: 'PET segments (mini-batches) per macro-batch.', buckets: COUNT_BUCKETS, registers });
    this.macroBatchTasks = new Histogram({ name: 'tessera_pets_macro_batch_tasks', help: 'Distinct tasks per macro-batch (more than 1: inter-task batching).', buckets: COUNT_BUCKETS, registers });
    this.macroBatchSeconds = new Histogram({ name: 'tessera_pets_macro_batch_seconds', help: 'Engine time per macro-batch.', buckets: LATENCY_BUCKETS, registers });
    this.plans = new Counter({ name: 'tessera_pets_plans_total', help: 'Batch windows planned, by the strategy used (the one auto picked, under --strategy auto).', labelNames: ['strategy'], registers });
    this.engineSeconds = new Counter({ name: 'tessera_pets_engine_seconds_total', help: 'Engine time in PET operators and in shared operators.', labelNames: ['part'], registers });
    this.petTimeShare = new Gauge({ name: 'tessera_pets_pet_time_share', help: 'PET operator time / engine time since start (0 before the first batch).', registers });
    this.rows = new Counter({ name: 'tessera_pets_rows_total', help: 'Token rows the shared operators computed (padding included).', registers });
    this.paddingRows = new Counter({ name: 'tessera_pets_padding_rows_total', help: 'Token rows that were padding.', registers });
    this.tasks = new Gauge({ name: 'tessera_pets_tasks', help: 'Tasks registered (loaded ones included), and loaded.', labelNames: ['state'], registers });
    this.deviceBytes = new Gauge({ name: 'tessera_pets_device_bytes', help: 'Device bytes of the shared model and of the loaded tasks.', labelNames: ['kind'], registers });
    this.budgetBytes = new Gauge({ name: 'tessera_pets_device_budget_bytes', help: 'The device budget (--budget-mb).', registers });
    this.pendingQueries = new Gauge({ name: 'tessera_pets_pending_queries', help: 'Queries waiting in the batch window or its planned batches.', registers });
    // Series that should read 0 before the first event, rather than being absent.
    for (const strategy of PLAN_STRATEGIES) this.plans.inc({ strategy }, 0);
    for (const part of ['pet', 'shared']) this.engineSeconds.inc({ part }, 0);
  }

  /** One classify answered: submit → results, the batch window's wait included. */
  observeClassify(seconds: number): void {
    this.classifySeconds.observe(seconds);
  }

  /** The host's stats (PetsHost.stats(), sampled at scrape time): counters advance by the drained records. */
  onStats(s: PetsHostStats): void {
    this.queriesClassified.inc(Math.max(0, s.queriesClassified - this.lastClassified));
    this.lastClassified = s.queriesClassified;
    for (const b of s.batches) {
      this.macroBatches.inc();
      this.macroBatchQueries.observe(b.queries);
      this.macroBatchSegments.observe(b.segments);
      this.macroBatchTasks.observe(b.tasks);
      this.macroBatchSeconds.observe(b.totalMs / 1000);
      this.engineSeconds.inc({ part: 'pet' }, b.petMs / 1000);
      this.engineSeconds.inc({ part: 'shared' }, b.sharedMs / 1000);
      this.rows.inc(b.rows);
      this.paddingRows.inc(b.paddingRows);
      this.petMs += b.petMs;
      this.totalMs += b.totalMs;
    }
    this.petTimeShare.set(this.totalMs > 0 ? this.petMs / this.totalMs : 0);
    for (const p of s.plans) this.plans.inc({ strategy: p.strategy });
    const m = s.memory;
    this.tasks.set({ state: 'registered' }, m.registeredTasks);
    this.tasks.set({ state: 'loaded' }, m.loadedTasks);
    this.deviceBytes.set({ kind: 'shared' }, m.sharedBytes);
    this.deviceBytes.set({ kind: 'pet' }, m.petBytes);
    this.budgetBytes.set(m.budgetBytes);
    this.pendingQueries.set(s.pendingQueries);
  }
}

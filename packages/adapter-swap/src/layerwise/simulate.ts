/**
 * `LayerwisePipeline` under virtual time: batches arrive, each resource runs what the pipeline hands it for as long
 * as `durationMs(action)` says, and the timeline comes back. Used by the tests (the A12 invariants on random
 * durations, the orderings of Table 6's ablations) and by benchmarks that replay measured stage times.
 */
import { InvalidArgumentError } from '@tessera/core';

import { LayerwisePipeline, type LayerwisePipelineOptions, type PipelineAction, type PipelineResource, PipelineStateError } from './pipeline.js';

export interface PipelineSimulationOptions extends LayerwisePipelineOptions {
  /** Batch arrival times (ms, non-decreasing); a batch is submitted when it arrives. */
  arrivalsMs: readonly number[];
  /** How long an action takes (ms, ≥ 0). */
  durationMs(action: PipelineAction): number;
}

export interface PipelineSpan {
  action: PipelineAction;
  startMs: number;
  endMs: number;
}

export interface PipelineSimulationResult {
  /** Every action in the order it started. */
  spans: PipelineSpan[];
  /** When the last batch finished its last layer. */
  makespanMs: number;
  /** Per batch: arrival to the end of its last layer. */
  latencyMs: number[];
  /** Busy time per resource. */
  busyMs: Record<PipelineResource, number>;
}

const RESOURCES: readonly PipelineResource[] = ['cpu', 'copy', 'compute'];

export function simulateLayerwisePipeline(options: PipelineSimulationOptions): PipelineSimulationResult {
  const { arrivalsMs, durationMs } = options;
  for (let i = 0; i < arrivalsMs.length; i++) {
    const t = arrivalsMs[i]!;
    if (!(Number.isFinite(t) && t >= 0) || (i > 0 && t < arrivalsMs[i - 1]!)) {
      throw new InvalidArgumentError(`arrivalsMs must be finite, >= 0 and non-decreasing; entry ${i} is ${t}`);
    }
  }
  const pipeline = new LayerwisePipeline(options);
  const spans: PipelineSpan[] = [];
  const busyMs: Record<PipelineResource, number> = { cpu: 0, copy: 0, compute: 0 };
  const endOf: Record<PipelineResource, number> = { cpu: Infinity, copy: Infinity, compute: Infinity };
  const running: Record<PipelineResource, PipelineSpan | null> = { cpu: null, copy: null, compute: null };
  const finishMs = new Array<number>(arrivalsMs.length).fill(NaN);
  let submitted = 0;
  let now = 0;
  for (;;) {
    while (submitted < arrivalsMs.length && arrivalsMs[submitted]! <= now) {
      pipeline.submit();
      submitted++;
    }
    // Start whatever may start now, until nothing changes (a start never enables another start at the same time,
    // but a resource may take work the moment it is idle).
    for (const r of RESOURCES) {
      if (running[r] !== null) continue;
      const action = pipeline.next(r);
      if (action === null) continue;
      const d = durationMs(action);
      if (!(Number.isFinite(d) && d >= 0)) throw new InvalidArgumentError(`durationMs returned ${d} for ${action.kind} of batch ${action.batch}`);
      const span = { action, startMs: now, endMs: now + d };
      spans.push(span);
      running[r] = span;
      endOf[r] = span.endMs;
      busyMs[r] += d;
    }
    const nextArrival = submitted < arrivalsMs.length ? arrivalsMs[submitted]! : Infinity;
    const nextEnd = Math.min(endOf.cpu, endOf.copy, endOf.compute);
    if (nextEnd === Infinity && nextArrival === Infinity) break;
    now = Math.min(nextEnd, nextArrival);
    // Completions at `now`, in a fixed resource order so the result never depends on anything but the inputs.
    for (const r of RESOURCES) {
      const span = running[r];
      if (span === null || span.endMs > now) continue;
      running[r] = null;
      endOf[r] = Infinity;
      pipeline.complete(span.action);
      if (span.action.kind === 'compute' && span.action.layer === options.layers - 1) finishMs[span.action.batch] = now;
    }
  }
  if (pipeline.inFlight > 0) throw new PipelineStateError(`the pipeline stalled with ${pipeline.inFlight} batch(es) in flight`);
  return {
    spans,
    makespanMs: arrivalsMs.length === 0 ? 0 : Math.max(...finishMs),
    latencyMs: finishMs.map((f, b) => f - arrivalsMs[b]!),
    busyMs,
  };
}


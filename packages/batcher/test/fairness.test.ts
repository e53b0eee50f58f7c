/**
 * Issue 19, "fairness across tenants": with S-LoRA's virtual token counter a flooding tenant cannot starve a light
 * one. A fake runner, 4 rows per step; tenant "flood" submits 120 requests at once, tenant "light" one request
 * every 10 steps. Under FCFS the light tenant's queueing delay grows with the flood's backlog; under VTC it stays
 * bounded by a few requests' service, whatever the backlog. Plus the counter's rules in isolation.
 */
import { KvPageAllocator } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import { type FairnessPolicy, Scheduler, VirtualTokenCounter } from '../src/index.js';
import { fakeRun } from './support/fake-runner.js';

const limits = { vocabSize: 100, maxPositions: 4096 };

/** Steps each light request waited between its submit and its prefill, and the flood's completions meanwhile. */
function lightTenantWaits(fairness: FairnessPolicy) {
  const scheduler = new Scheduler({ pages: new KvPageAllocator(256), limits, maxBatch: 4, fairness });
  const produced = new Map<string, number>();
  const maxTokens = new Map<string, number>();
  const submitted = new Map<string, number>();
  const waits: number[] = [];
  const submit = (id: string, adapter: string, step: number) => {
    maxTokens.set(id, 8);
    submitted.set(id, step);
    scheduler.submit({ id, adapter, prompt: [1, 2, 3, 4, 5, 6, 7, 8], maxTokens: 8 });
  };
  for (let i = 0; i < 120; i++) submit(`flood${i}`, 'flood', 0);
  let light = 0;
  for (let step = 1; step <= 200; step++) {
    if (step % 10 === 0 && light < 12) submit(`light${light++}`, 'light', step);
    const plan = scheduler.plan();
    if (!plan) break;
    for (const s of plan.sequences) if (s.kind === 'prefill' && s.requestId.startsWith('light')) waits.push(step - submitted.get(s.requestId)!);
    scheduler.complete(fakeRun(plan, produced, maxTokens));
  }
  return waits;
}

describe('Scheduler fairness (VTC)', () => {
  it('bounds a light tenant’s wait under a flood; FCFS makes it wait behind the whole backlog', () => {
    const fcfs = lightTenantWaits('fcfs');
    const vtc = lightTenantWaits('vtc');
    expect(vtc).toHaveLength(12);
    // VTC: admitted at the next free row (or the one after, when a flood request ties its lifted counter): within
    // one request's service time (8 steps), however long the flood's backlog is.
    expect(Math.max(...vtc)).toBeLessThanOrEqual(8);
    // FCFS: every light request waits behind the flood's 120 requests (8 steps each on 4 rows: 240 steps), so none
    // is admitted within the 200 steps.
    expect(fcfs).toEqual([]);
  });

  it('needs the punica policy; weights are validated', () => {
    expect(() => new Scheduler({ pages: new KvPageAllocator(4), limits, policy: 'same-adapter', fairness: 'vtc' })).toThrow(/punica/);
    expect(() => new Scheduler({ pages: new KvPageAllocator(4), limits, fairness: 'lottery' as FairnessPolicy })).toThrow(/fairness/);
    expect(() => new VirtualTokenCounter({ output: -1 })).toThrow(/output/);
  });

  it('counts weighted service; an idle tenant comes back at the smallest active counter, banking no credit', () => {
    const vtc = new VirtualTokenCounter();
    vtc.arrive('a');
    vtc.chargeInput('a', 10);
    vtc.chargeOutput('a', 5);
    expect(vtc.counter('a')).toBe(10 + 2 * 5);
    vtc.arrive('b'); // a is active with 20: b starts at 20, not 0
    expect(vtc.counter('b')).toBe(20);
    vtc.chargeOutput('b', 50);
    vtc.leave('a');
    vtc.arrive('a'); // a comes back while b (120) is active
    expect(vtc.counter('a')).toBe(120);
    vtc.leave('a');
    vtc.leave('b');
    vtc.arrive('c'); // nobody active: c keeps its own (zero) counter
    expect(vtc.counter('c')).toBe(0);
  });
});

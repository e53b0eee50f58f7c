/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { KvPageAllocator, type StepOutcome, type StepPlan } from '@tessera/core';
import { Scheduler, type SchedulerEvent } from '@tessera/batcher';

// 64 KV pages of 16 tokens; a model with a 32k vocabulary and 2k positions.
const pages = new KvPageAllocator(64);
const events: SchedulerEvent[] = [];
const scheduler = new Scheduler({
  pages, limits: { vocabSize: 32000, maxPositions: 2048 }, policy: 'punica', maxBatch: 32,
  onEvent: (e) => events.push(e),
});

// Three tenants (the last on the base model).
for (const [i, adapter] of ['alice', 'bob', null].entries()) {
  scheduler.submit({ id: `req-${i}`, adapter, prompt: [1, 15043, 29892, 3186], maxTokens: 3 });
}

// A toy runner: every sampled sequence gets token 7; a request ends at its third token.
const produced = new Map<string, number>();
const run = (plan: StepPlan): StepOutcome => ({
  ran: true, rows: plan.rows, segments: plan.segments, excluded: [],
  results: plan.sequences.filter((s) => s.kind !== 'wasted').map((s) => {
    const n = (produced.get(s.requestId) ?? 0) + 1;
    produced.set(s.requestId, n);
    return { kind: 'token', requestId: s.requestId, token: 7, text: '', finish: n === 3 ? 'length' : null };
  }),
});

for (let plan = scheduler.plan(); plan !== null; plan = scheduler.plan()) {
  console.log(plan.step, plan.sequences.map((s) => `${s.kind} ${s.requestId}`).join(', '), plan.segments.map((g) => g.key));
  scheduler.complete(run(plan));
}
console.log(events.filter((e) => e.kind === 'finish').map((e) => e.id)); // req-0, req-1, req-2
console.log(scheduler.stats()); // steps, batch-size histogram, tokens, preemptions, KV pages, ...
// #endregion readme-example

describe('README example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const found = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(found).toBe(region);
  });

  it('planned one prefill per step, then decodes; all three finished and every page came back', () => {
    expect(printed[0]).toEqual([1, 'prefill req-0', ['alice']]);
    expect(printed[1]).toEqual([2, 'prefill req-1, decode req-0', ['bob', 'alice']]);
    expect(printed[2]).toEqual([3, 'prefill req-2, decode req-0, decode req-1', [null, 'alice', 'bob']]);
    const finished = printed.find((p) => Array.isArray(p[0]))![0];
    expect(finished).toEqual(['req-0', 'req-1', 'req-2']);
    const stats = printed.at(-1)![0] as ReturnType<typeof scheduler.stats>;
    expect(stats).toMatchObject({ finished: 3, running: 0, queued: 0, kvPagesUsed: 0, tokensGenerated: 9 });
    expect(pages.usedPages).toBe(0);
  });
});

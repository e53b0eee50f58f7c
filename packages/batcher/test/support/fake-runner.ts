/**
 * A runner without a model for Scheduler tests: each sampled row gets token (last input + 1) % 100, and a
 * request finishes at its maxTokens. `produced` counts each request's tokens (those it was submitted with too).
 */
import type { StepOutcome, StepPlan } from '@tessera/core';

export function fakeRun(plan: StepPlan, produced: Map<string, number>, maxTokens: Map<string, number>): StepOutcome {
  const results: StepOutcome['results'][number][] = [];
  for (const s of plan.sequences) {
    if (s.kind === 'wasted') continue;
    const n = (produced.get(s.requestId) ?? 0) + 1;
    produced.set(s.requestId, n);
    results.push({ kind: 'token', requestId: s.requestId, token: (s.tokens[s.tokens.length - 1]! + 1) % 100, text: '', finish: n >= maxTokens.get(s.requestId)! ? 'length' : null });
  }
  return { ran: true, rows: plan.rows, segments: plan.segments, excluded: [], results };
}

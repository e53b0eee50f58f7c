/**
 * SimulatedRunner: a step runner that does no math. It executes a scheduler's StepPlan the way the engine's
 * StepRunner does (one token per sequence, stop at maxTokens or EOS), but its "model" is a formula: the token
 * after position p following token x is {@link simulatedNextToken}(x, p), so every placement of a request (a
 * migrated one is prefilled again on prompt + generated) continues with the very tokens it would have produced
 * unmigrated. The KV pages are the scheduler's: a bare {@link KvPageAllocator} with no memory behind it.
 *
 * Each run records the step's shape ({@link StepShape}) for the latency model.
 */
import { InvalidArgumentError, type ModelLimits, type RowResult, type RunnerRequest, type StepExecutor, type StepOutcome, type StepPlan } from '@tessera/core';
import type { StepShape } from './latency.js';

/** Vocabulary of the simulated model: ids 0..13 are ordinary tokens, 14 is BOS, 15 is EOS. */
export const SIMULATED_VOCAB = 16;
const ORDINARY = SIMULATED_VOCAB - 2;
const EOS = SIMULATED_VOCAB - 1;

/** The token the simulated model emits after `token` at position `position` (0-based, of that token). */
export function simulatedNextToken(token: number, position: number): number {
  return (token * 5 + position + 1) % ORDINARY;
}

/** The tokens a request with this prompt generates (what every placement of it must add up to). */
export function simulatedGeneration(prompt: readonly number[], count: number): number[] {
  const out: number[] = [];
  let token = prompt[prompt.length - 1]!;
  let position = prompt.length - 1;
  for (let i = 0; i < count; i++) {
    token = simulatedNextToken(token, position++);
    out.push(token);
  }
  return out;
}

/** A prompt of ordinary tokens (deterministic in `salt`). */
export function simulatedPrompt(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => (salt + i * 3) % ORDINARY);
}

/** One character per token: the simulated detokenizer. */
export function simulatedDecode(ids: readonly number[]): string {
  let s = '';
  for (const id of ids) s += String.fromCharCode(97 + (id % 26));
  return s;
}

interface SimRequest {
  readonly maxTokens: number;
  readonly ignoreEos: boolean;
  readonly tokens: number[];
}

export class SimulatedRunner implements StepExecutor {
  readonly limits: ModelLimits;
  /** Shape of the last step run (for the latency model). */
  last: StepShape = { batchSize: 0, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
  /** Steps run. */
  forwards = 0;
  private readonly requests = new Map<string, SimRequest>();

  constructor(options: { maxPositions?: number } = {}) {
    this.limits = { vocabSize: SIMULATED_VOCAB, maxPositions: options.maxPositions ?? 1 << 20 };
  }

  /** Keeps the request's stop state; stop strings are not simulated (InvalidArgumentError). */
  open(request: RunnerRequest): void {
    if (this.requests.has(request.id)) throw new InvalidArgumentError(`SimulatedRunner: request ${JSON.stringify(request.id)} is already open`);
    if ((request.stop ?? []).length > 0) throw new InvalidArgumentError('SimulatedRunner: stop strings are not simulated');
    const generated = request.generated ?? [];
    const ignoreEos = request.ignoreEos ?? false;
    if (!ignoreEos && generated.includes(EOS)) throw new InvalidArgumentError('generated tokens already end the request (EOS); nothing is left to generate');
    this.requests.set(request.id, { maxTokens: request.maxTokens, ignoreEos, tokens: [...generated] });
  }

  text(requestId: string): string {
    const r = this.requests.get(requestId);
    return r ? simulatedDecode(r.tokens) : '';
  }

  close(requestId: string): void {
    this.requests.delete(requestId);
  }

  run(plan: StepPlan): StepOutcome {
    const results: RowResult[] = [];
    const shape: StepShape = { batchSize: plan.sequences.length, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
    for (const s of plan.sequences) {
      const end = s.position + s.tokens.length;
      if (s.kind === 'prefill') shape.prefillTokens += s.tokens.length;
      else shape.decodeRows += s.tokens.length;
      shape.kvTokens += end;
      if (s.kind === 'wasted') continue;
      const r = this.requests.get(s.requestId);
      if (!r) {
        results.push({ kind: 'failed', requestId: s.requestId, error: new Error(`SimulatedRunner: request ${JSON.stringify(s.requestId)} was not opened`) });
        continue;
      }
      const token = simulatedNextToken(s.tokens[s.tokens.length - 1]!, end - 1);
      r.tokens.push(token);
      const finish = !r.ignoreEos && token === EOS ? 'eos' : r.tokens.length >= r.maxTokens ? 'length' : null;
      results.push({ kind: 'token', requestId: s.requestId, token, text: String.fromCharCode(97 + (token % 26)), finish });
    }
    this.last = shape;
    this.forwards++;
    return { ran: true, rows: plan.rows, segments: plan.segments, excluded: [], results };
  }
}

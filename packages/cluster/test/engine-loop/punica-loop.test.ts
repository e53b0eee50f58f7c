/**
 * The Punica policy end to end on a tiny generated decoder with real PEFT adapters: token-exact equality with
 * running each request alone (T15), the step anatomy (T12/T13), stopping and KV release (T16), cancellation,
 * validation, and the run() loop.
 */
import { InvalidArgumentError } from '@tessera/native';
import { DecoderModel, type ModelDelta } from '@tessera/engine';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BatcherStateError,
  type BatcherRequest,
  type Clock,
  type FinishedRequest,
  type RequestListener,
  RequestValidationError,
  type StepReport,
} from '@tessera/batcher';
import { makeFixture } from './support/fixtures.js';
import { makeLoop } from './support/loop.js';
import type { EngineLoop } from '../../src/index.js';

const fx = makeFixture(16);
afterAll(() => fx.dispose());
const adapterNames = [...fx.adapterDirs.keys()];

/** Records what each request's listener saw. */
function recorder() {
  const tokens = new Map<string, number[]>();
  const text = new Map<string, string>();
  const finished = new Map<string, FinishedRequest>();
  const errors = new Map<string, Error>();
  const listener = (id: string, extra: Partial<RequestListener> = {}): RequestListener => {
    tokens.set(id, []);
    text.set(id, '');
    return {
      onToken: (t, delta) => {
        tokens.get(id)!.push(t);
        text.set(id, text.get(id)! + delta);
        extra.onToken?.(t, delta);
      },
      onFinish: (r) => finished.set(id, r),
      onError: (e) => errors.set(id, e),
    };
  };
  return { tokens, text, finished, errors, listener };
}

function drain(b: EngineLoop, limit = 2000): StepReport[] {
  const reports: StepReport[] = [];
  for (let r = b.step(); r !== null; r = b.step()) {
    reports.push(r);
    if (reports.length > limit) throw new Error('drain: the batcher did not finish');
  }
  return reports;
}

describe('EngineLoop (punica policy)', () => {
  it('T15: 16 requests on 16 adapters give exactly the greedy tokens each gets alone', () => {
    const cache = fx.newCache(256);
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta], decode: fx.decode });
    const rec = recorder();
    const requests: BatcherRequest[] = adapterNames.map((adapter, i) => ({
      id: `r${i}`,
      adapter,
      prompt: fx.prompt(4 + 3 * i, 500 + i),
      maxTokens: 16 + ((i * 5) % 17),
      ignoreEos: true,
    }));
    for (const r of requests) b.submit(r, rec.listener(r.id));
    const reports = drain(b);

    let differsFromBase = 0;
    for (const r of requests) {
      const want = fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter });
      const got = rec.finished.get(r.id)!;
      expect(got.tokens).toEqual(want);
      expect(rec.tokens.get(r.id)).toEqual(want);
      expect(got).toMatchObject({ finishReason: 'length', promptTokens: r.prompt.length, completionTokens: r.maxTokens });
      if (fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: null }).join() !== want.join()) differsFromBase++;
    }
    // The adapters matter (otherwise equality would prove little).
    expect(differsFromBase).toBeGreaterThanOrEqual(12);
    // All 16 ran together at some point, in 16 distinct segments.
    expect(Math.max(...reports.map((r) => r.batchSize))).toBe(16);
    expect(Math.max(...reports.map((r) => r.segments.length))).toBe(16);
    expect(cache.freePages).toBe(cache.numPages);
    const stats = b.stats();
    expect(stats).toMatchObject({ finished: 16, running: 0, queued: 0, kvPagesUsed: 0, preemptions: 0, wastedRows: 0 });
    expect(stats.tokensGenerated).toBe(requests.reduce((s, r) => s + r.maxTokens, 0));
    expect(stats.promptTokens).toBe(requests.reduce((s, r) => s + r.prompt.length, 0));
    cache.dispose();
  });

  it('T12/T13: one layout per step, at most one prefill, prefill rows first, one contiguous segment per adapter', () => {
    const cache = fx.newCache(128);
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta] });
    const rec = recorder();
    const mix = [adapterNames[2]!, null, adapterNames[0]!, adapterNames[2]!, null, adapterNames[1]!, adapterNames[0]!];
    const requests = mix.map((adapter, i) => ({
      id: `m${i}`,
      adapter,
      prompt: fx.prompt(3 + 2 * i, 700 + i),
      maxTokens: i === 0 ? 12 : 5 + ((3 * i) % 8),
      ignoreEos: true,
    }));
    const byId = new Map(requests.map((r) => [r.id, r]));
    // m0's 9th token arrives in step 9, after all seven were admitted (steps 1..7): a request submitted then
    // must join in step 10, not in the step in flight.
    let lateSubmittedInStep = -1;
    const submitLate = () => {
      if (rec.tokens.get('m0')!.length !== 9) return;
      lateSubmittedInStep = b.stats().steps + 1;
      b.submit({ id: 'late', adapter: adapterNames[1]!, prompt: fx.prompt(6, 799), maxTokens: 4, ignoreEos: true }, rec.listener('late'));
    };
    for (const r of requests) b.submit(r, rec.listener(r.id, r.id === 'm0' ? { onToken: submitLate } : {}));

    const reports: StepReport[] = [];
    const runningAfter: number[] = [];
    for (let r = b.step(); r !== null; r = b.step()) {
      reports.push(r);
      runningAfter.push(b.stats().running);
    }
    expect(b.stats().layoutBuilds).toBe(reports.length);
    expect(lateSubmittedInStep).toBe(9);
    const prompts = new Map([...byId].map(([id, r]) => [id, r.prompt.length]));
    prompts.set('late', 6);
    const admissionOrder: string[] = [];
    reports.forEach((r, k) => {
      expect(r.step).toBe(k + 1);
      expect(r.prefills).toBeLessThanOrEqual(1);
      expect(r.admitted).toHaveLength(r.prefills);
      admissionOrder.push(...r.admitted);
      // Segments tile the rows in order; each adapter (null included) appears in one segment only.
      let at = 0;
      for (const s of r.segments) {
        expect(s.start).toBe(at);
        expect(s.count).toBeGreaterThan(0);
        at += s.count;
      }
      expect(at).toBe(r.rows);
      const keys = r.segments.map((s) => s.key);
      expect(new Set(keys).size).toBe(keys.length);
      const prefillRows = r.admitted.reduce((s, id) => s + prompts.get(id)!, 0);
      expect(r.rows).toBe(prefillRows + r.decodes);
      if (r.prefills === 1) {
        // The prefill's rows come first, in its adapter's segment.
        const adapter = r.admitted[0] === 'late' ? adapterNames[1]! : byId.get(r.admitted[0]!)!.adapter;
        expect(r.segments[0]!.key).toBe(adapter);
        expect(r.segments[0]!.count).toBeGreaterThanOrEqual(prefillRows);
      }
      // Finished requests leave at once: they are not counted as running after their step.
      expect(runningAfter[k]).toBe(r.batchSize - r.finished.length);
      if (k > 0) expect(r.batchSize).toBe(reports[k - 1]!.batchSize - reports[k - 1]!.finished.length + r.prefills);
    });
    // FCFS admission (all adapters resident), one per step; the late request joins on the very next step.
    expect(admissionOrder).toEqual(['m0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6', 'late']);
    expect(reports[lateSubmittedInStep - 1]!.admitted).toEqual([]);
    expect(reports[lateSubmittedInStep]!.admitted).toEqual(['late']);
    for (const r of requests) {
      expect(rec.finished.get(r.id)!.tokens).toEqual(fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter }));
    }
    expect(cache.freePages).toBe(cache.numPages);
    cache.dispose();
  });

  it('T16: stops on EOS, on a stop string and at maxTokens; every KV page comes back', () => {
    const prompt = fx.prompt(9, 41);
    const adapter = adapterNames[3]!;
    const ref = fx.alone({ prompt, maxTokens: 24, ignoreEos: true, key: adapter });
    // EOS: make a token the greedy run produces (not earlier in it) the model's EOS id.
    const at = ref.findIndex((t, i) => i >= 2 && !ref.slice(0, i).includes(t));
    expect(at).toBeGreaterThan(0);
    const eosModel = new DecoderModel({ ...fx.model.config, eosTokenIds: [ref[at]!] }, fx.model.weights);
    const cache = fx.newCache(64);
    const b = makeLoop({ model: eosModel, cache, deltas: [fx.delta], decode: fx.decode });
    const rec = recorder();
    b.submit({ id: 'eos', adapter, prompt, maxTokens: 24 }, rec.listener('eos'));
    b.submit({ id: 'ignore', adapter, prompt, maxTokens: 24, ignoreEos: true }, rec.listener('ignore'));
    b.submit({ id: 'short', adapter, prompt, maxTokens: at }, rec.listener('short'));
    drain(b);
    expect(rec.finished.get('eos')).toMatchObject({ finishReason: 'eos', tokens: ref.slice(0, at + 1), completionTokens: at + 1 });
    expect(rec.finished.get('ignore')).toMatchObject({ finishReason: 'length', tokens: ref });
    expect(rec.finished.get('short')).toMatchObject({ finishReason: 'length', tokens: ref.slice(0, at) });
    expect(cache.freePages).toBe(cache.numPages);

    // A stop string: the text is cut before it, and the streamed text deltas add up to the final text.
    const b2 = makeLoop({ model: fx.model, cache, deltas: [fx.delta], decode: fx.decode });
    const full = fx.decode(ref);
    expect(full.length).toBeGreaterThan(8);
    const stop = full.slice(4, 7);
    b2.submit({ id: 'stop', adapter, prompt, maxTokens: 24, ignoreEos: true, stop: [stop] }, rec.listener('stop'));
    drain(b2);
    const stopped = rec.finished.get('stop')!;
    expect(stopped.finishReason).toBe('stop');
    expect(stopped.text).toBe(full.slice(0, full.indexOf(stop)));
    expect(rec.text.get('stop')).toBe(stopped.text);
    expect(stopped.tokens).toEqual(ref.slice(0, stopped.tokens.length));
    expect(stopped.tokens.length).toBeLessThan(24);
    expect(cache.freePages).toBe(cache.numPages);
    cache.dispose();
  });

  it('cancel frees a queued or running request at once (also from inside a listener) and reports cancelled', () => {
    const cache = fx.newCache(64);
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta] });
    const rec = recorder();
    const req = (id: string, i: number): BatcherRequest => ({ id, adapter: adapterNames[i]!, prompt: fx.prompt(20, 60 + i), maxTokens: 30, ignoreEos: true });
    b.submit(req('a', 0), rec.listener('a'));
    b.submit(req('b', 1), rec.listener('b', { onToken: () => rec.tokens.get('b')!.length === 3 && b.cancel('b') }));
    b.submit(req('c', 2), rec.listener('c'));
    b.submit(req('d', 3), rec.listener('d'));
    expect(b.step()!.admitted).toEqual(['a']);
    // d is queued: cancelling it changes no page and it never runs.
    expect(b.cancel('d')).toBe(true);
    expect(rec.finished.get('d')).toMatchObject({ finishReason: 'cancelled', tokens: [], completionTokens: 0 });
    expect(b.stats().queued).toBe(2);
    b.step();
    b.step();
    const used = cache.usedPages;
    expect(used).toBe(3 * 2); // a, b, c: 21..22 tokens each, two pages
    // a is running: its pages are free the moment cancel returns.
    expect(b.cancel('a')).toBe(true);
    expect(cache.usedPages).toBe(used - 2);
    expect(rec.finished.get('a')!.finishReason).toBe('cancelled');
    expect(rec.finished.get('a')!.tokens).toEqual(rec.tokens.get('a'));
    expect(rec.tokens.get('a')).toHaveLength(3);
    expect(b.cancel('a')).toBe(false);
    expect(b.cancel('nobody')).toBe(false);
    // b cancels itself from onToken at its 3rd token (step 4): applied when that step returns.
    const r4 = b.step()!;
    expect(r4.batchSize).toBe(2);
    expect(rec.finished.get('b')).toMatchObject({ finishReason: 'cancelled', completionTokens: 3 });
    expect(cache.usedPages).toBe(2);
    drain(b);
    expect(rec.tokens.get('b')).toHaveLength(3);
    expect(rec.finished.get('c')!.finishReason).toBe('length');
    expect(b.stats()).toMatchObject({ cancelled: 3, finished: 1, kvPagesUsed: 0 });
    expect(cache.freePages).toBe(cache.numPages);
    cache.dispose();
  });

  it('a listener that throws cancels its own request only', () => {
    const cache = fx.newCache(64);
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta] });
    const rec = recorder();
    b.submit({ id: 'ok', adapter: null, prompt: fx.prompt(5, 1), maxTokens: 6, ignoreEos: true }, rec.listener('ok'));
    b.submit({ id: 'bad', adapter: null, prompt: fx.prompt(5, 2), maxTokens: 6, ignoreEos: true }, {
      onToken: () => {
        throw new Error('client went away');
      },
      onFinish: (r) => rec.finished.set('bad', r),
    });
    drain(b);
    expect(rec.finished.get('bad')).toMatchObject({ finishReason: 'cancelled', completionTokens: 1 });
    expect(rec.finished.get('ok')!.tokens).toEqual(fx.alone({ prompt: fx.prompt(5, 1), maxTokens: 6, ignoreEos: true, key: null }));
    expect(b.stats()).toMatchObject({ listenerErrors: 1, cancelled: 1, finished: 1, kvPagesUsed: 0 });
    cache.dispose();
  });

  it('a forward that throws fails the requests of that step (onError, pages freed); the batcher goes on', () => {
    const cache = fx.newCache(64);
    // A delta that rejects one adapter key, as SgmvLoraDelta rejects a key it cannot resolve.
    const strict: ModelDelta = {
      linear: (call) => {
        if (call.layout.segments.some((s) => s.key === 'unknown-adapter')) throw new RangeError('no weights for unknown-adapter');
      },
    };
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta, strict] });
    const rec = recorder();
    const ok = (id: string, seed: number): BatcherRequest => ({ id, adapter: adapterNames[0]!, prompt: fx.prompt(5, seed), maxTokens: 6, ignoreEos: true });
    b.submit(ok('before', 1), rec.listener('before'));
    b.submit({ ...ok('bad', 2), adapter: 'unknown-adapter' }, rec.listener('bad'));
    b.submit(ok('after', 3), rec.listener('after'));
    expect(b.step()!.admitted).toEqual(['before']);
    const failing = b.step()!;
    // One forward for the whole batch: the running request in it fails too.
    expect(failing.failed.sort()).toEqual(['bad', 'before']);
    expect(rec.errors.get('bad')).toBeInstanceOf(RangeError);
    expect(rec.errors.get('before')).toBeInstanceOf(RangeError);
    expect(cache.usedPages).toBe(0);
    drain(b);
    expect(rec.finished.get('after')!.tokens).toEqual(fx.alone({ ...ok('after', 3), key: adapterNames[0]! }));
    expect(rec.finished.has('bad')).toBe(false);
    expect(b.stats()).toMatchObject({ failed: 2, finished: 1, kvPagesUsed: 0 });
    cache.dispose();
  });

  it('submit validates: typed errors with a code, and nothing changes', () => {
    const cache = fx.newCache(4); // 64 tokens of KV
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta] });
    const vocab = fx.model.config.vocabSize;
    const ok: BatcherRequest = { id: 'x', adapter: null, prompt: [5, 6, 7], maxTokens: 4 };
    b.submit(ok);
    const cases: [Partial<BatcherRequest>, string][] = [
      [{ id: 'x' }, 'TESSERA_DUPLICATE_REQUEST'],
      [{ id: '' }, 'TESSERA_INVALID_REQUEST'],
      [{ prompt: [] }, 'TESSERA_EMPTY_PROMPT'],
      [{ prompt: [1, vocab] }, 'TESSERA_TOKEN_OUT_OF_VOCAB'],
      [{ prompt: [1, -1] }, 'TESSERA_TOKEN_OUT_OF_VOCAB'],
      [{ prompt: [1.5] }, 'TESSERA_TOKEN_OUT_OF_VOCAB'],
      [{ maxTokens: 0 }, 'TESSERA_INVALID_MAX_TOKENS'],
      [{ maxTokens: 2.5 }, 'TESSERA_INVALID_MAX_TOKENS'],
      [{ prompt: fx.prompt(250, 3), maxTokens: 7 }, 'TESSERA_CONTEXT_TOO_LONG'],
      [{ prompt: fx.prompt(40, 3), maxTokens: 26 }, 'TESSERA_KV_TOO_SMALL'], // 65 tokens of KV > 4 pages
      [{ stop: ['.'] }, 'TESSERA_INVALID_REQUEST'], // no decode function
      [{ sampling: { temperature: -1 } }, 'TESSERA_INVALID_REQUEST'],
      [{ adapter: '' }, 'TESSERA_INVALID_REQUEST'],
    ];
    for (const [change, code] of cases) {
      const request = { ...ok, id: 'y', ...change };
      let caught: unknown;
      try {
        b.submit(request);
      } catch (err) {
        caught = err;
      }
      expect(caught, code).toBeInstanceOf(RequestValidationError);
      expect((caught as RequestValidationError).code).toBe(code);
      expect((caught as RequestValidationError).requestId).toBe(request.id);
    }
    // The boundary itself is fine: 40 + 25 - 1 = 64 tokens of KV.
    b.submit({ ...ok, id: 'edge', prompt: fx.prompt(40, 3), maxTokens: 25, ignoreEos: true });
    expect(b.stats()).toMatchObject({ submitted: 2, queued: 2, kvPagesUsed: 0 });
    drain(b);
    // A finished id may be used again.
    b.submit(ok);
    drain(b);
    expect(b.stats().finished).toBe(3);
    expect(() => makeLoop({ model: fx.model, cache, maxBatch: 0 })).toThrow(InvalidArgumentError);
    expect(() => makeLoop({ model: fx.model, cache, policy: 'fifo' as never })).toThrow(InvalidArgumentError);
    cache.dispose();
  });

  it('step durations come from the injected clock; maxBatch caps the working set', () => {
    let t = 1000;
    const clock: Clock = { now: () => (t += 5) };
    const cache = fx.newCache(64);
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta], clock, maxBatch: 2 });
    for (let i = 0; i < 4; i++) b.submit({ id: `q${i}`, adapter: adapterNames[i]!, prompt: fx.prompt(4, i), maxTokens: 3, ignoreEos: true });
    const reports = drain(b);
    for (const r of reports) {
      expect(r.durationMs).toBe(5);
      expect(r.batchSize).toBeLessThanOrEqual(2);
    }
    expect(b.stats().batchSizeHistogram.get(2)).toBeGreaterThan(0);
    expect([...b.stats().batchSizeHistogram.values()].reduce((s, n) => s + n, 0)).toBe(reports.length);
    cache.dispose();
  });

  it('run(): steps until idle, waits for work without spinning, wakes on submit, returns on abort', async () => {
    const cache = fx.newCache(64);
    const b = makeLoop({ model: fx.model, cache, deltas: [fx.delta] });
    const done = (id: string, adapter: string | null, seed: number) =>
      new Promise<FinishedRequest>((resolve, reject) =>
        b.submit({ id, adapter, prompt: fx.prompt(6, seed), maxTokens: 5, ignoreEos: true }, { onFinish: resolve, onError: reject }),
      );
    const controller = new AbortController();
    const first = [done('a', adapterNames[0]!, 1), done('b', null, 2)];
    const loop = b.run(controller.signal);
    await expect(b.run()).rejects.toThrow(BatcherStateError);
    const results = await Promise.all(first);
    expect(results.map((r) => r.finishReason)).toEqual(['length', 'length']);
    const steps = b.stats().steps;
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(b.stats().steps).toBe(steps); // idle: no step ran, nothing spun
    const late = await done('c', adapterNames[5]!, 3);
    expect(late.tokens).toEqual(fx.alone({ prompt: fx.prompt(6, 3), maxTokens: 5, ignoreEos: true, key: adapterNames[5]! }));
    controller.abort();
    await loop;
    expect(cache.freePages).toBe(cache.numPages);
    cache.dispose();
  });
});

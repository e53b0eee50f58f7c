/**
 * Graceful shutdown: closing the app stops accepting connections, lets an in-flight stream run to its end, and
 * only then stops the engine worker.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type Fixture, makeFixture, parseSse, serve } from './support/fixture.js';

let fixture: Fixture;

beforeAll(() => {
  fixture = makeFixture([{ name: 'alpha' }]);
});

afterAll(() => fixture?.cleanup());

describe('app.close() (what SIGINT / SIGTERM trigger through close-with-grace)', () => {
  it('drains an in-flight stream, refuses new connections, then stops the engine', async () => {
    const app = await serve(fixture);
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    const order: string[] = [];
    app.engine.on('request-end', (end) => order.push(`request-end:${end.result?.finishReason ?? null}`));

    const res = await fetch(`${address}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'alpha', prompt: 'Tell me everything', max_tokens: 150, temperature: 0, ignore_eos: true, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let body = decoder.decode((await reader.read()).value, { stream: true });

    // Still generating when the close starts (checked in the same tick, before any engine event can land).
    expect(app.engine.inFlight).toBe(1);
    const closed = app.close().then(() => order.push('closed'));
    // The listening socket is gone at once: a new client cannot connect.
    await expect
      .poll(async () => fetch(`${address}/health`).then((r) => `status ${r.status}`, (err: Error) => (err.cause as { code?: string } | undefined)?.code ?? err.message), {
        timeout: 5_000,
        interval: 10,
      })
      .toBe('ECONNREFUSED');
    expect(app.engine.healthy).toBe(true);

    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      body += decoder.decode(value, { stream: true });
    }
    await closed;
    const frames = parseSse(body);
    expect(frames.at(-1)).toBe('[DONE]');
    const text = (frames.slice(0, -1) as { choices: { text: string; finish_reason: string | null }[] }[]).map((f) => f.choices[0]!.text).join('');
    expect((frames.at(-2) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe('length');
    expect(text.length).toBeGreaterThan(0);
    // The request finished normally before the app (and with it the engine) closed.
    expect(order).toEqual(['request-end:length', 'closed']);
    expect(app.engine.healthy).toBe(false);
    expect(app.engine.failure?.message).toMatch(/shut down/);
  });
});

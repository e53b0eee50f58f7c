/**
 * drainBody: what the error handler waits for before a 413 (so a client still sending reads the answer). It must
 * return at once for a body already read to its end (a parsed JSON body, an injected request): waiting there for an
 * 'end' that already fired held every such 413 for the 30 s cap.
 */
import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';

import { drainBody } from '../src/http/server.js';

const asRequest = (s: PassThrough) => s as unknown as IncomingMessage;

describe('drainBody', () => {
  it('returns true at once for a body already read to its end', async () => {
    const s = new PassThrough();
    s.end('done');
    s.resume();
    await new Promise((r) => s.once('end', r));
    const t0 = performance.now();
    expect(await drainBody(asRequest(s), 1024, 5_000)).toBe(true);
    expect(performance.now() - t0).toBeLessThan(1_000);
  });

  it('reads and drops the rest of a body, true at its end', async () => {
    const s = new PassThrough();
    const drained = drainBody(asRequest(s), 1024, 5_000);
    s.write('a'.repeat(100));
    setTimeout(() => s.end('b'.repeat(100)), 10);
    expect(await drained).toBe(true);
  });

  it('gives up past the byte cap or the time cap', async () => {
    const big = new PassThrough();
    const overBytes = drainBody(asRequest(big), 64, 5_000);
    big.write('x'.repeat(100));
    expect(await overBytes).toBe(false);
    const slow = new PassThrough();
    expect(await drainBody(asRequest(slow), 1024, 20)).toBe(false);
    const destroyed = new PassThrough();
    destroyed.destroy();
    expect(await drainBody(asRequest(destroyed), 1024, 5_000)).toBe(false);
  });
});

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { startWorker, watchWorker, workerEntry } from '../src/index.js';

type FromWorker =
  | { type: 'progress'; line: string }
  | { type: 'ready'; echo: unknown }
  | { type: 'init-failed' | 'fatal'; error: { message: string } };

class StartFailed extends Error {}
class Unavailable extends Error {}

/** A "built" client next to the fixtures, so workerEntry picks the plain-JS worker file. */
const builtClient = new URL('./fixtures/client.js', import.meta.url).href;

function start(file: string, onMessage?: (msg: FromWorker) => void) {
  return startWorker<FromWorker>(workerEntry(builtClient, { source: './unused.ts', built: file }), {
    workerData: { modelDir: '/models/tiny' },
    name: 'server-kit-test',
    ...(onMessage ? { onMessage } : {}),
    failed: (msg) => new StartFailed(msg.error.message),
    unavailable: (message, options) => new Unavailable(message, options),
    exitGraceMs: 100,
  });
}

describe('workerEntry', () => {
  it('runs a source (.ts) client through the dev bootstrap with the source condition', () => {
    const entry = workerEntry('file:///repo/apps/x/src/engine/client.ts', { source: './worker.ts', built: './engine-worker.js' });
    expect(entry.entry).toBe('file:///repo/apps/x/src/engine/worker.ts');
    expect(entry.execArgv).toEqual(['--conditions=@tessera/source']);
    expect(entry.url.href.endsWith('/packages/server-kit/src/worker-dev.mjs')).toBe(true);
    expect(existsSync(fileURLToPath(entry.url))).toBe(true);
  });

  it("runs a built client's worker file next to it", () => {
    const entry = workerEntry('file:///repo/apps/x/dist/chunk-abc.js', { source: './worker.ts', built: './engine-worker.js' });
    expect(entry).toEqual({ url: new URL('file:///repo/apps/x/dist/engine-worker.js'), execArgv: [] });
  });
});

describe('startWorker', () => {
  it('resolves with the ready message, passing other start-up messages on and workerData through', async () => {
    const progress: FromWorker[] = [];
    const { worker, ready, exited } = await start('./ready-worker.mjs', (msg) => progress.push(msg));
    expect(ready).toEqual({ type: 'ready', echo: { modelDir: '/models/tiny' } });
    expect(progress).toEqual([{ type: 'progress', line: 'loading' }]);
    // The start-up listeners are gone: later messages are the caller's.
    expect(worker.listenerCount('message')).toBe(0);
    expect(worker.listenerCount('error')).toBe(0);
    worker.postMessage('stop');
    expect(await exited).toBe(0);
  });

  it("rejects with the app's error for a reported failure, after the worker exited", async () => {
    await expect(start('./init-failed-worker.mjs')).rejects.toThrow(new StartFailed('cannot load /models/tiny'));
  });

  it('terminates a worker that reported a failure but does not exit', async () => {
    await expect(start('./hanging-failed-worker.mjs')).rejects.toBeInstanceOf(StartFailed);
  });

  it('rejects with the unavailable error when the worker throws or exits before it is ready', async () => {
    const thrown = start('./throwing-worker.mjs');
    await expect(thrown).rejects.toBeInstanceOf(Unavailable);
    await expect(thrown).rejects.toThrow('the engine worker failed to start: boom at start-up');
    await expect(start('./exiting-worker.mjs')).rejects.toThrow(new Unavailable('the engine worker exited during start-up (exit code 3)'));
  });
});

describe('watchWorker', () => {
  it('reports a worker that goes away after start-up once: unexpected exit, or the shutdown asked for', async () => {
    for (const closing of [false, true]) {
      const { worker, exited } = await start('./ready-worker.mjs');
      const lost: string[] = [];
      watchWorker(worker, exited, { closing: () => closing, lost: (message) => lost.push(message) });
      await worker.terminate();
      await exited;
      await new Promise((resolve) => setImmediate(resolve));
      expect(lost).toHaveLength(1);
      expect(lost[0]).toMatch(closing ? /^the engine was shut down$/ : /^the engine worker exited unexpectedly \(exit code \d+\)$/);
    }
  });
});

/**
 * Start-up validation: every adapter registered at start-up is read and checked against the model; an unusable
 * one fails start-up with an error naming it (rather than failing its first request later).
 * (Its own file: one engine per test process, see support/fixture.ts.)
 */
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startWorkerHost } from '../src/engine/protocol.js';
import { type Fixture, makeFixture, serve } from './support/fixture.js';

let fixture: Fixture;

beforeAll(() => {
  fixture = makeFixture([{ name: 'alpha' }]);
});

afterAll(() => fixture?.cleanup());

describe('start-up adapters', () => {
  it('a malformed one fails start-up with an error naming it', async () => {
    const dir = join(fixture.dir, 'start-up-adapters');
    cpSync(join(fixture.adaptersDir, 'alpha'), join(dir, 'good'), { recursive: true });
    mkdirSync(join(dir, 'bad'), { recursive: true });
    writeFileSync(join(dir, 'bad', 'adapter_config.json'), '{"r": "eight"}');
    await expect(serve(fixture, { adaptersDir: dir })).rejects.toThrow(/start-up adapter "bad" \(.*bad\) is not usable: .*adapter_config\.json/);
  });

  it('names that cannot be adapter names are refused before the engine starts', async () => {
    await expect(serve(fixture, { adaptersDir: undefined, adapters: [{ name: 'a/b', path: fixture.adaptersDir }] })).rejects.toThrow(/path separator/);
    await expect(serve(fixture, { adapters: [{ name: 'alpha', path: join(fixture.adaptersDir, 'alpha') }] })).rejects.toThrow(/"alpha" is given twice/);
  });

  it('a second engine in the same process is refused (the native addon supports one per process)', async () => {
    const init = { modelDir: fixture.modelDir, adapters: [], maxBatch: 8, kvBudgetBytes: 1 << 20, adapterBudgetBytes: 1 << 20, hostAdapterBudgetBytes: 0, threads: 1 };
    await expect(startWorkerHost(init)).rejects.toThrow(/one engine per process/);
  });
});

/**
 * Per-file setup: one fixture (tiny model + adapters) for the file; every cache a test makes is disposed after
 * it, and the native allocator must then be back where the test started (no adapter tensor leaked).
 */
import { allocatorStats } from '@tessera/native';
import { afterAll, afterEach, beforeAll, beforeEach, expect } from 'vitest';

import { AdapterCache, type AdapterCacheOptions } from '../../src/index.js';
import { type Fixture, makeFixture } from './fixtures.js';
import type { DeviceLora, HostLora } from './peft-source.js';

export interface Harness {
  readonly fx: Fixture;
  /** allocatorStats().inUse when the current test started. */
  readonly baseline: number;
  /** Native bytes in use now, above the baseline. */
  inUse(): number;
  cache(options: AdapterCacheOptions<HostLora, DeviceLora>): AdapterCache<HostLora, DeviceLora>;
}

export function useHarness(): Harness {
  let fx: Fixture | undefined;
  let baseline = 0;
  const caches: AdapterCache<HostLora, DeviceLora>[] = [];
  beforeAll(() => {
    fx = makeFixture();
  });
  afterAll(() => fx?.cleanup());
  beforeEach(() => {
    baseline = allocatorStats().inUse;
  });
  afterEach(() => {
    for (const c of caches.splice(0)) c.dispose();
    expect(allocatorStats().inUse, 'native bytes left after dispose()').toBe(baseline);
  });
  return {
    get fx() {
      if (!fx) throw new Error('fixture used outside a test');
      return fx;
    },
    get baseline() {
      return baseline;
    },
    inUse: () => allocatorStats().inUse - baseline,
    cache(options) {
      const c = new AdapterCache(options);
      caches.push(c);
      return c;
    },
  };
}

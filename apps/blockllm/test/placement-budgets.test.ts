/**
 * The initial placement finds room at budgets where the greedy locality order used to fail (840–860 and 900–940 kB
 * per device gave "block … fits on no device" at start): each block is charged the bytes it adds on its device
 * (tensors shared with blocks already there count once), and a locality plan that paints itself into a corner falls
 * back to best fit.
 */
import { describe, expect, it } from 'vitest';

import { makeFixture, serve } from './support/fixture.js';

const fixture = makeFixture();

describe('initial placement across device budgets', () => {
  for (const deviceBytes of [840_000, 920_000]) {
    it(`places every chain block on 2 devices of ${deviceBytes} bytes`, async () => {
      const { app, url } = await serve(fixture, { devices: 2, deviceBytes, kvPages: 4 });
      try {
        const view = (await (await fetch(`${url}/v1/placement`)).json()) as { chains: { app: string; instances: string[] }[]; devices: { residentBytes: number; budgetBytes: number }[] };
        expect(view.chains.length).toBeGreaterThan(0);
        for (const c of view.chains) expect(c.instances.length).toBeGreaterThan(0);
        for (const d of view.devices) expect(d.residentBytes).toBeLessThanOrEqual(d.budgetBytes);
      } finally {
        await app.close();
      }
    }, 60_000);
  }
});

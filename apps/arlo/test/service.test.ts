/**
 * ArloService over emulated instances (more instances than cores, as the paper's dispatch-overhead experiment):
 * every request runs on a runtime at least as long as itself, none is lost while a new allocation drains, swaps
 * and reactivates instances under load, and the served allocation ends equal to the solved one. Also the app with
 * no real worker at all (--workers 0): it serves from the given service times and answers logits: null.
 */
import { describe, expect, it } from 'vitest';

import { makeRuntimeProfile, RequestTooLongError } from '@tessera/length-scheduler';

import { ArloService, buildServer, EmulatedRuntime } from '../src/index.js';
import { requestIds, tinyEncoder } from './support/harness.js';

const LENGTHS = [32, 64, 128];
const SERVICE_MS = [0.2, 0.4, 0.8];

function service(instances: number, clock?: { now: () => number }): ArloService {
  const profiles = LENGTHS.map((maxLength, i) => makeRuntimeProfile({ maxLength, serviceMs: SERVICE_MS[i]!, sloMs: 20 }));
  const runtimes = Array.from({ length: instances }, (_, k) => new EmulatedRuntime(`e${k}`, LENGTHS[k % 3]!, 1, (l) => SERVICE_MS[LENGTHS.indexOf(l)]!));
  return new ArloService({ lengths: LENGTHS, profiles, instances: runtimes, sloMs: 20, periodMs: 3_600_000, ...(clock ? { clock } : {}) });
}

describe('ArloService with emulated instances', () => {
  it('keeps every request on a long-enough runtime and loses none across replacements under load', async () => {
    const s = service(6);
    const lengths = Array.from(requestIds(200, 9, 128)).map((v) => 1 + (v % 128));
    const inFlight = lengths.map((len) => s.infer(new Array<number>(len).fill(3)).then((r) => ({ len, r })));
    // Two re-allocations while those run: everything short, then everything long.
    const first = await s.solve([60, 0, 1]);
    expect(s.dispatcher.activeCounts()).toEqual(first.result.instances);
    const second = await s.solve([0, 1, 60]);
    expect(s.dispatcher.activeCounts()).toEqual(second.result.instances);
    const done = await Promise.all(inFlight);
    for (const { len, r } of done) {
      expect(r.paddedTo).toBeGreaterThanOrEqual(len);
      expect(r.paddedTo).toBe(LENGTHS[r.runtime]);
      expect(r.logits).toBeNull();
    }
    expect(s.instances().every((i) => i.outstanding === 0 && i.state === 'active')).toBe(true);
    expect(s.totals.requests.reduce((a, b) => a + b, 0)).toBe(lengths.length);
    expect(s.totals.paddedTokens).toBe(done.reduce((a, { r }) => a + r.paddedTo, 0));
    expect(() => s.infer(new Array<number>(129).fill(3))).toThrow(RequestTooLongError);
    await s.close();
  });

  it('solves for the observed lengths: short traffic moves instances to the short runtime', async () => {
    let now = 0;
    const s = service(6, { now: () => now });
    const prior = (await s.solve()).result.instances;
    // 4 000 requests of at most 32 tokens over 20 s of the service's clock (4 per SLO window of 20 ms).
    for (let k = 0; k < 4000; k++) s.infer(new Array<number>(1 + (k % 32)).fill(3)).catch(() => {}); // cut short by close()
    now += 20_000;
    const observed = await s.solve();
    expect(observed.snapshot.counts).toEqual([4000, 0, 0]);
    expect(observed.snapshot.q[0]).toBeGreaterThan(observed.snapshot.q[1]! * 2);
    expect(observed.result.instances[0]).toBeGreaterThan(prior[0]!);
    expect(observed.result.instances[2]).toBeGreaterThanOrEqual(1);
    expect(s.dispatcher.activeCounts()).toEqual(observed.result.instances);
    await s.close();
  });

  it('serves from given service times with no real worker (--workers 0)', async () => {
    const fixture = tinyEncoder(3);
    const app = await buildServer({ modelDir: fixture.modelDir, lengths: LENGTHS, workers: 0, instances: 4, serviceMs: [1, 2, 4] });
    try {
      const r = await app.inject({ method: 'POST', url: '/v1/infer', payload: { input_ids: [2, 7, 8] } });
      expect(r.statusCode).toBe(200);
      expect(r.json()).toMatchObject({ logits: null, tokens: 3 });
      const view = (await app.inject({ method: 'GET', url: '/v1/allocation' })).json();
      expect(view.instances).toHaveLength(4);
      expect(view.instances.every((i: { kind: string }) => i.kind === 'emulated')).toBe(true);
      const profile = await app.inject({ method: 'POST', url: '/v1/profile', payload: {} });
      expect(profile.statusCode).toBe(409);
    } finally {
      await app.close();
      fixture.cleanup();
    }
  });
});

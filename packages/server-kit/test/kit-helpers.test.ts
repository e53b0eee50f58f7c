/** The small pieces servers share: metrics as a table, counters over cumulative totals, flags declared once, a generated directory, paths. */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';

import { TesseraError } from '@tessera/core';

import {
  createTesseraServer,
  CumulativeTotals,
  defineMetrics,
  describeByCode,
  engineHealth,
  ensureGenerated,
  errorReply,
  flagTable,
  HttpError,
  isInside,
  parseFlags,
  realDirectory,
  subdirectories,
} from '../src/index.js';

const scratch = mkdtempSync(join(tmpdir(), 'server-kit-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('defineMetrics and CumulativeTotals', () => {
  it('registers each metric of the table, and advances counters by the increase of a total', async () => {
    const registry = new Registry();
    const m = defineMetrics(registry, {
      hits: { type: 'counter', name: 'x_hits_total', help: 'hits', labels: ['tier'] },
      size: { type: 'gauge', name: 'x_size', help: 'size' },
      seconds: { type: 'histogram', name: 'x_seconds', help: 'seconds', buckets: [1, 2] },
    });
    const totals = new CumulativeTotals();
    totals.advance(m.hits, 5, { tier: 'device' });
    totals.advance(m.hits, 7, { tier: 'device' });
    totals.advance(m.hits, 3, { tier: 'host' });
    totals.advance(m.hits, 1, { tier: 'host' }); // a total that went back (a restart) never decrements
    m.size.set(4);
    m.seconds.observe(1.5);
    const text = await registry.metrics();
    expect(text).toContain('x_hits_total{tier="device"} 7');
    expect(text).toContain('x_hits_total{tier="host"} 3');
    expect(text).toContain('x_size 4');
    expect(text).toContain('x_seconds_bucket{le="2"} 1');
  });
});

describe('flagTable', () => {
  it('gives the parseArgs options and an aligned usage, one line per flag', () => {
    const { options, usage } = flagTable([
      ['Model', [{ flag: 'model', arg: '<dir>', help: 'the model directory', env: 'X_MODEL' }, { flag: 'demo', help: 'serve the demo' }]],
      ['Other', [{ flag: 'help', short: 'h', help: 'show this help' }]],
    ]);
    expect(parseFlags(['--model', 'm', '--demo', '-h'], options)).toEqual({ model: 'm', demo: true, help: true });
    expect(usage.split('\n')).toEqual([
      'Model',
      `  ${'--model <dir>'.padEnd(30)}${'the model directory'.padEnd(52)}X_MODEL`,
      `  ${'--demo'.padEnd(30)}serve the demo`,
      'Other',
      `  ${'-h, --help'.padEnd(30)}show this help`,
    ]);
  });
});

describe('ensureGenerated', () => {
  it('generates once per version, through a staging directory, and reuses it afterwards', () => {
    const dir = join(scratch, 'demo');
    let runs = 0;
    const generate = (staging: string) => {
      runs++;
      writeFileSync(join(staging, 'file.txt'), 'x');
      return { what: 'test' };
    };
    expect(ensureGenerated(dir, 1, generate)).toEqual({ dir, generated: true });
    expect(ensureGenerated(dir, 1, generate)).toEqual({ dir, generated: false });
    expect(ensureGenerated(dir, 2, generate)).toEqual({ dir, generated: true });
    expect(runs).toBe(2);
  });
});

describe('subdirectories and isInside', () => {
  it('lists subdirectories (symlinked ones too, hidden ones not) by name, and tells containment', () => {
    const root = join(scratch, 'adapters');
    for (const d of ['b', 'a', '.hidden']) mkdirSync(join(root, d), { recursive: true });
    writeFileSync(join(root, 'file'), '');
    symlinkSync(join(root, 'a'), join(root, 'c'));
    expect(subdirectories(root).map((d) => d.name)).toEqual(['a', 'b', 'c']);
    expect(isInside(root, join(root, 'a'))).toBe(true);
    expect(isInside(root, root)).toBe(true);
    expect(isInside(root, join(root, '..', 'x'))).toBe(false);
    expect(isInside(root, `${root}-other`)).toBe(false);
  });
});

describe('describeByCode', () => {
  class QuotaError extends TesseraError {
    static override readonly kind = 'capacity' as const;
    readonly taskId = 't1';
    readonly bytesLeft = 0;
    constructor() {
      super('TESSERA_QUOTA', 'the quota is spent');
    }
  }
  class OddError extends TesseraError {
    static override readonly kind = 'invalid' as const;
    readonly task = 't2';
    constructor() {
      super('TESSERA_ODD', 'odd');
    }
  }
  const table = { TESSERA_QUOTA: { code: 'quota_exceeded', param: 'task', type: 'capacity_error' as const, hint: '; ask for more' } };

  it('words a listed error: public code, param, type and hint; the status stays the kind’s', () => {
    const r = errorReply(new QuotaError(), { describe: describeByCode(table) });
    expect(r).toEqual({
      status: 507,
      message: 'the quota is spent; ask for more',
      type: 'capacity_error',
      code: 'quota_exceeded',
      param: 'task',
      details: { taskId: 't1', bytesLeft: 0 },
    });
  });

  it('renames fields (the first set wins, the others are dropped), and gives an unlisted code null unless kept', () => {
    const fields = { taskId: 'task', task: 'task' };
    expect(errorReply(new QuotaError(), { describe: describeByCode(table, { fields }) }).details).toEqual({ task: 't1' });
    expect(errorReply(new OddError(), { describe: describeByCode(table) })).toMatchObject({ code: null, message: 'odd', details: { task: 't2' } });
    expect(errorReply(new OddError(), { describe: describeByCode(table, { keepUnlisted: true }) }).code).toBe('TESSERA_ODD');
    // Not an engine error: left alone.
    expect(errorReply(new HttpError(413, 'too_big', 'x'), { describe: describeByCode(table) }).code).toBe('too_big');
  });
});

describe('realDirectory', () => {
  it('resolves symlinks, and names the flag when the path is not a directory', () => {
    const dir = join(scratch, 'real-root');
    mkdirSync(dir);
    symlinkSync(dir, join(scratch, 'root-link'));
    writeFileSync(join(scratch, 'a-file'), 'x');
    expect(realDirectory(join(scratch, 'root-link'), '--root')).toBe(realDirectory(dir, '--root'));
    expect(() => realDirectory(join(scratch, 'a-file'), '--params-root')).toThrow(/--params-root .*a-file is not a directory/);
    expect(() => realDirectory(join(scratch, 'missing'), '--params-root')).toThrow(/ENOENT/);
  });
});

describe('createTesseraServer: health and metrics over an engine host', () => {
  it('engineHealth: status, the fields, requests in flight, and the error once down; collect only while healthy', async () => {
    const engine = { healthy: true, failure: null as Error | null, inFlight: 2, close: async () => {} };
    let collects = 0;
    const app = await createTesseraServer({
      name: 'kit-test',
      engine: async () => engine,
      health: (e) => engineHealth(e, { model: 'm' }),
      metrics: () => ({
        collect: async () => {
          collects++;
          throw new Error('the engine went down meanwhile');
        },
      }),
      routes: async () => {},
    });
    try {
      const up = await app.inject({ method: 'GET', url: '/health' });
      expect(up.statusCode).toBe(200);
      expect(Object.entries(up.json())).toEqual([['status', 'ok'], ['model', 'm'], ['requests_in_flight', 2]]);
      // A failing collect does not fail the scrape.
      expect((await app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(200);
      expect(collects).toBe(1);

      Object.assign(engine, { healthy: false, failure: new Error('the worker exited'), inFlight: 0 });
      const down = await app.inject({ method: 'GET', url: '/health' });
      expect(down.statusCode).toBe(503);
      expect(down.json()).toEqual({ status: 'unhealthy', model: 'm', requests_in_flight: 0, error: 'the worker exited' });
      const metrics = await app.inject({ method: 'GET', url: '/metrics' });
      expect(metrics.body).toContain('tessera_engine_healthy 0');
      expect(collects).toBe(1);
    } finally {
      await app.close();
    }
  });
});

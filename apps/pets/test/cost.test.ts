/**
 * The planner's cost models: the analytic default's constants, profiled tables read from a file (validated, every
 * PET type required), and --profile at start-up (tables written, then served from with --cost-tables).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { CostTable } from '@tessera/batcher';
import { encoderPreset } from '@tessera/engine';
import { PET_TYPES } from '@tessera/pet-ops';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  costTablesJson,
  PETS_MAX_MACRO as MAX_MACRO,
  PETS_MAX_MINI as MAX_MINI,
  petsAnalyticCostParams as analyticCostParams,
  petsAnalyticModel as analyticModel,
  petsProfileGrid as profileGrid,
  petsTablesModel as tablesModel,
} from '@tessera/batcher';
import { type Fixture, makeFixture, serve } from './support/fixture.js';

let fixture: Fixture;
const apps: FastifyInstance[] = [];

beforeAll(() => {
  fixture = makeFixture();
});

afterAll(async () => {
  for (const app of apps) await app.close();
  fixture?.cleanup();
});

describe('the analytic cost model', () => {
  it('prices every PET type; sparse and dense PET work scale with the model as documented', () => {
    const p = analyticCostParams(fixture.config);
    expect(Object.keys(p.k).sort()).toEqual([...PET_TYPES].sort());
    expect(p).toMatchObject({ maxMini: MAX_MINI, maxMacro: MAX_MACRO });
    for (const v of [p.a0, p.a1, p.a2]) expect(v).toBeGreaterThan(0);
    // At a real width (the 'mini' preset, hidden 512): MaskBert's SpMM covers 5% of the weights, Diff-Pruning's
    // 0.5%, BitFit only adds biases.
    const mini = analyticCostParams(encoderPreset('mini'));
    expect(mini.m.maskbert! / mini.m.diff!).toBeGreaterThan(5);
    expect(mini.m.diff!).toBeGreaterThan(mini.m.bitfit!);
    expect(p.m.standard).toBe(0);
    // Per token, any PET op is far cheaper than the shared model.
    for (const type of PET_TYPES) expect(p.m[type]!).toBeLessThan(p.a1);
    const model = analyticModel(fixture.config);
    expect(model.alpha(8, 32)).toBeCloseTo(p.a0 + p.a1 * 8 * 32 + p.a2 * 8 * 32 * 32, 9);
    expect(model.alpha(MAX_MACRO + 1, 8)).toBe(Infinity);
    expect(model.beta('adapter', MAX_MINI + 1, 8)).toBe(Infinity);
  });

  it('the profile grid stays within the model positions', () => {
    expect(profileGrid(128).lengths).toEqual([16, 32, 64, 128]);
    expect(profileGrid(100).lengths).toEqual([16, 32, 64, 100]);
    expect(profileGrid(4096).lengths.at(-1)).toBe(512);
  });
});

describe('tables from a file', () => {
  const table = (cap: number) => new CostTable({ batches: [1, 4], lengths: [8, 16], values: [1, 2, 3, 4], cap });
  const full = () => ({ alpha: table(128), beta: new Map(PET_TYPES.map((t) => [t, table(32)])) });

  it('round-trips what --profile-out writes', () => {
    const model = tablesModel(JSON.parse(JSON.stringify(costTablesJson(full()))), PET_TYPES, 'tables.json');
    expect(model.alpha(3, 9)).toBe(4);
    expect(model.beta('lora', 1, 8)).toBe(1);
  });

  it('refuses a file that is not tables, a malformed table, or one without every PET type (naming what is missing)', () => {
    expect(() => tablesModel([1, 2], PET_TYPES, 'a.json')).toThrow(/a\.json: expected \{"alpha"/);
    const json = costTablesJson(full());
    expect(() => tablesModel({ ...json, alpha: { batches: [1], lengths: [8], values: [] } }, PET_TYPES, 'b.json')).toThrow(/b\.json: .*values/);
    const { prefix: _prefix, lora: _lora, ...partial } = json.beta;
    expect(() => tablesModel({ ...json, beta: partial }, PET_TYPES, 'c.json')).toThrow(/c\.json: no β table for lora, prefix/);
  });
});

describe('the server', () => {
  const tablesFile = () => join(fixture.dir, 'tables.json');

  it('--profile: measures α/β at start-up with progress lines and writes the tables', async () => {
    const lines: string[] = [];
    const app = await serve(fixture, { profile: true, profileOut: tablesFile(), onProgress: (l) => lines.push(l) });
    apps.push(app);
    expect(app.engine.cost).toEqual({ source: 'profiled', file: tablesFile() });
    expect(lines.some((l) => /profiling α\/β tables: \d+\/\d+ cells \(100%\)/.test(l))).toBe(true);
    const written = JSON.parse(readFileSync(tablesFile(), 'utf8')) as { alpha: unknown; beta: Record<string, unknown> };
    expect(Object.keys(written.beta).sort()).toEqual([...PET_TYPES].sort());
    // The temporary profiling tasks are gone.
    expect((await app.inject({ method: 'GET', url: '/v1/tasks' })).json()).toMatchObject({ data: [] });
  });

  it('--cost-tables: plans with the file and classifies', async () => {
    expect(existsSync(tablesFile())).toBe(true);
    const app = await serve(fixture, { costTables: tablesFile() });
    apps.push(app);
    expect(app.engine.cost).toEqual({ source: 'tables', file: tablesFile() });
    await app.inject({ method: 'POST', url: '/v1/tasks', payload: { pet_type: 'adapter', id: 'sentiment', path: 'sentiment.safetensors' } });
    const res = await app.inject({ method: 'POST', url: '/v1/tasks/sentiment/classify', payload: { input: ['one', 'two words', 'and three words'] } });
    expect(res.statusCode, res.body).toBe(200);
  });

  it('a tables file that cannot be used fails start-up, naming the file', async () => {
    const broken = join(fixture.dir, 'broken-tables.json');
    writeFileSync(broken, '{"alpha": 1}');
    await expect(serve(fixture, { costTables: broken })).rejects.toThrow(/broken-tables\.json/);
    await expect(serve(fixture, { costTables: join(fixture.dir, 'missing.json') })).rejects.toThrow(/missing\.json/);
  });
});

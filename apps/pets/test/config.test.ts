/** The command line: defaults, flags over PETS_* variables, --help, and usage errors. */
import { describe, expect, it } from 'vitest';

import { DEFAULTS, parseCli, USAGE, UsageError } from '../src/config.js';

describe('parseCli', () => {
  it('has defaults: loopback, port 8001, auto strategy, padded layout, the demo when no model is given', () => {
    expect(parseCli([], {})).toEqual({
      modelDir: undefined,
      tag: undefined,
      demo: false,
      demoDir: undefined,
      paramsRoot: undefined,
      maxParamsMiB: 64,
      budgetMiB: 1024,
      host: '127.0.0.1',
      port: 8001,
      maxInputTokens: undefined,
      maxBatchInputs: 64,
      logLevel: 'info',
      strategy: 'auto',
      windowMs: 10,
      windowQueries: 128,
      costTables: undefined,
      profile: false,
      profileOut: undefined,
      layout: 'padded',
      scheduling: 'intensity',
      streams: 'dynamic',
      threads: undefined,
    });
  });

  it('reads flags, and PETS_* variables where a flag is absent', () => {
    const env = { PETS_MODEL: '/env/bert', PETS_PORT: '9000', PETS_STRATEGY: 'cb', PETS_WINDOW_MS: '25', PETS_THREADS: '2', PETS_DEMO: '1' };
    expect(parseCli([], env)).toMatchObject({ modelDir: '/env/bert', port: 9000, strategy: 'cb', windowMs: 25, threads: 2, demo: true });
    const flags = [
      '--model', '/m', '--tag', 'bert-base', '--params-root', '/p', '--port', '8100', '--strategy', 'alpha-only', '--layout', 'packed',
      '--scheduling', 'round-robin', '--streams', '4', '--window-ms', '0', '--window-queries', '16', '--budget-mb', '256',
      '--max-input-tokens', '64', '--max-batch-inputs', '8', '--max-params-mb', '2', '--cost-tables', '/t.json', '--threads', '1',
    ];
    expect(parseCli(flags, env)).toMatchObject({
      modelDir: '/m', tag: 'bert-base', paramsRoot: '/p', port: 8100, strategy: 'alpha-only', layout: 'packed', scheduling: 'round-robin',
      streams: 4, windowMs: 0, windowQueries: 16, budgetMiB: 256, maxInputTokens: 64, maxBatchInputs: 8, maxParamsMiB: 2,
      costTables: '/t.json', threads: 1,
    });
    expect(parseCli(['--streams', 'dynamic'], {})!.streams).toBe('dynamic');
    expect(parseCli(['--profile', '--profile-out', '/o.json'], {})).toMatchObject({ profile: true, profileOut: '/o.json' });
  });

  it('ignores the leading -- that `pnpm start -- …` passes through', () => {
    expect(parseCli(['--', '--port', '9001'], {})).toMatchObject({ port: 9001 });
  });

  it('returns null for --help, and the usage names every flag and default', () => {
    expect(parseCli(['--help'], {})).toBeNull();
    expect(parseCli(['-h'], {})).toBeNull();
    for (const flag of [
      '--model', '--tag', '--demo', '--demo-dir', '--params-root', '--max-params-mb', '--budget-mb', '--host', '--port', '--max-input-tokens',
      '--max-batch-inputs', '--log-level', '--strategy', '--window-ms', '--window-queries', '--cost-tables', '--profile', '--profile-out',
      '--layout', '--scheduling', '--streams', '--threads', '--help',
    ]) {
      expect(USAGE).toContain(flag);
    }
    expect(USAGE).toContain(`default ${DEFAULTS.port}`);
  });

  it('rejects unknown flags and bad values with a UsageError naming the flag', () => {
    const cases: [string[], RegExp][] = [
      [['--nope'], /nope/],
      [['--port', 'abc'], /--port/],
      [['--port', '70000'], /--port/],
      [['--strategy', 'greedy'], /--strategy must be one of auto, cb, alpha-only, beta-only, fixed/],
      [['--layout', 'ragged'], /--layout/],
      [['--scheduling', 'random'], /--scheduling/],
      [['--streams', '0'], /--streams/],
      [['--window-queries', '0'], /--window-queries/],
      [['--budget-mb', '-1'], /--budget-mb/],
      [['--log-level', 'loud'], /--log-level/],
      [['--tag', '../escape'], /--tag/],
      [['--profile', '--cost-tables', 't.json'], /exclude each other/],
      [['--profile-out', 'o.json'], /--profile-out needs --profile/],
      [['positional'], /positional/],
    ];
    for (const [argv, message] of cases) expect(() => parseCli(argv, {}), argv.join(' ')).toThrow(message);
    expect(() => parseCli(['--port', 'abc'], {})).toThrow(UsageError);
    expect(() => parseCli([], { PETS_DEMO: 'maybe' })).toThrow(/PETS_DEMO/);
  });
});

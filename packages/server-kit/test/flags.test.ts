import { describe, expect, it, vi } from 'vitest';

import { flagOrEnv, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseCommandLine, parseFlags, parseIntegerFlag, UsageError } from '../src/index.js';

describe('parseIntegerFlag', () => {
  it('reads integers in range and treats unset or empty as undefined', () => {
    expect(parseIntegerFlag('--port', '8080', 0, 65_535)).toBe(8080);
    expect(parseIntegerFlag('--port', '0', 0, 65_535)).toBe(0);
    expect(parseIntegerFlag('--port', '65535', 0, 65_535)).toBe(65_535);
    expect(parseIntegerFlag('--port', undefined, 0)).toBeUndefined();
    expect(parseIntegerFlag('--port', '', 0)).toBeUndefined();
  });

  it('rejects non-integers and out-of-range values, naming the flag and the value', () => {
    for (const bad of ['abc', '1.5', '-1', '65536', '1e9']) {
      expect(() => parseIntegerFlag('--port', bad, 0, 65_535), bad).toThrow(UsageError);
    }
    expect(() => parseIntegerFlag('--port', 'abc', 0, 65_535)).toThrow('--port must be an integer in [0, 65535], got "abc"');
    expect(() => parseIntegerFlag('--budget', '0', 1)).toThrow(`--budget must be an integer in [1, ${Number.MAX_SAFE_INTEGER}], got "0"`);
  });
});

describe('parseBooleanFlag', () => {
  it('accepts 1/0, true/false, yes/no, on/off in any case', () => {
    for (const v of ['1', 'true', 'YES', 'On']) expect(parseBooleanFlag('X_DEMO', v), v).toBe(true);
    for (const v of ['0', 'False', 'no', 'OFF']) expect(parseBooleanFlag('X_DEMO', v), v).toBe(false);
    expect(parseBooleanFlag('X_DEMO', undefined)).toBeUndefined();
    expect(parseBooleanFlag('X_DEMO', '')).toBeUndefined();
  });

  it('rejects anything else, naming the variable', () => {
    expect(() => parseBooleanFlag('X_DEMO', 'maybe')).toThrow('X_DEMO must be 1/0, true/false, yes/no or on/off, got "maybe"');
  });
});

describe('parseChoiceFlag', () => {
  it('returns an allowed value, or the fallback when unset', () => {
    expect(parseChoiceFlag('--log-level', 'debug', LOG_LEVELS, 'info')).toBe('debug');
    expect(parseChoiceFlag('--log-level', undefined, LOG_LEVELS, 'info')).toBe('info');
    expect(parseChoiceFlag('--role', undefined, ['worker', 'scheduler'], null)).toBeNull();
  });

  it('rejects other values, listing the allowed ones', () => {
    expect(() => parseChoiceFlag('--log-level', 'loud', LOG_LEVELS, 'info')).toThrow(
      '--log-level must be one of fatal, error, warn, info, debug, trace, silent, got "loud"',
    );
  });
});

describe('parseFlags and flagOrEnv', () => {
  const options = { port: { type: 'string' }, demo: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } as const;

  it('parses flags, drops a leading -- (pnpm start -- …) and lets a flag win over its variable', () => {
    const values = parseFlags(['--', '--port', '9000', '--demo'], options);
    expect(values).toEqual({ port: '9000', demo: true });
    const str = flagOrEnv(values, { X_PORT: '7000', X_HOST: 'example', X_EMPTY: '' });
    expect(str('port', 'X_PORT')).toBe('9000');
    expect(str('host', 'X_HOST')).toBe('example');
    expect(str('host', 'X_EMPTY')).toBeUndefined();
    expect(str('host', 'X_UNSET')).toBeUndefined();
    expect(parseFlags(['-h'], options)).toEqual({ help: true });
  });

  it('turns unknown flags, missing values and positionals into UsageErrors', () => {
    for (const argv of [['--nope'], ['--port'], ['stray'], ['--demo=1']]) {
      expect(() => parseFlags(argv, options), argv.join(' ')).toThrow(UsageError);
    }
    expect(() => parseFlags(['--nope'], options)).toThrow(/--nope/);
  });
});

describe('parseCommandLine', () => {
  it('gives the config, or the exit code: 0 after the usage for --help, 2 after a UsageError; anything else throws', () => {
    const out = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      expect(parseCommandLine(() => ({ port: 1 }), 'usage\n')).toEqual({ port: 1 });
      expect(out).not.toHaveBeenCalled();
      expect(parseCommandLine(() => null, 'usage\n')).toBe(0);
      expect(out).toHaveBeenCalledWith('usage\n');
      expect(
        parseCommandLine(() => {
          throw new UsageError('--port must be an integer');
        }, 'usage\n'),
      ).toBe(2);
      expect(err).toHaveBeenCalledWith(expect.stringContaining('--port must be an integer'));
      expect(() =>
        parseCommandLine(() => {
          throw new TypeError('a bug');
        }, 'usage\n'),
      ).toThrow(TypeError);
    } finally {
      out.mockRestore();
      err.mockRestore();
    }
  });
});

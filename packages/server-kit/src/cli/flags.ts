/**
 * Command-line flags with environment-variable equivalents (a flag wins over its variable), as the reference
 * servers read them: every problem is a {@link UsageError} that names the flag or variable and the bad value.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

/** A bad command line: the message is printed with a pointer to --help, and the process exits with 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** pino's levels, the values --log-level accepts. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

type FlagValues = Record<string, string | boolean | undefined>;

/**
 * Parses `argv` (without node and the script) strictly, no positionals, with node:util's parseArgs; its errors
 * (unknown flag, missing value) become UsageErrors. A leading `--` is dropped: `pnpm start -- --port 9000`
 * passes it through, and it separates pnpm's arguments from ours, not options from positionals.
 */
export function parseFlags(argv: readonly string[], options: NonNullable<ParseArgsConfig['options']>): FlagValues {
  try {
    const { values } = parseArgs({ args: argv[0] === '--' ? argv.slice(1) : [...argv], strict: true, allowPositionals: false, options });
    return values as FlagValues;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** Reads a string option: the flag's value if given, else the variable's (an empty variable counts as unset). */
export function flagOrEnv(values: FlagValues, env: NodeJS.ProcessEnv): (flag: string, envName: string) => string | undefined {
  return (flag, envName) => {
    const v = values[flag];
    if (typeof v === 'string') return v;
    const e = env[envName];
    return e === undefined || e === '' ? undefined : e;
  };
}

/** An integer in [min, max]; undefined when `value` is unset or empty. `name` is how the error names the flag. */
export function parseIntegerFlag(name: string, value: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new UsageError(`${name} must be an integer in [${min}, ${max}], got ${JSON.stringify(value)}`);
  return n;
}

/** A boolean variable (1/0, true/false, yes/no, on/off, any case); undefined when unset or empty. */
export function parseBooleanFlag(name: string, value: string | undefined): boolean | undefined {
  if (value === undefined || value === '') return undefined;
  if (['1', 'true', 'yes', 'on'].includes(value.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(value.toLowerCase())) return false;
  throw new UsageError(`${name} must be 1/0, true/false, yes/no or on/off, got ${JSON.stringify(value)}`);
}

/** One of `allowed`, or `fallback` when `value` is unset. */
export function parseChoiceFlag<T extends string, F>(name: string, value: string | undefined, allowed: readonly T[], fallback: F): T | F {
  if (value === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(value)) throw new UsageError(`${name} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return value as T;
}

/** One flag of a command: its parseArgs option and its usage line. */
export interface FlagSpec {
  /** The long name, without `--`. */
  flag: string;
  short?: string;
  /** Its value's placeholder ('<dir>'); none for a boolean flag. */
  arg?: string;
  help: string;
  /** The environment equivalent, as the usage shows it ('PUNICA_MODEL', 'PUNICA_DEMO=1'). */
  env?: string;
}

/**
 * A command's flags, declared once: the options for {@link parseFlags} (a flag with `arg` takes a string, one
 * without is a boolean) and the usage text, one heading per section and one aligned line per flag.
 */
export function flagTable(sections: readonly (readonly [heading: string, flags: readonly FlagSpec[]])[]): {
  options: NonNullable<ParseArgsConfig['options']>;
  usage: string;
} {
  const options: NonNullable<ParseArgsConfig['options']> = {};
  const lines: string[] = [];
  for (const [heading, flags] of sections) {
    lines.push(heading);
    for (const f of flags) {
      options[f.flag] = { type: f.arg === undefined ? 'boolean' : 'string', ...(f.short ? { short: f.short } : {}) };
      const name = `${f.short ? `-${f.short}, ` : ''}--${f.flag}${f.arg ? ` ${f.arg}` : ''}`;
      const env = f.env ? `${' '.repeat(Math.max(2, 52 - f.help.length))}${f.env}` : '';
      lines.push(`  ${name.padEnd(30)}${f.help}${env}`);
    }
  }
  return { options, usage: lines.join('\n') };
}

import { InvalidAdapterNameError } from './errors.js';

/** Longest adapter name accepted (in UTF-16 code units; names are ASCII anyway). */
export const MAX_ADAPTER_NAME_LENGTH = 128;

// A letter or digit first (so no leading '.', '-' or ':'), then letters, digits and . _ - : @ +
// ('@' for "id@revision", ':' for "base:adapter" spellings users already send).
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@+-]*$/;

/**
 * Throws {@link InvalidAdapterNameError} unless `name` is a usable adapter name: non-empty, at most
 * {@link MAX_ADAPTER_NAME_LENGTH} characters, no path separator, no `..`, no NUL or control character, and only
 * letters, digits and `. _ - : @ +`, starting with a letter or digit. Names end up in URLs, metrics labels and
 * log lines, and a cache keyed by a name that looks like a path invites path tricks, hence the strictness.
 */
export function checkAdapterName(name: unknown): asserts name is string {
  const shown = typeof name === 'string' ? JSON.stringify(name) : String(name);
  const fail = (why: string): never => {
    throw new InvalidAdapterNameError(typeof name === 'string' ? name : shown, `invalid adapter name ${shown}: ${why}`);
  };
  if (typeof name !== 'string') return fail(`must be a string, got ${typeof name}`);
  if (name.length === 0) return fail('must not be empty');
  if (name.length > MAX_ADAPTER_NAME_LENGTH) return fail(`is ${name.length} characters long; the limit is ${MAX_ADAPTER_NAME_LENGTH}`);
  if (name.includes('\0')) return fail('contains a NUL character');
  if (name.includes('/') || name.includes('\\')) return fail('contains a path separator (/ or \\)');
  if (name.includes('..')) return fail('contains ".."');
  if (/[\u0000-\u001f\u007f]/.test(name)) return fail('contains a control character');
  if (!NAME_PATTERN.test(name)) return fail('may use only letters, digits and . _ - : @ +, and must start with a letter or digit');
}

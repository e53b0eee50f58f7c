/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { InvalidArgumentError, TesseraError, deserializeError, mulberry32, registerErrors, serializeError, systemClock, type ErrorKind } from '@tessera/core';

// A typed error: the class states its kind once; servers map the kind to an HTTP status (server-kit).
class TaskNotFoundError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly taskId: string) {
    super('MYAPP_TASK_NOT_FOUND', `no task "${taskId}"`);
  }
}
registerErrors(TaskNotFoundError);

// Across a worker thread (postMessage) or Redis (JSON), the class and its fields survive.
const wire = JSON.parse(JSON.stringify(serializeError(new TaskNotFoundError('t1'))));
const back = deserializeError(wire);
console.log(back instanceof TaskNotFoundError, (back as TaskNotFoundError).taskId, (back as TesseraError).kind); // true 't1' 'not_found'

const random = mulberry32(42); // the same stream on every machine
console.log(random(), systemClock.now());
console.log(new InvalidArgumentError('bad').kind); // 'invalid'
// #endregion readme-example

describe('README example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(block).toBe(region);
  });

  it('printed a rebuilt class, a seeded draw and a kind', () => {
    expect(printed[0]).toEqual([true, 't1', 'not_found']);
    expect(printed[1]![0]).toBe(mulberry32(42)());
    expect(printed[2]).toEqual(['invalid']);
  });
});

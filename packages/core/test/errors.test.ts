import { describe, expect, it } from 'vitest';
import {
  ERROR_KINDS,
  InvalidArgumentError,
  RemoteError,
  TesseraError,
  deserializeError,
  errorKind,
  registerErrors,
  serializeError,
  type ErrorKind,
} from '../src/index.js';

class TaskNotFoundError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  readonly taskId: string;
  readonly known: string[];
  constructor(taskId: string, known: string[]) {
    super('TESSERA_TEST_TASK_NOT_FOUND', `no task "${taskId}"`);
    this.taskId = taskId;
    this.known = known;
  }
}
registerErrors(TaskNotFoundError);

/** Structured clone is what postMessage does; JSON is what a Redis payload does. */
const acrossThread = <T>(v: T): T => structuredClone(v);
const acrossRedis = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

describe('TesseraError', () => {
  it('takes its kind from the class, its name from the constructor', () => {
    const e = new TaskNotFoundError('t1', ['a']);
    expect(e.kind).toBe('not_found');
    expect(e.name).toBe('TaskNotFoundError');
    expect(e.code).toBe('TESSERA_TEST_TASK_NOT_FOUND');
    expect(new InvalidArgumentError('x').kind).toBe('invalid');
    expect(new TesseraError('X', 'y').kind).toBe('internal');
    expect(new InvalidArgumentError('x', { kind: 'capacity' }).kind).toBe('capacity');
    expect(errorKind(new Error('plain'))).toBe('internal');
    expect(errorKind('a string')).toBe('internal');
    expect(ERROR_KINDS).toContain('unavailable');
  });

  it('keeps the cause', () => {
    const cause = new Error('root');
    expect(new InvalidArgumentError('outer', { cause }).cause).toBe(cause);
  });
});

describe('serializeError / deserializeError', () => {
  for (const [transport, carry] of [['thread', acrossThread], ['redis', acrossRedis]] as const) {
    it(`rebuilds a registered class with its fields across a ${transport}`, () => {
      const back = deserializeError(carry(serializeError(new TaskNotFoundError('t9', ['a', 'b']))));
      expect(back).toBeInstanceOf(TaskNotFoundError);
      expect(back).toBeInstanceOf(TesseraError);
      const e = back as TaskNotFoundError;
      expect([e.name, e.kind, e.code, e.message, e.taskId, e.known]).toEqual(['TaskNotFoundError', 'not_found', 'TESSERA_TEST_TASK_NOT_FOUND', 'no task "t9"', 't9', ['a', 'b']]);
      expect(e.stack).toContain('TaskNotFoundError');
    });

    it(`turns an unknown class into a RemoteError with the same kind, code and fields across a ${transport}`, () => {
      const s = carry(serializeError(new TaskNotFoundError('t2', [])));
      const back = deserializeError({ ...s, name: 'SomeOtherError' });
      expect(back).toBeInstanceOf(RemoteError);
      const r = back as RemoteError;
      expect([r.remoteName, r.kind, r.code, r.fields]).toEqual(['SomeOtherError', 'not_found', 'TESSERA_TEST_TASK_NOT_FOUND', { taskId: 't2', known: [] }]);
      // A RemoteError serialized again keeps the original name and fields (a frontend forwarding a worker's error).
      const again = serializeError(r);
      expect([again.name, again.fields]).toEqual(['SomeOtherError', { taskId: 't2', known: [] }]);
    });
  }

  it('keeps only JSON-safe fields', () => {
    const e = new InvalidArgumentError('bad') as InvalidArgumentError & Record<string, unknown>;
    Object.assign(e, { n: 3, inf: Infinity, fn: () => 1, nested: { a: [1, 'x'] }, buf: new Uint8Array(2), nil: null });
    expect(serializeError(e).fields).toEqual({ n: 3, nested: { a: [1, 'x'] }, nil: null });
  });

  it('flattens plain errors and non-errors as internal', () => {
    expect(serializeError(new TypeError('t'))).toMatchObject({ name: 'TypeError', kind: 'internal', code: null });
    expect(serializeError(42)).toMatchObject({ name: 'Error', message: '42', kind: 'internal', code: null });
    const back = deserializeError(acrossThread(serializeError(new RangeError('r'))));
    expect(back).toBeInstanceOf(RemoteError);
    expect((back as RemoteError).remoteName).toBe('RangeError');
  });

  it('refuses two classes under one name', () => {
    const Twin = class TaskNotFoundError extends TesseraError {};
    expect(() => registerErrors(Twin)).toThrow(/two error classes are named TaskNotFoundError/);
    expect(() => registerErrors(TaskNotFoundError)).not.toThrow();
  });
});

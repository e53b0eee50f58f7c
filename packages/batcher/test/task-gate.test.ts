/** The per-task readers-writer gate: readers share, writers are alone, admission is first-come first-served. */
import { describe, expect, it } from 'vitest';

import { TaskGate, TaskGates } from '../src/pipeline/task-gate.js';

/** A promise and its resolver. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const tick = () => new Promise<void>((r) => setImmediate(r));

describe('TaskGate', () => {
  it('lets readers share, and a writer waits for the readers ahead of it', async () => {
    const gate = new TaskGate();
    const log: string[] = [];
    const r1 = deferred();
    const r2 = deferred();
    const a = gate.shared(async () => (log.push('r1 in'), await r1.promise, log.push('r1 out')));
    const b = gate.shared(async () => (log.push('r2 in'), await r2.promise, log.push('r2 out')));
    const w = gate.exclusive(() => log.push('w'));
    await tick();
    expect(log).toEqual(['r1 in', 'r2 in']);
    r2.resolve();
    await tick();
    expect(log).toEqual(['r1 in', 'r2 in', 'r2 out']);
    r1.resolve();
    await Promise.all([a, b, w]);
    expect(log).toEqual(['r1 in', 'r2 in', 'r2 out', 'r1 out', 'w']);
    expect(gate.idle).toBe(true);
  });

  it('queues readers that arrive after a waiting writer behind it (no writer starvation)', async () => {
    const gate = new TaskGate();
    const log: string[] = [];
    const first = deferred();
    const r1 = gate.shared(async () => (log.push('r1'), await first.promise));
    const w = gate.exclusive(() => log.push('w'));
    const r2 = gate.shared(() => log.push('r2'));
    await tick();
    expect(log).toEqual(['r1']);
    first.resolve();
    await Promise.all([r1, w, r2]);
    expect(log).toEqual(['r1', 'w', 'r2']);
  });

  it('runs writers one at a time, and a failing holder releases the gate', async () => {
    const gate = new TaskGate();
    let inside = 0;
    let most = 0;
    const write = () =>
      gate.exclusive(async () => {
        inside++;
        most = Math.max(most, inside);
        await tick();
        inside--;
      });
    await expect(gate.exclusive(() => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await Promise.all([write(), write(), write()]);
    expect(most).toBe(1);
    await expect(gate.shared(() => { throw new Error('reader failed'); })).rejects.toThrow('reader failed');
    expect(await gate.exclusive(() => 'free')).toBe('free');
    expect(gate.idle).toBe(true);
  });
});

describe('TaskGates', () => {
  it('keeps one gate per task: different tasks never wait on each other', async () => {
    const gates = new TaskGates();
    const hold = deferred();
    const log: string[] = [];
    const a = gates.exclusive('a', async () => (log.push('a in'), await hold.promise, log.push('a out')));
    const b = gates.exclusive('b', () => log.push('b'));
    await b;
    expect(log).toEqual(['a in', 'b']);
    const a2 = gates.shared('a', () => log.push('a read'));
    await tick();
    expect(log).toEqual(['a in', 'b']);
    hold.resolve();
    await Promise.all([a, a2]);
    expect(log).toEqual(['a in', 'b', 'a out', 'a read']);
  });
});

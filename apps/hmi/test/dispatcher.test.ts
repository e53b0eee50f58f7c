/**
 * The dispatcher (hmi.md A11, §4.1 behaviour 12), pure policy: append to the last batch, a new one when it is
 * full or sealed, one queue per PLOT version, the oldest batch taken first.
 */
import { describe, expect, it } from 'vitest';

import { Dispatcher } from '../src/policy/dispatcher.js';

describe('Dispatcher', () => {
  it('9 requests with a batch of 3 make {0,1,2}, {3,4,5}, {6,7,8}, taken in order', () => {
    const d = new Dispatcher<number>({ maxBatch: 3 });
    for (let i = 0; i < 9; i++) d.add('v', i);
    expect(d.depth).toBe(9);
    expect(d.batches).toBe(3);
    expect(d.hasFullBatch()).toBe(true);
    expect([d.take(), d.take(), d.take()].map((b) => b!.requests)).toEqual([[0, 1, 2], [3, 4, 5], [6, 7, 8]]);
    expect(d.take()).toBeNull();
    expect(d.depth).toBe(0);
  });

  it('never appends to a sealed (taken) batch', () => {
    const d = new Dispatcher<number>({ maxBatch: 4 });
    d.add('v', 0);
    const taken = d.take()!;
    expect(taken.sealed).toBe(true);
    const next = d.add('v', 1);
    expect(next).not.toBe(taken);
    expect(taken.requests).toEqual([0]);
    expect(d.take()!.requests).toEqual([1]);
  });

  it('batches by version (a batch shares one PLOT chain) and takes the oldest head first', () => {
    const d = new Dispatcher<string>({ maxBatch: 2 });
    d.add('bio@1', 'a');
    d.add('eco@1', 'b');
    d.add('bio@1', 'c');
    d.add('eco@1', 'd');
    d.add('bio@1', 'e');
    const order = [];
    for (let b = d.take(); b !== null; b = d.take()) order.push([b.version, b.requests]);
    expect(order).toEqual([['bio@1', ['a', 'c']], ['eco@1', ['b', 'd']], ['bio@1', ['e']]]);
  });

  it('removes a deleted tenant’s waiting requests and drops emptied batches', () => {
    const d = new Dispatcher<{ t: string }>({ maxBatch: 2 });
    for (const t of ['x', 'y', 'x', 'x']) d.add('v', { t });
    expect(d.remove((r) => r.t === 'x').map((r) => r.t)).toEqual(['x', 'x', 'x']);
    expect(d.depth).toBe(1);
    expect(d.batches).toBe(1);
    expect(d.take()!.requests).toEqual([{ t: 'y' }]);
  });

  it('refuses a batch size below 1', () => {
    expect(() => new Dispatcher({ maxBatch: 0 })).toThrow(RangeError);
  });
});

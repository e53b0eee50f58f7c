/** VirtualClock and EventQueue: (time, insertion) order, run(until), and refusing the past. */
import { describe, expect, it } from 'vitest';
import { EventOrderError, EventQueue, VirtualClock, mulberry32 } from '../src/index.js';

describe('EventQueue', () => {
  it('runs events by time, ties in insertion order, with the clock at each event time', () => {
    const q = new EventQueue();
    const seen: string[] = [];
    const at = (t: number, name: string) => q.schedule(t, () => seen.push(`${name}@${q.now()}`));
    at(5, 'c');
    at(1, 'a');
    at(5, 'd');
    at(3, 'b');
    at(5, 'e');
    expect(q.run()).toBe(5);
    expect(seen).toEqual(['a@1', 'b@3', 'c@5', 'd@5', 'e@5']);
  });

  it('an event scheduled for the current time runs after those already waiting for it', () => {
    const q = new EventQueue();
    const seen: string[] = [];
    q.schedule(2, () => {
      seen.push('first');
      q.schedule(2, () => seen.push('scheduled by first'));
    });
    q.schedule(2, () => seen.push('second'));
    q.run();
    expect(seen).toEqual(['first', 'second', 'scheduled by first']);
  });

  it('matches a stable sort on 5000 random events (the heap is a priority queue with FIFO ties)', () => {
    const q = new EventQueue();
    const random = mulberry32(7);
    const events = Array.from({ length: 5000 }, (_, i) => ({ t: Math.floor(random() * 200), i }));
    const order: number[] = [];
    for (const e of events) q.schedule(e.t, () => order.push(e.i));
    q.run();
    const expected = [...events].sort((a, b) => a.t - b.t || a.i - b.i).map((e) => e.i);
    expect(order).toEqual(expected);
  });

  it('run(until) stops at until (events at until included) and moves the clock there', () => {
    const q = new EventQueue();
    const seen: number[] = [];
    for (const t of [10, 20, 30]) q.schedule(t, () => seen.push(t));
    expect(q.run(20)).toBe(2);
    expect(seen).toEqual([10, 20]);
    expect(q.now()).toBe(20);
    q.run(25);
    expect(q.now()).toBe(25);
    expect(q.nextTime()).toBe(30);
    q.after(1, () => seen.push(26));
    q.run();
    expect(seen).toEqual([10, 20, 26, 30]);
    expect(q.size).toBe(0);
    expect(q.nextTime()).toBe(Infinity);
  });

  it('refuses events in the past, and a clock going back', () => {
    const q = new EventQueue(new VirtualClock(100));
    expect(() => q.schedule(99, () => {})).toThrow(EventOrderError);
    expect(() => q.clock.advanceTo(50)).toThrow(EventOrderError);
    q.schedule(100, () => {});
    expect(q.run()).toBe(1);
  });
});

/**
 * Virtual time for the simulator: a {@link VirtualClock} that the policies read through @tessera/core's Clock
 * interface (decision 6), and an {@link EventQueue} that owns it. The queue is a binary min-heap on
 * (time, sequence number): events at the same virtual time run in the order they were scheduled, so a run is a
 * pure function of its inputs. Time only moves when the queue runs an event (or `run(until)` reaches `until`).
 */
import type { Clock } from '@tessera/core';
import { EventOrderError, SimArgumentError } from './errors.js';

/** Milliseconds of simulated time. Only an {@link EventQueue} moves it forward. */
export class VirtualClock implements Clock {
  private t: number;

  constructor(startMs = 0) {
    if (!Number.isFinite(startMs)) throw new SimArgumentError(`VirtualClock: start must be finite, got ${startMs}`);
    this.t = startMs;
  }

  now(): number {
    return this.t;
  }

  /** Moves time to `tMs`; time never goes back. */
  advanceTo(tMs: number): void {
    if (!(tMs >= this.t)) throw new EventOrderError(`VirtualClock: cannot go back from ${this.t} ms to ${tMs} ms`);
    this.t = tMs;
  }
}

export class EventQueue {
  readonly clock: VirtualClock;
  // The heap as parallel arrays (no object per event): entry i is (times[i], seqs[i], callbacks[i]).
  private readonly times: number[] = [];
  private readonly seqs: number[] = [];
  private readonly callbacks: (() => void)[] = [];
  private nextSeq = 0;
  private executed = 0;

  constructor(clock: VirtualClock = new VirtualClock()) {
    this.clock = clock;
  }

  /** Current virtual time (ms). */
  now(): number {
    return this.clock.now();
  }

  /** Events waiting. */
  get size(): number {
    return this.times.length;
  }

  /** Events run so far. */
  get eventsRun(): number {
    return this.executed;
  }

  /** Time of the next event; Infinity when none is waiting. */
  nextTime(): number {
    return this.times.length > 0 ? this.times[0]! : Infinity;
  }

  /** Runs `callback` at virtual time `atMs` (not before now), after every event already scheduled for that time. */
  schedule(atMs: number, callback: () => void): void {
    if (!Number.isFinite(atMs)) throw new SimArgumentError(`EventQueue: event time must be finite, got ${atMs}`);
    if (atMs < this.clock.now()) throw new EventOrderError(`EventQueue: event at ${atMs} ms is before now (${this.clock.now()} ms)`);
    const seq = this.nextSeq++;
    const times = this.times;
    const seqs = this.seqs;
    const callbacks = this.callbacks;
    let i = times.length;
    times.push(atMs);
    seqs.push(seq);
    callbacks.push(callback);
    // Sift up.
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const pt = times[parent]!;
      if (pt < atMs || (pt === atMs && seqs[parent]! < seq)) break;
      times[i] = pt;
      seqs[i] = seqs[parent]!;
      callbacks[i] = callbacks[parent]!;
      i = parent;
    }
    times[i] = atMs;
    seqs[i] = seq;
    callbacks[i] = callback;
  }

  /** Runs `callback` `delayMs` from now. */
  after(delayMs: number, callback: () => void): void {
    if (!(delayMs >= 0)) throw new SimArgumentError(`EventQueue: delay must be >= 0, got ${delayMs}`);
    this.schedule(this.clock.now() + delayMs, callback);
  }

  /** Runs the next event (clock set to its time first); false when none is waiting. */
  runNext(): boolean {
    if (this.times.length === 0) return false;
    const at = this.times[0]!;
    const callback = this.pop();
    this.clock.advanceTo(at);
    this.executed++;
    callback();
    return true;
  }

  /**
   * Runs every event with time ≤ untilMs, including events those events schedule, in (time, insertion) order;
   * then, for a finite untilMs, moves the clock to untilMs. Returns the number of events run.
   */
  run(untilMs = Infinity): number {
    if (Number.isNaN(untilMs)) throw new SimArgumentError('EventQueue: run(untilMs) needs a number');
    let count = 0;
    while (this.times.length > 0 && this.times[0]! <= untilMs) {
      this.runNext();
      count++;
    }
    if (Number.isFinite(untilMs) && untilMs > this.clock.now()) this.clock.advanceTo(untilMs);
    return count;
  }

  /** Removes the root and returns its callback. */
  private pop(): () => void {
    const times = this.times;
    const seqs = this.seqs;
    const callbacks = this.callbacks;
    const top = callbacks[0]!;
    const lastT = times.pop()!;
    const lastS = seqs.pop()!;
    const lastC = callbacks.pop()!;
    const n = times.length;
    if (n === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      if (right < n && (times[right]! < times[left]! || (times[right] === times[left] && seqs[right]! < seqs[left]!))) child = right;
      const ct = times[child]!;
      if (ct > lastT || (ct === lastT && seqs[child]! > lastS)) break;
      times[i] = ct;
      seqs[i] = seqs[child]!;
      callbacks[i] = callbacks[child]!;
      i = child;
    }
    times[i] = lastT;
    seqs[i] = lastS;
    callbacks[i] = lastC;
    return top;
  }
}

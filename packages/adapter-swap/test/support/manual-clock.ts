import type { Clock } from '../../src/index.js';

/** Time that moves only when a test (or the test source) says so. */
export class ManualClock implements Clock {
  constructor(private t = 0) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

/**
 * Time for policies (ARCHITECTURE decision 6): batchers, caches and schedulers read time only through an injected
 * Clock, so the same objects run under the real clock in servers and under simulated time in `@tessera/sim`.
 */

/** Milliseconds from an arbitrary origin; only differences are used. */
export interface Clock {
  now(): number;
}

/** The process's monotonic clock (`performance.now()`). */
export const systemClock: Clock = { now: () => performance.now() };

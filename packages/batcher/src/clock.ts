/** Time for policies (ARCHITECTURE decision 6): the batcher reads time only through an injected Clock. */

/** Milliseconds from an arbitrary origin; only differences are used. */
export interface Clock {
  now(): number;
}

/** The process's monotonic clock (performance.now()). */
export const systemClock: Clock = { now: () => performance.now() };

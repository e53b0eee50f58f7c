/** Milliseconds from an arbitrary origin. Injected so the same cache runs under simulated time (decision 6). */
export interface Clock {
  now(): number;
}

/** The process's monotonic clock (`performance.now()`). */
export const systemClock: Clock = { now: () => performance.now() };

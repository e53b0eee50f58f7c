/**
 * Time for policies (ARCHITECTURE decision 6) is @tessera/core's Clock; the engine re-exports it for its own
 * timing (profilers, the step runner) so callers of the engine need not import core for it.
 */
export { type Clock, systemClock } from '@tessera/core';

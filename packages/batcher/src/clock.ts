/** One Clock for every policy package: @tessera/core's (decision 6). */
export { type Clock, systemClock } from '@tessera/core';

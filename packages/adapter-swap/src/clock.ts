/** One Clock for every policy package: @tessera/engine's (decision 6). */
export { type Clock, systemClock } from '@tessera/engine';

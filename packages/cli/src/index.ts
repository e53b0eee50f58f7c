/**
 * @tessera/cli: the `tessera` command (bin/tessera.mjs runs {@link main}). Exported for tests and for tools that
 * embed the command: its commands, servers, and the colour and progress decisions it makes.
 */
export { benchUsage, COMMANDS, main, processIo, serveUsage, type TesseraIo, usage, version } from './cli.js';
export { type Colors, colorEnabled, palette, type StreamLike } from './color.js';
export { barsEnabled, type BarStream, createProgressBar } from './progress.js';
export { findBenchDir, repositoryRoot } from './repository.js';
export { loadServer, type ServerEntry, type ServerMain, SERVERS, ServerUnavailableError, SHARED_SERVER_FLAGS, type SharedFlag } from './servers.js';
export { didYouMean, editDistance } from './suggest.js';

/**
 * @tessera/server-kit: what Tessera's reference servers (apps/punica, apps/pets) share.
 *
 * - plugins/: fastify plugin definition, graceful close, schema-validation error messages
 * - cli/: flag and environment parsing, the main() bootstrap, listening with a graceful shutdown, the repository root
 * - worker/: starting the engine worker thread (source or built), with its start-up handshake
 *
 * The dev bootstrap for TypeScript workers is the separate export `@tessera/server-kit/worker-dev.mjs`.
 */
export { definePlugin } from './plugins/define-plugin.js';
export { gracefulClose } from './plugins/graceful-close.js';
export { describeSchemaErrors, paramOf, type SchemaError } from './plugins/schema-errors.js';
export { flagOrEnv, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from './cli/flags.js';
export { isEntryPoint, runMain, usageExitCode } from './cli/main.js';
export { listenWithGrace, type ListenWithGraceOptions } from './cli/listen.js';
export { repositoryRoot } from './cli/repository.js';
export { startWorker, type StartedWorker, type StartWorkerOptions, watchWorker, workerEntry, type WorkerEntry } from './worker/start.js';

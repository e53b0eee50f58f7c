/**
 * @tessera/server-kit: the app kit of Tessera's servers (apps/punica, apps/pets, apps/arlo, and the next one).
 *
 * - http/: createTesseraServer (fastify with the engine host, /health, /metrics, graceful close) and errors → HTTP
 *   by kind in one place (HttpError, EngineUnavailableError, STATUS_BY_KIND)
 * - host/: EngineHost, the one interface routes talk to, and StreamEngineHost for transports that yield streams (Redis)
 * - worker/: WorkerEngineClient, the front side of the host protocol over a worker thread (the host side is
 *   @tessera/cluster's serveWorkerHost), and the worker's start-up
 * - http/streams: answering with a request's stream (cancel on disconnect, status after the first output, SSE);
 *   http/uploads: a file named by a path under a root, or uploaded with a JSON field (multipart), checked;
 *   http/metrics: a server's metrics as one table, counters that follow an engine's cumulative totals
 * - openai/: OpenAI's generation endpoints (/v1/completions, /v1/chat/completions: schemas, chat template, sampling
 *   and limits, JSON or SSE answers) over any engine that streams tokens
 * - plugins/: fastify plugins (fastify-plugin), graceful close, schema-validation error messages
 * - cli/: flag and environment parsing, the main() bootstrap, listening with a graceful shutdown, the repository root
 *
 * The dev bootstrap for TypeScript workers is the separate export `@tessera/server-kit/worker-dev.mjs`.
 */
export { type ClosableEngine, createTesseraServer, engineHealth, type ServerBaseOptions, type TesseraServerOptions } from './http/server.js';
export {
  describeByCode,
  EngineUnavailableError,
  type ErrorMappingOptions,
  type ErrorReply,
  type ErrorType,
  type ErrorWording,
  errorBody,
  errorReply,
  errorType,
  HttpError,
  type HttpErrorOptions,
  httpStatus,
  STATUS_BY_KIND,
} from './http/errors.js';
export {
  type EngineHost,
  type EngineHostEvents,
  type EngineProtocol,
  type ProtocolStream,
  type RequestEnd,
  StreamEngineHost,
  type StreamTransport,
} from './host/engine-host.js';
export { WorkerEngineClient, type WorkerEngineEvents, type WorkerEngineOptions } from './worker/engine-client.js';
export { openStream, sendSse, SSE_HEADERS, sseData } from './http/streams.js';
export { type JsonAndFileForm, jsonAndFileForm, type MultipartPart, readFileUnderRoot, type ReadUnderRootOptions } from './http/uploads.js';
export { CumulativeTotals, defineMetrics, type MetricOf, type MetricSpec } from './http/metrics.js';
export { openaiGenerationRoutes, promptTokens } from './openai/routes.js';
export { generationMetrics, type GenerationSample, LATENCY_BUCKETS } from './openai/metrics.js';
export {
  badRequest,
  completionBudget,
  completionId,
  type ChoiceOutcome,
  type ChoicePlan,
  DEFAULT_COMPLETION_MAX_TOKENS,
  type DeliveredToken,
  type GenerationBackend,
  MAX_CHOICES,
  planChoices,
  sampleSeed,
  type GenerationPlan,
  openAiFinishReason,
  rejectUnsupportedSampling,
  respond,
  type ResponseShape,
  type SamplingBody,
  samplingOf,
  stopStrings,
  usageOf,
} from './openai/generation.js';
export { CHAT_ROLE_PREFIX, messageText, renderChat } from './openai/chat-template.js';
export { type AdapterEntry, type BaseModelEntry, ModelRegistry, modelNotFound } from './openai/model-registry.js';
export {
  ChatCompletionRequest,
  ChatCompletionResponse,
  ChatLogprobs,
  ChatMessage,
  CompletionLogprobs,
  CompletionRequest,
  CompletionResponse,
  DetokenizeRequest,
  DetokenizeResponse,
  ErrorBody,
  FinishReason,
  Nullable,
  UNION_FIELD_HINTS as OPENAI_UNION_FIELD_HINTS,
  TokenizeRequest,
  TokenizeResponse,
  Usage,
} from './openai/schemas.js';
export { chatLogprobsOf, completionLogprobsOf, LOGPROB_FLOOR, tokenText } from './openai/logprobs.js';
export { definePlugin } from './plugins/define-plugin.js';
export { gracefulClose } from './plugins/graceful-close.js';
export { describeSchemaErrors, paramOf, type SchemaError } from './plugins/schema-errors.js';
export { flagOrEnv, type FlagSpec, flagTable, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from './cli/flags.js';
export { isEntryPoint, parseCommandLine, runMain, stopOnSignal, usageExitCode } from './cli/main.js';
export { listenWithGrace, type ListenWithGraceOptions } from './cli/listen.js';
export { isInside, realDirectory, repositoryRoot, subdirectories } from './cli/repository.js';
export { ensureGenerated, generatedDirectory } from './cli/generated-dir.js';
export { startWorker, type StartedWorker, type StartWorkerOptions, watchWorker, workerEntry, type WorkerEntry } from './worker/start.js';

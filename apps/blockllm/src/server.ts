/**
 * The composition root. A request's path through the app:
 *
 *   server-kit   /v1/completions and /v1/chat/completions (OpenAI's schemas, chat template, SSE), /health, /metrics
 *   this file    `model` → the application (404 for a name the zoo does not serve); /v1/models; the zoo routes:
 *                POST /v1/zoo/models (ingest a HF Llama or PEFT LoRA directory by path), GET /v1/zoo/models,
 *                GET /v1/zoo/blocks (blocks with the applications sharing them), GET /v1/zoo (both + memory split);
 *                GET /v1/placement, POST /v1/placement/jobs, GET /v1/placement/jobs/:id (several devices)
 *     → BlockllmHost (engine/protocol.ts): server-kit's WorkerEngineClient ⇄ engine/worker.ts (zoo, DevicePool,
 *       ChainExecutor, the step loop of engine/step-loop.ts)
 *
 * `buildServer` returns a ready fastify instance (the engine is up; tests drive it with `inject` or `listen`);
 * `listen` adds the graceful shutdown.
 */
import { basename, resolve } from 'node:path';

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';

import type { MigrationRates } from '@tessera/block-zoo';
import { readHfConfig, TextTokenizer } from '@tessera/engine';
import {
  createTesseraServer,
  engineHealth,
  ErrorBody,
  listenWithGrace,
  type ListenWithGraceOptions,
  modelNotFound,
  openaiGenerationRoutes,
  type ServerBaseOptions,
} from '@tessera/server-kit';

import { type AppSummary, type BlockllmHost, startWorkerHost } from './engine/protocol.js';
import { blockllmErrors } from './errors.js';
import { blockllmMetrics } from './metrics.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The engine worker: zoo, device pool, chain executor and step loop. */
    engine: BlockllmHost;
    /** The applications served, by id (kept in step with the worker's zoo by the ingest route). */
    apps: Map<string, AppSummary>;
  }
}

export interface ServerOptions extends ServerBaseOptions {
  /** The foundation's Hugging Face Llama directory (its tokenizer serves every application). */
  modelDir: string;
  /** The foundation's id in the zoo and the API (default: the directory's name). */
  modelName?: string | undefined;
  /** The zoo's tensor store directory (default: `<modelDir>/../zoo`); an existing zoo snapshot there is served. */
  zooDir?: string | undefined;
  /** The demo's files (generateDemoFiles): its fine-tunes join the zoo when the zoo is created. */
  demoRoot?: string | undefined;
  /** Most running sequences per chain step (default 32). */
  maxBatch?: number | undefined;
  /**
   * Cohorts of running sequences, each with its own step in flight, so that one cohort's blocks run on one device
   * while another's run on the next (default 2 with several devices, blocks provisioning and no speculation, else 1).
   */
  cohorts?: number | undefined;
  /** KV pages (16 tokens each) of every block's own cache (default 64). */
  kvPages?: number | undefined;
  /** CPU kernel threads of the engine (default: TESSERA_THREADS or all cores). */
  threads?: number | undefined;
  /** Serve POST /v1/zoo/models (default true). */
  ingestAdmin?: boolean | undefined;
  /** When set, ingested directories must lie inside it. */
  ingestRoot?: string | undefined;
  /** Engine devices, each a worker thread with its own byte budget (default 1: every block in the engine worker). */
  devices?: number | undefined;
  /** Parameter bytes per device (default 1.5 × the served blocks' bytes / devices). */
  deviceBytes?: number | undefined;
  /** 'blocks' (BlockLLM, default) or 'per-model' (each application's whole model on its own: the PM baseline). */
  provisioning?: 'blocks' | 'per-model' | undefined;
  /** Scale-out: an instance routed more than 0.8 × this many sequences gets a replica on another device (default maxBatch; 0 off). */
  scaleOutQueue?: number | undefined;
  /**
   * Adaptive serving (several devices): a route may run an equivalent segment of another weight set of the same
   * family in place of a run of the chain's blocks (default true; false: the chain's own blocks only).
   */
  adaptive?: boolean | undefined;
  /**
   * Variant batching (several devices, blocks provisioning): a fused PE block's rows run in one batch with those of
   * the base block it modifies, each row with its own delta, so the base weights pass once (default true).
   */
  variantBatching?: boolean | undefined;
  /**
   * Cohort homes (several cohorts, blocks provisioning): cohort i's new sequences route on device i mod n where it
   * holds their blocks, so a cohort's step is one device's program instead of a join across devices (default true).
   */
  cohortHomes?: boolean | undefined;
  /** maxQueueLen of algorithm 5.4: a new sequence's first hop leaves an instance routed this many sequences for an equivalent one (default: no bound). */
  maxQueueLen?: number | undefined;
  /** The placement policy of the serving core (default 'locality'). */
  placementPolicy?: 'locality' | 'frag-min' | undefined;
  /**
   * Speculative execution on surrogates (several devices): the instances selectSpeculation picks run a surrogate
   * beside them and their successors on other devices run on its prediction, verified at `acceptCosine` (0.95) and
   * repaired on the real output below it; `fraction` of the instances speculate (0.1). Off when absent.
   */
  speculation?: { acceptCosine?: number | undefined; fraction?: number | undefined } | undefined;
  /**
   * How a migrate job moves the K/V of its instance's running sequences: 'overlapped' (default; design note 5.7:
   * the front recomputed on the target from the inputs the source logged while the back is copied, split by the
   * serving core's planMigration at the measured rates, or at `rates` where given) or 'copy' (every page).
   */
  kvMigration?: 'copy' | 'overlapped' | { mode: 'copy' | 'overlapped'; rates?: Partial<MigrationRates> } | undefined;
  /** Run the placement control plane on BullMQ at this Redis (else in-process). */
  redis?: { url: string; prefix: string } | undefined;
}

function kvMigrationOf(o: ServerOptions['kvMigration']): { mode: 'copy' | 'overlapped'; rates: Partial<MigrationRates> | null } {
  if (o === undefined) return { mode: 'overlapped', rates: null };
  if (typeof o === 'string') return { mode: o, rates: null };
  return { mode: o.mode, rates: o.rates ?? null };
}

const IngestBody = Type.Object(
  {
    id: Type.String({ minLength: 1 }),
    path: Type.String({ minLength: 1 }),
    kind: Type.Optional(Type.Union([Type.Literal('lora'), Type.Literal('full'), Type.Literal('foundation')])),
    base: Type.Optional(Type.String({ minLength: 1 })),
  },
  { additionalProperties: false },
);

const PlacementJobBody = Type.Union([
  Type.Object({ kind: Type.Literal('deploy'), block: Type.String({ minLength: 1 }), device: Type.String({ minLength: 1 }) }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal('evict'), block: Type.String({ minLength: 1 }) }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal('migrate'), block: Type.String({ minLength: 1 }), device: Type.String({ minLength: 1 }) }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal('place'), policy: Type.Optional(Type.Union([Type.Literal('locality'), Type.Literal('frag-min')])) }, { additionalProperties: false }),
]);

/** The placement across devices and its control plane: the view, and placement jobs (queued, run between steps). */
const placementRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const errors = { 200: Type.Unknown(), 202: Type.Unknown(), '4xx': ErrorBody, '5xx': ErrorBody };
  app.get('/v1/placement', { schema: { response: errors } }, () => app.engine.call('placement', null));
  app.post('/v1/placement/jobs', { schema: { body: PlacementJobBody, response: errors } }, async (request, reply) => reply.code(202).send(await app.engine.call('placementSubmit', request.body)));
  app.get('/v1/placement/jobs/:id', { schema: { params: Type.Object({ id: Type.String({ pattern: '^[0-9]{1,12}$' }) }), response: errors } }, (request) =>
    app.engine.call('placementJob', { id: request.params.id }),
  );
};

const zooRoutes: FastifyPluginAsyncTypebox<{ ingest: boolean }> = async (app, options) => {
  const errors = { 200: Type.Unknown(), 201: Type.Unknown(), '4xx': ErrorBody, '5xx': ErrorBody };
  app.get('/v1/zoo', { schema: { response: errors } }, () => app.engine.call('zoo', null));
  app.get('/v1/zoo/models', { schema: { response: errors } }, async () => ({ object: 'list', data: (await app.engine.call('zoo', null)).apps }));
  app.get('/v1/zoo/blocks', { schema: { response: errors } }, async () => ({ object: 'list', data: (await app.engine.call('zoo', null)).blocks }));
  if (!options.ingest) return;
  app.post('/v1/zoo/models', { schema: { body: IngestBody, response: errors } }, async (request, reply) => {
    const summary = await app.engine.call('ingest', request.body);
    app.apps.set(summary.id, summary);
    return reply.code(201).send(summary);
  });
};

const modelRoutes: FastifyPluginAsyncTypebox<{ created: number; maxModelLen: number }> = async (app, options) => {
  const card = (a: AppSummary) => ({
    id: a.id,
    object: 'model',
    created: options.created,
    owned_by: 'tessera',
    root: a.base ?? a.id,
    parent: a.base,
    max_model_len: options.maxModelLen,
    kind: a.kind,
    method: a.method,
    blocks: a.labels,
  });
  app.get('/v1/models', async () => ({ object: 'list', data: [...app.apps.values()].map(card) }));
  app.get('/v1/models/:model', { schema: { params: Type.Object({ model: Type.String() }), response: { 200: Type.Unknown(), '4xx': ErrorBody } } }, async (request) => {
    const a = app.apps.get(request.params.model);
    if (!a) throw modelNotFound(request.params.model);
    return card(a);
  });
};

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const modelDir = resolve(options.modelDir);
  const config = readHfConfig(modelDir);
  if (config.family !== 'decoder') throw new Error(`${modelDir} holds a ${config.architecture}; BlockLLM serves decoder (causal LM) models`);
  const tokenizer = TextTokenizer.fromDir(modelDir);
  const foundation = options.modelName ?? basename(modelDir);

  return createTesseraServer<BlockllmHost>({
    name: 'tessera-blockllm',
    logger: options.logger,
    errors: blockllmErrors,
    async engine(app) {
      app.log.info({ model: modelDir }, 'starting the BlockLLM engine worker');
      const engine = await startWorkerHost(
        {
          zooDir: resolve(options.zooDir ?? resolve(modelDir, '..', 'zoo')),
          foundationDir: modelDir,
          foundation,
          maxBatch: options.maxBatch ?? 32,
          // Two cohorts pipeline a chain's blocks across devices; per-model provisioning runs each model on one
          // device already (its devices work side by side), and speculation follows one step at a time.
          cohorts: options.cohorts ?? ((options.devices ?? 1) > 1 && (options.provisioning ?? 'blocks') === 'blocks' && !options.speculation ? 2 : 1),
          kvPages: options.kvPages ?? 64,
          threads: options.threads ?? null,
          demoRoot: options.demoRoot ?? null,
          ingestRoot: options.ingestRoot ?? null,
          devices: options.devices ?? 1,
          deviceBytes: options.deviceBytes ?? null,
          provisioning: options.provisioning ?? 'blocks',
          placementPolicy: options.placementPolicy ?? 'locality',
          scaleOutQueue: options.scaleOutQueue ?? null,
          adaptive: options.adaptive ?? true,
          variantBatching: options.variantBatching ?? true,
          cohortHomes: options.cohortHomes ?? true,
          maxQueueLen: options.maxQueueLen ?? null,
          kvMigration: kvMigrationOf(options.kvMigration),
          speculation: options.speculation ? { acceptCosine: options.speculation.acceptCosine ?? 0.95, fraction: options.speculation.fraction ?? 0.1 } : null,
          redis: options.redis ?? null,
        },
        { onProgress: (line) => app.log.info(line), ...(options.engineShutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.engineShutdownTimeoutMs } : {}) },
      );
      app.log.info({ device: engine.ready.model.device, apps: engine.ready.apps.length }, 'engine ready');
      engine.on('crash', (err) => app.log.error({ err }, 'the engine worker crashed; /health reports unhealthy'));
      return engine;
    },
    health: (engine) => engineHealth(engine, { model: foundation, device: engine.ready.model.device }),
    metrics: (registry, engine) => blockllmMetrics(registry, engine, { model: foundation }),
    async routes(app, engine) {
      app.decorate('apps', new Map(engine.ready.apps.map((a) => [a.id, a])));
      await app.register(openaiGenerationRoutes, {
        backend: {
          resolve: (model) => {
            if (!app.apps.has(model)) throw modelNotFound(model);
            return { adapter: model };
          },
          tokenizer,
          contextLength: config.maxPositions,
          vocabSize: config.vocabSize,
          submit: (request) => engine.submit({ request, attempt: 0, generated: [] }),
          cancel: (id) => engine.cancel(id),
          errors: blockllmErrors,
        },
      });
      await app.register(modelRoutes, { created: Math.floor(Date.now() / 1000), maxModelLen: config.maxPositions });
      await app.register(zooRoutes, { ingest: options.ingestAdmin ?? true });
      await app.register(placementRoutes);
    },
  });
}

export type ListenOptions = Partial<ListenWithGraceOptions>;

/** Listens (default 127.0.0.1:8000) with server-kit's graceful shutdown; resolves with the address. */
export async function listen(app: FastifyInstance, options: ListenOptions = {}): Promise<string> {
  return listenWithGrace(app, { host: '127.0.0.1', port: 8000, ...options });
}

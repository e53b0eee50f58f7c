/**
 * The composition root. A request's path through the app:
 *
 *   server-kit   fastify, /health, /metrics, errors by kind, graceful close
 *   routes       POST /v1/infer (text or token ids, checked here) → ArloService (service.ts): estimator →
 *                MultiLevelDispatcher → the instance's queue → its runtime worker (runtimes/) → logits
 *                GET /v1/allocation, POST /v1/allocation/solve (Runtime Scheduler + replacement), POST /v1/profile
 *
 * Start-up: the real instances start (worker threads, one intra-op thread each), instance 0 profiles every
 * runtime length through length-scheduler's profiler (unless service times are given), the emulated instances
 * take the profiled times, and a first allocation is solved from the prior and carried out.
 */
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';

import { TextTokenizer, readHfConfig } from '@tessera/engine';
import { type DispatchPolicy, makeRuntimeProfile, type RuntimeProfile } from '@tessera/length-scheduler';
import { createTesseraServer, HttpError, listenWithGrace, type ListenWithGraceOptions, type ServerBaseOptions } from '@tessera/server-kit';

import { connectClusterInstances } from './cluster/queues.js';
import { arloMetrics } from './metrics.js';
import { type ProfilePoint, profileInstance, type Runtime, type RuntimeKind, startInstances, type ThreadRuntime } from './runtimes/index.js';
import { ArloService } from './service.js';

declare module 'fastify' {
  interface FastifyInstance {
    arlo: ArloService;
  }
}

export interface ServerOptions extends ServerBaseOptions {
  /** A BertForSequenceClassification directory (config.json, model.safetensors, tokenizer.json). */
  modelDir: string;
  /** Runtime lengths, ascending; each ≤ the model's max positions. */
  lengths: readonly number[];
  runtime?: RuntimeKind;
  /** Real instances (worker threads, default 2), and all instances (past `workers` they are emulated; default `workers`). */
  workers?: number;
  instances?: number;
  maxBatch?: number;
  sloMs?: number;
  periodMs?: number;
  /** t_i per runtime (ms): skips the start-up profile (tests, or a profile measured before). */
  serviceMs?: readonly number[];
  /** Timed runs per runtime in the start-up profile (default 20). */
  profileReps?: number;
  policy?: 'arlo' | 'ilb' | 'ig';
  /** Expected Q_i before any traffic. */
  priorQ?: readonly number[];
  /** Distributed mode: the instances are BullMQ queues on Redis served by `tessera-arlo --role worker`. */
  cluster?: { redisUrl: string; prefix: string; instanceIds: readonly string[] };
}

const POLICY: Record<NonNullable<ServerOptions['policy']>, DispatchPolicy> = { arlo: { kind: 'arlo' }, ilb: { kind: 'ideal' }, ig: { kind: 'greedy' } };

const InferBody = Type.Object({ input_ids: Type.Optional(Type.Array(Type.Integer())), text: Type.Optional(Type.String()) }, { additionalProperties: false });
const SolveBody = Type.Object({ q: Type.Optional(Type.Array(Type.Number({ minimum: 0 }))) }, { additionalProperties: false });
const ProfileBody = Type.Object(
  { reps: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })), batches: Type.Optional(Type.Array(Type.Integer({ minimum: 1, maximum: 64 }), { minItems: 1 })), apply: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);

function bad(message: string, code: string, param: string | null, details: Record<string, number> = {}): HttpError {
  return new HttpError(400, code, message, { param, details });
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const config = readHfConfig(options.modelDir);
  if (config.family !== 'encoder') throw bad(`${options.modelDir} holds a ${config.architecture}; Arlo serves an encoder`, 'not_an_encoder', 'model');
  const tokenizer = TextTokenizer.fromDir(options.modelDir);
  const lengths = [...options.lengths];
  const longest = lengths[lengths.length - 1]!;
  if (longest > config.maxPositions) throw bad(`runtime length ${longest} exceeds the model's ${config.maxPositions} positions`, 'length_too_large', 'lengths');
  const sloMs = options.sloMs ?? 100;
  const workers = options.workers ?? 2;
  const count = options.cluster ? options.cluster.instanceIds.length : Math.max(1, options.instances ?? workers);
  // Longest first, then down: every length a request can have is served from the first moment.
  const placement = Array.from({ length: count }, (_, k) => lengths[lengths.length - 1 - (k % lengths.length)]!);
  let profileTable: ProfilePoint[] = [];

  return createTesseraServer<ArloService>({
    name: 'tessera-arlo',
    logger: options.logger,
    async engine(app) {
      let real: ThreadRuntime[] = [];
      let instances: Runtime[];
      let profiles: RuntimeProfile[];
      const fromTimes = (t: readonly number[]) => lengths.map((maxLength, i) => makeRuntimeProfile({ maxLength, serviceMs: t[i]!, sloMs }));
      if (options.serviceMs && options.serviceMs.length !== lengths.length) {
        throw bad(`${options.serviceMs.length} service times for ${lengths.length} runtimes`, 'bad_service_ms', 'service_ms');
      }
      if (options.cluster) {
        if (!options.serviceMs) throw bad('distributed mode needs service times per runtime (--service-ms), measured on a worker', 'bad_service_ms', 'service_ms');
        profiles = fromTimes(options.serviceMs);
        instances = await connectClusterInstances({ ...options.cluster, placement, maxBatch: options.maxBatch ?? 1, vocabSize: config.vocabSize });
      } else {
        app.log.info({ workers: Math.min(workers, count), instances: count, runtime: options.runtime ?? 'native' }, 'starting the runtime workers');
        const started = await startInstances({ kind: options.runtime ?? 'native', modelDir: options.modelDir, placement, workers, maxBatch: options.maxBatch ?? 1 });
        real = started.real;
        if (options.serviceMs) profiles = fromTimes(options.serviceMs);
        else if (real[0]) {
          const measured = await profileInstance(real[0], { lengths, sloMs, reps: options.profileReps ?? 20 });
          profiles = measured.profiles;
          profileTable = measured.table;
        } else throw bad('with no real instance (--workers 0), give the service times (--service-ms)', 'bad_service_ms', 'service_ms');
        // Read at each call, so a new profile (POST /v1/profile) retimes the emulated instances too.
        instances = [...real, ...started.emulate((length) => service.profiles[lengths.indexOf(length)]!.serviceMs)];
      }
      const service = new ArloService({
        lengths,
        profiles,
        instances,
        sloMs,
        policy: POLICY[options.policy ?? 'arlo'],
        ...(options.periodMs ? { periodMs: options.periodMs } : {}),
        ...(options.priorQ ? { priorQ: options.priorQ } : {}),
      });
      await service.solve();
      const timer = setInterval(() => service.poll(), 1000);
      timer.unref();
      app.addHook('onClose', async () => clearInterval(timer));
      return service;
    },
    health: (service) => ({ healthy: service.healthy, body: { status: service.healthy ? 'ok' : 'unhealthy', lengths, instances: service.instances().length } }),
    metrics: (registry, service) => arloMetrics(registry, service),
    async routes(app, service) {
      app.decorate('arlo', service);
      const labels = config.family === 'encoder' ? config.labels : undefined;

      app.post('/v1/infer', { schema: { body: InferBody } }, async (request) => {
        const body = request.body as { input_ids?: number[]; text?: string };
        if ((body.input_ids === undefined) === (body.text === undefined)) throw bad('give exactly one of input_ids and text', 'bad_input', null);
        const ids = body.input_ids ?? tokenizer.encode(body.text!);
        const param = body.input_ids ? 'input_ids' : 'text';
        if (ids.length === 0) throw bad('the input has no tokens', 'empty_input', param);
        if (ids.length > longest) throw bad(`the input has ${ids.length} tokens; the longest runtime takes ${longest}`, 'input_too_long', param, { tokens: ids.length, max_length: longest });
        const outside = ids.findIndex((id) => id < 0 || id >= config.vocabSize);
        if (outside >= 0) throw bad(`input_ids[${outside}] = ${ids[outside]} is not a token id (vocabulary size ${config.vocabSize})`, 'token_out_of_vocab', `input_ids[${outside}]`, { vocab_size: config.vocabSize });
        const r = await service.infer(ids);
        const label = r.logits && labels ? labels[r.logits.indexOf(Math.max(...r.logits))] : undefined;
        return { logits: r.logits, ...(label === undefined ? {} : { label }), tokens: ids.length, runtime: r.runtime, paddedTo: r.paddedTo, instance: r.instance, queueMs: r.queueMs, execMs: r.execMs };
      });

      const allocationView = () => {
        const d = service.allocation;
        return {
          lengths,
          slo_ms: sloMs,
          profiles: service.profiles.map((p) => ({ length: p.maxLength, service_ms: p.serviceMs, capacity: p.capacity })),
          allocation: d && { instances: d.result.instances, solver: d.result.solver, mean_latency_ms: d.result.meanLatencyMs, overloaded: d.result.overloaded, reason: d.reason, q: d.snapshot.q },
          serving: service.dispatcher.activeCounts(),
          instances: service.instances(),
        };
      };
      app.get('/v1/allocation', async () => allocationView());
      app.post('/v1/allocation/solve', { schema: { body: Type.Optional(SolveBody) } }, async (request) => {
        const q = (request.body as { q?: number[] } | undefined)?.q;
        if (q !== undefined && q.length !== lengths.length) throw bad(`q has ${q.length} entries for ${lengths.length} runtimes`, 'bad_q', 'q');
        await service.solve(q);
        return allocationView();
      });
      app.post('/v1/profile', { schema: { body: Type.Optional(ProfileBody) } }, async (request) => {
        const body = (request.body ?? {}) as { reps?: number; batches?: number[]; apply?: boolean };
        const first = service.realInstance();
        if (!first) throw new HttpError(409, 'no_real_instance', 'no real runtime instance in this process to profile (emulated or remote only)');
        const measured = await service.exclusive(first.id, () => profileInstance(first, { lengths, sloMs, reps: body.reps ?? 10, batches: body.batches ?? [1] }));
        profileTable = measured.table;
        if (body.apply !== false) service.setProfiles(measured.profiles);
        return { applied: body.apply !== false, runtime: first.kind, instance: first.id, table: profileTable, profiles: measured.profiles.map((p) => ({ length: p.maxLength, service_ms: p.serviceMs, capacity: p.capacity })) };
      });
      app.get('/v1/profile', async () => ({ table: profileTable }));
    },
  });
}

/** Listens (default 127.0.0.1:8000) with server-kit's graceful shutdown; resolves with the address. */
export async function listen(app: FastifyInstance, options: Partial<ListenWithGraceOptions> = {}): Promise<string> {
  return listenWithGrace(app, { host: '127.0.0.1', port: 8000, ...options });
}

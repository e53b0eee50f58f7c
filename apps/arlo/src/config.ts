/**
 * Command-line flags and their ARLO_* environment equivalents (a flag wins over its variable).
 */
import { flagOrEnv, flagTable, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from '@tessera/server-kit';

export { UsageError };

const FLAGS = flagTable([
  [
    'Model and runtimes',
    [
      { flag: 'model', arg: '<dir>', help: 'Hugging Face BertForSequenceClassification directory', env: 'ARLO_MODEL' },
      { flag: 'demo', help: 'serve the demo even if --model is set', env: 'ARLO_DEMO=1' },
      { flag: 'demo-dir', arg: '<dir>', help: 'where the demo is generated and cached', env: 'ARLO_DEMO_DIR' },
      { flag: 'lengths', arg: '<l,l,…>', help: 'runtime lengths, ascending (demo: 32,64,128)', env: 'ARLO_LENGTHS' },
      { flag: 'runtime', arg: '<kind>', help: 'native (our encoder, padTo) | ort (one static ONNX graph per length) (native)', env: 'ARLO_RUNTIME' },
      { flag: 'workers', arg: '<n>', help: 'real instances, one worker thread with one intra-op thread each (2)', env: 'ARLO_WORKERS' },
      { flag: 'instances', arg: '<n>', help: 'all instances; those past --workers sleep for the profiled time (= workers)', env: 'ARLO_INSTANCES' },
      { flag: 'max-batch', arg: '<n>', help: "each runtime's static batch (1, as in the paper)", env: 'ARLO_MAX_BATCH' },
    ],
  ],
  [
    'Scheduling',
    [
      { flag: 'slo-ms', arg: '<ms>', help: 'the SLO: capacity M_i = floor(SLO / t_i) (100)', env: 'ARLO_SLO_MS' },
      { flag: 'period-s', arg: '<s>', help: 'allocation period (120)', env: 'ARLO_PERIOD_S' },
      { flag: 'service-ms', arg: '<t,t,…>', help: 'service time per runtime instead of profiling at start', env: 'ARLO_SERVICE_MS' },
      { flag: 'profile-reps', arg: '<n>', help: 'timed runs per runtime of the start-up profile (20)', env: 'ARLO_PROFILE_REPS' },
      { flag: 'policy', arg: '<name>', help: 'arlo (Algorithm 1) | ilb (ideal runtime) | ig (least busy) (arlo)', env: 'ARLO_POLICY' },
    ],
  ],
  [
    'HTTP and cluster',
    [
      { flag: 'host', arg: '<addr>', help: 'listen address (default 127.0.0.1)', env: 'ARLO_HOST' },
      { flag: 'port', arg: '<n>', help: 'listen port (default 8000)', env: 'ARLO_PORT' },
      { flag: 'log-level', arg: '<level>', help: 'fatal|error|warn|info|debug|trace|silent (info)', env: 'ARLO_LOG_LEVEL' },
      { flag: 'redis', arg: '<url>', help: 'distributed mode: one BullMQ queue per instance on this Redis', env: 'ARLO_REDIS_URL' },
      { flag: 'role', arg: '<role>', help: 'with --redis: frontend (HTTP + dispatcher) | worker (serves --instance-ids)', env: 'ARLO_ROLE' },
      { flag: 'instance-ids', arg: '<id,…>', help: 'worker: the instances it serves (each its own queue, concurrency 1)', env: 'ARLO_INSTANCE_IDS' },
      { flag: 'cluster-prefix', arg: '<name>', help: "namespace of the queues (arlo)", env: 'ARLO_CLUSTER_PREFIX' },
      { flag: 'help', short: 'h', help: 'show this help' },
    ],
  ],
]);

export const USAGE = `tessera-arlo: Arlo on one machine, a BERT-style encoder served by static-shape runtimes of several lengths

Usage: tessera-arlo [options]
       pnpm --filter @tessera/arlo start -- [options]

Without --model, serves the demo: a tiny generated encoder (hidden 64, 2 layers, 128 positions) with runtimes at
32, 64 and 128 tokens on two instances, generated once into .tessera/arlo-demo at the repository root.

${FLAGS.usage}

Distributed (BullMQ on Redis): one frontend dispatches to per-instance queues that workers serve, e.g.
  tessera-arlo --redis redis://127.0.0.1:6379 --role worker --instance-ids i0,i1
  tessera-arlo --redis redis://127.0.0.1:6379 --role frontend --instance-ids i0,i1 --service-ms 1,2,4
`;

export type CliConfig = NonNullable<ReturnType<typeof parseCli>>;

const POLICIES = ['arlo', 'ilb', 'ig'] as const;

function numberList(name: string, value: string | undefined, integer: boolean): number[] | undefined {
  if (value === undefined) return undefined;
  const list = value.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !(n > 0) || (integer && !Number.isInteger(n)))) {
    throw new UsageError(`${name} must be a comma-separated list of positive ${integer ? 'integers' : 'numbers'}, got ${JSON.stringify(value)}`);
  }
  return list;
}

/** Parses argv (without node and the script) and the environment. Returns null for --help. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = process.env) {
  const values = parseFlags(argv, FLAGS.options);
  if (values.help) return null;
  const str = flagOrEnv(values, env);
  const workers = parseIntegerFlag('--workers', str('workers', 'ARLO_WORKERS'), 0, 256) ?? 2;
  const instances = parseIntegerFlag('--instances', str('instances', 'ARLO_INSTANCES'), 1, 100_000) ?? Math.max(1, workers);
  if (instances < workers) throw new UsageError(`--instances (${instances}) must be at least --workers (${workers})`);
  const role = parseChoiceFlag('--role', str('role', 'ARLO_ROLE'), ['frontend', 'worker'] as const, null);
  const redisUrl = str('redis', 'ARLO_REDIS_URL');
  if ((role === null) !== (redisUrl === undefined)) throw new UsageError('--redis and --role go together (without them everything runs in this process)');
  const instanceIds = str('instance-ids', 'ARLO_INSTANCE_IDS')?.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  if (role !== null && (instanceIds === undefined || instanceIds.length === 0)) throw new UsageError(`--role ${role} needs --instance-ids`);
  return {
    modelDir: str('model', 'ARLO_MODEL'),
    demo: values.demo === true || (parseBooleanFlag('ARLO_DEMO', env.ARLO_DEMO) ?? false),
    demoDir: str('demo-dir', 'ARLO_DEMO_DIR'),
    lengths: numberList('--lengths', str('lengths', 'ARLO_LENGTHS'), true),
    runtime: parseChoiceFlag('--runtime', str('runtime', 'ARLO_RUNTIME'), ['native', 'ort'] as const, 'native'),
    workers,
    instances,
    maxBatch: parseIntegerFlag('--max-batch', str('max-batch', 'ARLO_MAX_BATCH'), 1, 256) ?? 1,
    sloMs: numberList('--slo-ms', str('slo-ms', 'ARLO_SLO_MS'), false)?.[0] ?? 100,
    periodMs: (parseIntegerFlag('--period-s', str('period-s', 'ARLO_PERIOD_S'), 1) ?? 120) * 1000,
    serviceMs: numberList('--service-ms', str('service-ms', 'ARLO_SERVICE_MS'), false),
    profileReps: parseIntegerFlag('--profile-reps', str('profile-reps', 'ARLO_PROFILE_REPS'), 1, 10_000) ?? 20,
    policy: parseChoiceFlag('--policy', str('policy', 'ARLO_POLICY'), POLICIES, 'arlo'),
    host: str('host', 'ARLO_HOST') ?? '127.0.0.1',
    port: parseIntegerFlag('--port', str('port', 'ARLO_PORT'), 0, 65_535) ?? 8000,
    logLevel: parseChoiceFlag('--log-level', str('log-level', 'ARLO_LOG_LEVEL'), LOG_LEVELS, 'info'),
    role,
    redisUrl,
    instanceIds,
    clusterPrefix: str('cluster-prefix', 'ARLO_CLUSTER_PREFIX') ?? 'arlo',
  };
}

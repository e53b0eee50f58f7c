/**
 * Command-line flags and their PUNICA_* environment equivalents (a flag wins over its variable).
 */
import { hostname } from 'node:os';

import { flagOrEnv, flagTable, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from '@tessera/server-kit';

/** What parseCli throws for a bad command line. */
export { UsageError };

const FLAGS = flagTable([
  [
    'Model and adapters',
    [
      { flag: 'model', arg: '<dir>', help: 'Hugging Face Llama-style model directory', env: 'PUNICA_MODEL' },
      { flag: 'model-name', arg: '<id>', help: "the base model's id in the API (default: dir name)", env: 'PUNICA_MODEL_NAME' },
      { flag: 'adapters', arg: '<dir>', help: 'register every subdirectory as a PEFT LoRA adapter', env: 'PUNICA_ADAPTERS' },
      { flag: 'demo', help: 'serve the demo even if --model is set', env: 'PUNICA_DEMO=1' },
      { flag: 'demo-dir', arg: '<dir>', help: 'where the demo is generated and cached', env: 'PUNICA_DEMO_DIR' },
    ],
  ],
  [
    'HTTP',
    [
      { flag: 'host', arg: '<addr>', help: 'listen address (default 127.0.0.1)', env: 'PUNICA_HOST' },
      { flag: 'port', arg: '<n>', help: 'listen port (default 8000)', env: 'PUNICA_PORT' },
      { flag: 'no-adapter-admin', help: 'disable /v1/load_lora_adapter and /v1/unload_lora_adapter', env: 'PUNICA_ADAPTER_ADMIN=0' },
      { flag: 'adapter-root', arg: '<dir>', help: 'runtime-loaded adapters must live inside this dir', env: 'PUNICA_ADAPTER_ROOT' },
      { flag: 'log-level', arg: '<level>', help: 'fatal|error|warn|info|debug|trace|silent (info)', env: 'PUNICA_LOG_LEVEL' },
    ],
  ],
  [
    'Engine',
    [
      { flag: 'max-batch', arg: '<n>', help: 'most sequences per engine step (default 32)', env: 'PUNICA_MAX_BATCH' },
      { flag: 'kv-budget-mib', arg: '<n>', help: 'KV-cache size in MiB (default 64)', env: 'PUNICA_KV_BUDGET_MIB' },
      { flag: 'adapter-budget-mib', arg: '<n>', help: 'device memory for resident adapters (default 64)', env: 'PUNICA_ADAPTER_BUDGET_MIB' },
      { flag: 'host-adapter-budget-mib', arg: '<n>', help: 'host cache of read adapters (default 256, 0 = off)', env: 'PUNICA_HOST_ADAPTER_BUDGET_MIB' },
      { flag: 'threads', arg: '<n>', help: 'CPU kernel threads (default: TESSERA_THREADS or all cores)', env: 'PUNICA_THREADS' },
      { flag: 'weights', arg: '<format>', help: 'f32 (as stored) | int8: Q8_0 linear weights, quantized at load (CPU)', env: 'PUNICA_WEIGHTS' },
      { flag: 'prefix-cache', help: 'reuse the KV pages of shared prompt prefixes (per adapter)', env: 'PUNICA_PREFIX_CACHE=1' },
      { flag: 'fairness', arg: '<policy>', help: "fcfs | vtc: S-LoRA's virtual token counter across adapters (fcfs)", env: 'PUNICA_FAIRNESS' },
    ],
  ],
  [
    'Cluster (BullMQ on Redis; without --role everything runs in this one process)',
    [
      { flag: 'role', arg: '<role>', help: 'frontend | worker | scheduler', env: 'PUNICA_ROLE' },
      { flag: 'redis', arg: '<url>', help: 'Redis of the cluster (default REDIS_URL or redis://127.0.0.1:6379)', env: 'PUNICA_REDIS_URL' },
      { flag: 'cluster-prefix', arg: '<name>', help: "namespace of the cluster's keys and queues (tessera)", env: 'PUNICA_CLUSTER_PREFIX' },
      { flag: 'host-id', arg: '<id>', help: "worker: this host's id; placement ties go to the highest (default: hostname-pid)", env: 'PUNICA_HOST_ID' },
      { flag: 'lightly-loaded', arg: '<f>', help: 'scheduler: a host below f × max batch is lightly loaded (0.5)', env: 'PUNICA_LIGHTLY_LOADED' },
      { flag: 'idle-release-s', arg: '<n>', help: 'scheduler: a host idle this long is releasable (60)', env: 'PUNICA_IDLE_RELEASE_S' },
      { flag: 'help', short: 'h', help: 'show this help' },
    ],
  ],
]);

export const USAGE = `tessera-punica: an OpenAI-compatible multi-LoRA server (Punica on one machine)

Usage: tessera-punica [options]
       pnpm --filter @tessera/punica start -- [options]

Without --model, serves the demo: a tiny generated Llama-style model and eight LoRA adapters, generated once
into .tessera/demo at the repository root (or --demo-dir) and reused afterwards.

${FLAGS.usage}

A cluster is one scheduler, any number of workers and frontends on one Redis, e.g.:
  tessera-punica --role scheduler --redis redis://127.0.0.1:6379
  tessera-punica --role worker --host-id gpu-0 --model <dir> --adapters <dir>     (one per accelerator)
  tessera-punica --role frontend --port 8000 --model <dir> --adapters <dir>       (tokenizer and adapter names)

The kernels run on CUDA when the CUDA addon is built and a GPU answers, else on the CPU (TESSERA_DEVICE=cpu|cuda|auto).
`;

export type CliConfig = NonNullable<ReturnType<typeof parseCli>>;

export type ClusterRole = 'frontend' | 'worker' | 'scheduler';
const ROLES: readonly ClusterRole[] = ['frontend', 'worker', 'scheduler'];
const FAIRNESS = ['fcfs', 'vtc'] as const;
const WEIGHTS = ['f32', 'int8'] as const;

/** Parses argv (without node and the script) and the environment. Returns null for --help. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = process.env) {
  const values = parseFlags(argv, FLAGS.options);
  if (values.help) return null;
  const str = flagOrEnv(values, env);
  const logLevel = parseChoiceFlag('--log-level', str('log-level', 'PUNICA_LOG_LEVEL'), LOG_LEVELS, 'info');
  const role = parseChoiceFlag('--role', str('role', 'PUNICA_ROLE'), ROLES, null);
  const redisFlag = str('redis', 'PUNICA_REDIS_URL');
  if (redisFlag !== undefined && role === null) throw new UsageError('--redis needs --role frontend|worker|scheduler (without a role the server runs alone, without Redis)');
  const lightlyLoaded = Number(str('lightly-loaded', 'PUNICA_LIGHTLY_LOADED') ?? '0.5');
  if (!(lightlyLoaded > 0 && lightlyLoaded <= 1)) throw new UsageError(`--lightly-loaded must be a fraction in (0, 1], got ${JSON.stringify(str('lightly-loaded', 'PUNICA_LIGHTLY_LOADED'))}`);
  return {
    modelDir: str('model', 'PUNICA_MODEL'),
    modelName: str('model-name', 'PUNICA_MODEL_NAME'),
    adaptersDir: str('adapters', 'PUNICA_ADAPTERS'),
    demo: values.demo === true || (parseBooleanFlag('PUNICA_DEMO', env.PUNICA_DEMO) ?? false),
    demoDir: str('demo-dir', 'PUNICA_DEMO_DIR'),
    host: str('host', 'PUNICA_HOST') ?? '127.0.0.1',
    port: parseIntegerFlag('--port', str('port', 'PUNICA_PORT'), 0, 65_535) ?? 8000,
    adapterAdmin: values['no-adapter-admin'] === true ? false : (parseBooleanFlag('PUNICA_ADAPTER_ADMIN', env.PUNICA_ADAPTER_ADMIN) ?? true),
    adapterRoot: str('adapter-root', 'PUNICA_ADAPTER_ROOT'),
    logLevel,
    maxBatch: parseIntegerFlag('--max-batch', str('max-batch', 'PUNICA_MAX_BATCH'), 1, 4096) ?? 32,
    kvBudgetMiB: parseIntegerFlag('--kv-budget-mib', str('kv-budget-mib', 'PUNICA_KV_BUDGET_MIB'), 1) ?? 64,
    adapterBudgetMiB: parseIntegerFlag('--adapter-budget-mib', str('adapter-budget-mib', 'PUNICA_ADAPTER_BUDGET_MIB'), 1) ?? 64,
    hostAdapterBudgetMiB: parseIntegerFlag('--host-adapter-budget-mib', str('host-adapter-budget-mib', 'PUNICA_HOST_ADAPTER_BUDGET_MIB'), 0) ?? 256,
    threads: parseIntegerFlag('--threads', str('threads', 'PUNICA_THREADS'), 1, 1024),
    weights: parseChoiceFlag('--weights', str('weights', 'PUNICA_WEIGHTS'), WEIGHTS, 'f32'),
    prefixCache: values['prefix-cache'] === true || (parseBooleanFlag('PUNICA_PREFIX_CACHE', env.PUNICA_PREFIX_CACHE) ?? false),
    fairness: parseChoiceFlag('--fairness', str('fairness', 'PUNICA_FAIRNESS'), FAIRNESS, 'fcfs'),
    role,
    redisUrl: redisFlag ?? (env.REDIS_URL || 'redis://127.0.0.1:6379'),
    clusterPrefix: str('cluster-prefix', 'PUNICA_CLUSTER_PREFIX') ?? 'tessera',
    hostId: str('host-id', 'PUNICA_HOST_ID') ?? `${hostname()}-${process.pid}`,
    lightlyLoadedFraction: lightlyLoaded,
    idleReleaseSeconds: parseIntegerFlag('--idle-release-s', str('idle-release-s', 'PUNICA_IDLE_RELEASE_S'), 0) ?? 60,
  };
}

/**
 * Command-line flags and their BLOCKLLM_* environment equivalents (a flag wins over its variable).
 */
import { flagOrEnv, flagTable, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from '@tessera/server-kit';

/**
 * V8's heap growth for the server's isolates (--heap-growing-percent). V8 starts marking the old generation as soon
 * as its headroom under the heap limit is below the young generation's capacity. This server's isolates keep small
 * live heaps (25–40 MB: routes, programs, step state) beside 16 MB semi-spaces, and V8's own growth factor (1.3–1.8×
 * here) leaves less headroom than that: each isolate started marking again right after every mark-compact, some
 * 100 mark-compacts in a six-second run, with V8's helper threads on a fifth of two cores. A limit of 4× the live
 * heap (V8's largest dynamic factor) ends that, for up to that many times the live heap in memory.
 */
export const DEFAULT_HEAP_GROWING_PERCENT = 300;

/** What parseCli throws for a bad command line. */
export { UsageError };

const FLAGS = flagTable([
  [
    'Foundation and zoo',
    [
      { flag: 'model', arg: '<dir>', help: "the foundation's Hugging Face Llama directory", env: 'BLOCKLLM_MODEL' },
      { flag: 'model-name', arg: '<id>', help: "the foundation's id in the zoo and the API (default: dir name)", env: 'BLOCKLLM_MODEL_NAME' },
      { flag: 'zoo', arg: '<dir>', help: "the zoo's tensor store; an existing zoo there is served (default <model>/../zoo)", env: 'BLOCKLLM_ZOO' },
      { flag: 'demo', help: 'serve the demo even if --model is set', env: 'BLOCKLLM_DEMO=1' },
      { flag: 'demo-dir', arg: '<dir>', help: 'where the demo is generated and cached', env: 'BLOCKLLM_DEMO_DIR' },
      { flag: 'demo-size', arg: '<size>', help: "tiny|small|medium: the demo foundation's size (tiny)", env: 'BLOCKLLM_DEMO_SIZE' },
    ],
  ],
  [
    'HTTP',
    [
      { flag: 'host', arg: '<addr>', help: 'listen address (default 127.0.0.1)', env: 'BLOCKLLM_HOST' },
      { flag: 'port', arg: '<n>', help: 'listen port (default 8000)', env: 'BLOCKLLM_PORT' },
      { flag: 'no-ingest', help: 'disable POST /v1/zoo/models', env: 'BLOCKLLM_INGEST=0' },
      { flag: 'ingest-root', arg: '<dir>', help: 'ingested directories must live inside this dir', env: 'BLOCKLLM_INGEST_ROOT' },
      { flag: 'log-level', arg: '<level>', help: 'fatal|error|warn|info|debug|trace|silent (info)', env: 'BLOCKLLM_LOG_LEVEL' },
    ],
  ],
  [
    'Engine',
    [
      { flag: 'max-batch', arg: '<n>', help: 'most running sequences, over all cohorts (default 32)', env: 'BLOCKLLM_MAX_BATCH' },
      { flag: 'cohorts', arg: '<n>', help: 'cohorts of running sequences with a step each in flight, pipelined across devices (default 2 with --devices > 1 and blocks provisioning, else 1; 1 with --speculate)', env: 'BLOCKLLM_COHORTS' },
      { flag: 'kv-pages', arg: '<n>', help: "KV pages (16 tokens) of each block's own cache (default 64)", env: 'BLOCKLLM_KV_PAGES' },
      { flag: 'threads', arg: '<n>', help: 'CPU kernel threads (default: TESSERA_THREADS or all cores; 1 per device with --devices > 1)', env: 'BLOCKLLM_THREADS' },
      { flag: 'heap-growing-percent', arg: '<n>', help: "V8's heap limit over the live heap after a full GC, in % (default 300: 4×; 0: V8's own)", env: 'BLOCKLLM_HEAP_GROWING_PERCENT' },
    ],
  ],
  [
    'Devices and placement',
    [
      { flag: 'devices', arg: '<n>', help: 'engine devices, each a worker thread with its own byte budget (default 1)', env: 'BLOCKLLM_DEVICES' },
      { flag: 'device-mb', arg: '<mb>', help: 'block parameter MiB per device (default 1.5 × the served blocks / devices)', env: 'BLOCKLLM_DEVICE_MB' },
      { flag: 'device-bytes', arg: '<n>', help: 'the same in bytes (wins over --device-mb)', env: 'BLOCKLLM_DEVICE_BYTES' },
      { flag: 'placement-policy', arg: '<p>', help: 'locality|frag-min: the serving core placement policy (locality)', env: 'BLOCKLLM_PLACEMENT_POLICY' },
      { flag: 'scale-out-queue', arg: '<n>', help: 'a replica for an instance routed > 0.8 × n sequences (default --max-batch; 0 off)', env: 'BLOCKLLM_SCALE_OUT_QUEUE' },
      { flag: 'no-cohort-homes', help: "route a cohort's new sequences over every device, not its home device first (cohort homes)", env: 'BLOCKLLM_COHORT_HOMES=0' },
      { flag: 'no-variant-batching', help: "run a fused PE block's rows apart from its base block's (no variant batching)", env: 'BLOCKLLM_VARIANT_BATCHING=0' },
      { flag: 'no-adaptive', help: 'routes on the chain\'s own blocks only: no equivalent segments (adaptive serving)', env: 'BLOCKLLM_ADAPTIVE=0' },
      { flag: 'max-queue', arg: '<n>', help: "a new sequence's first hop leaves an instance routed n sequences for an equivalent one (no bound)", env: 'BLOCKLLM_MAX_QUEUE' },
      { flag: 'kv-migration', arg: '<m>', help: "overlapped|copy: how a migrate job moves its sequences' K/V (overlapped: front recomputed, back copied)", env: 'BLOCKLLM_KV_MIGRATION' },
      { flag: 'speculate', help: 'speculative execution: surrogates beside the busiest instances, successors on their prediction (needs --devices > 1)', env: 'BLOCKLLM_SPECULATE=1' },
      { flag: 'spec-accept-cosine', arg: '<x>', help: 'a prediction is accepted at this cosine to the real output or above (0.95)', env: 'BLOCKLLM_SPEC_ACCEPT_COSINE' },
      { flag: 'spec-fraction', arg: '<f>', help: 'fraction of the block instances that speculate (0.1; at least one)', env: 'BLOCKLLM_SPEC_FRACTION' },
      { flag: 'provisioning', arg: '<p>', help: 'blocks|per-model: shared blocks (BlockLLM) or one whole model per application (blocks)', env: 'BLOCKLLM_PROVISIONING' },
      { flag: 'redis', help: 'run the placement control plane on BullMQ/Redis (else in-process)', env: 'BLOCKLLM_REDIS=1' },
      { flag: 'redis-url', arg: '<url>', help: 'Redis for --redis (default REDIS_URL or redis://127.0.0.1:6379)', env: 'REDIS_URL' },
      { flag: 'redis-prefix', arg: '<p>', help: 'key and queue prefix for --redis (default tessera-blockllm)', env: 'BLOCKLLM_REDIS_PREFIX' },
      { flag: 'help', short: 'h', help: 'show this help' },
    ],
  ],
]);

export const USAGE = `tessera-blockllm: an OpenAI-compatible server over many fine-tunes of one foundation, served as chains of shared blocks (BlockLLM)

Usage: tessera-blockllm [options]
       pnpm --filter @tessera/blockllm start -- [options]

Without --model, serves the demo: a tiny generated Llama-style foundation and its fine-tunes (LoRA, bottleneck
adapter, BitFit, prefix-tuning and a full fine-tune) in a block zoo, generated once into .tessera/blockllm-demo at
the repository root (or --demo-dir) and reused afterwards.

${FLAGS.usage}

The kernels run on CUDA when the CUDA addon is built and a GPU answers, else on the CPU (TESSERA_DEVICE=cpu|cuda|auto).
`;

/** A real number in [min, max], or undefined when unset. */
function parseRealFlag(name: string, value: string | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const x = Number(value);
  if (value.trim() === '' || !Number.isFinite(x) || x < min || x > max) throw new UsageError(`${name} must be a number in [${min}, ${max}], got '${value}'`);
  return x;
}

export type CliConfig = NonNullable<ReturnType<typeof parseCli>>;

/** Parses argv (without node and the script) and the environment. Returns null for --help. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = process.env) {
  const values = parseFlags(argv, FLAGS.options);
  if (values.help) return null;
  const str = flagOrEnv(values, env);
  const config = {
    modelDir: str('model', 'BLOCKLLM_MODEL'),
    modelName: str('model-name', 'BLOCKLLM_MODEL_NAME'),
    zooDir: str('zoo', 'BLOCKLLM_ZOO'),
    demo: values.demo === true || (parseBooleanFlag('BLOCKLLM_DEMO', env.BLOCKLLM_DEMO) ?? false),
    demoDir: str('demo-dir', 'BLOCKLLM_DEMO_DIR'),
    demoSize: parseChoiceFlag('--demo-size', str('demo-size', 'BLOCKLLM_DEMO_SIZE'), ['tiny', 'small', 'medium'] as const, 'tiny'),
    host: str('host', 'BLOCKLLM_HOST') ?? '127.0.0.1',
    port: parseIntegerFlag('--port', str('port', 'BLOCKLLM_PORT'), 0, 65_535) ?? 8000,
    ingest: values['no-ingest'] === true ? false : (parseBooleanFlag('BLOCKLLM_INGEST', env.BLOCKLLM_INGEST) ?? true),
    ingestRoot: str('ingest-root', 'BLOCKLLM_INGEST_ROOT'),
    logLevel: parseChoiceFlag('--log-level', str('log-level', 'BLOCKLLM_LOG_LEVEL'), LOG_LEVELS, 'info'),
    maxBatch: parseIntegerFlag('--max-batch', str('max-batch', 'BLOCKLLM_MAX_BATCH'), 1, 4096) ?? 32,
    cohorts: parseIntegerFlag('--cohorts', str('cohorts', 'BLOCKLLM_COHORTS'), 1, 64),
    kvPages: parseIntegerFlag('--kv-pages', str('kv-pages', 'BLOCKLLM_KV_PAGES'), 1, 1 << 20) ?? 64,
    threads: parseIntegerFlag('--threads', str('threads', 'BLOCKLLM_THREADS'), 1, 1024),
    heapGrowingPercent: parseIntegerFlag('--heap-growing-percent', str('heap-growing-percent', 'BLOCKLLM_HEAP_GROWING_PERCENT'), 0, 1000) ?? DEFAULT_HEAP_GROWING_PERCENT,
    devices: parseIntegerFlag('--devices', str('devices', 'BLOCKLLM_DEVICES'), 1, 16) ?? 1,
    deviceMb: parseIntegerFlag('--device-mb', str('device-mb', 'BLOCKLLM_DEVICE_MB'), 1, 1 << 20),
    deviceBytes: parseIntegerFlag('--device-bytes', str('device-bytes', 'BLOCKLLM_DEVICE_BYTES'), 1),
    scaleOutQueue: parseIntegerFlag('--scale-out-queue', str('scale-out-queue', 'BLOCKLLM_SCALE_OUT_QUEUE'), 0, 1 << 20),
    placementPolicy: parseChoiceFlag('--placement-policy', str('placement-policy', 'BLOCKLLM_PLACEMENT_POLICY'), ['locality', 'frag-min'] as const, 'locality'),
    cohortHomes: values['no-cohort-homes'] === true ? false : (parseBooleanFlag('BLOCKLLM_COHORT_HOMES', env.BLOCKLLM_COHORT_HOMES) ?? true),
    variantBatching: values['no-variant-batching'] === true ? false : (parseBooleanFlag('BLOCKLLM_VARIANT_BATCHING', env.BLOCKLLM_VARIANT_BATCHING) ?? true),
    adaptive: values['no-adaptive'] === true ? false : (parseBooleanFlag('BLOCKLLM_ADAPTIVE', env.BLOCKLLM_ADAPTIVE) ?? true),
    maxQueue: parseIntegerFlag('--max-queue', str('max-queue', 'BLOCKLLM_MAX_QUEUE'), 1, 1 << 20),
    kvMigration: parseChoiceFlag('--kv-migration', str('kv-migration', 'BLOCKLLM_KV_MIGRATION'), ['overlapped', 'copy'] as const, 'overlapped'),
    speculate: values.speculate === true || (parseBooleanFlag('BLOCKLLM_SPECULATE', env.BLOCKLLM_SPECULATE) ?? false),
    specAcceptCosine: parseRealFlag('--spec-accept-cosine', str('spec-accept-cosine', 'BLOCKLLM_SPEC_ACCEPT_COSINE'), -1, 1) ?? 0.95,
    specFraction: parseRealFlag('--spec-fraction', str('spec-fraction', 'BLOCKLLM_SPEC_FRACTION'), 0, 1) ?? 0.1,
    provisioning: parseChoiceFlag('--provisioning', str('provisioning', 'BLOCKLLM_PROVISIONING'), ['blocks', 'per-model'] as const, 'blocks'),
    redis: values.redis === true || (parseBooleanFlag('BLOCKLLM_REDIS', env.BLOCKLLM_REDIS) ?? false),
    redisUrl: str('redis-url', 'REDIS_URL') ?? 'redis://127.0.0.1:6379',
    redisPrefix: str('redis-prefix', 'BLOCKLLM_REDIS_PREFIX') ?? 'tessera-blockllm',
  };
  // A device runs one program at a time: a prediction only saves time when the successor runs on another device.
  if (config.speculate && (config.devices < 2 || config.provisioning !== 'blocks')) {
    throw new UsageError(`--speculate needs --devices 2 or more with blocks provisioning (got --devices ${config.devices}, --provisioning ${config.provisioning})`);
  }
  // Speculation's ledger follows one step at a time.
  if (config.speculate && config.cohorts !== undefined && config.cohorts > 1) throw new UsageError(`--speculate runs one cohort (got --cohorts ${config.cohorts})`);
  return config;
}

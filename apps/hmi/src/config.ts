/**
 * Command-line flags and their HMI_* environment equivalents (a flag wins over its variable).
 */
import { readFileSync } from 'node:fs';

import { flagOrEnv, flagTable, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from '@tessera/server-kit';

export { UsageError };

export const PIPELINES = ['fine', 'coarse', 'synchronized', 'sequential'] as const;
export type PipelineOption = (typeof PIPELINES)[number];

/** Defaults, named once: the usage text, parseCli and buildServer read them from here. */
export const DEFAULTS = {
  host: '127.0.0.1',
  /** 8002, beside Punica (8000) and PetS (8001). */
  port: 8002,
  alpha: 0.5,
  minCorpusTokens: 64,
  fptSteps: 30,
  ftSteps: 80,
  fptLr: 1e-3,
  ftLr: 5e-2,
  trainBatch: 8,
  maxBatch: 32,
  slots: 4,
  deviceCache: 0,
  pipeline: 'fine' as PipelineOption,
  maxInputs: 64,
  redisPrefix: 'tessera',
  logLevel: 'info',
} as const;

const FLAGS = flagTable([
  [
    'Model and PLOT',
    [
      { flag: 'model', arg: '<dir>', help: 'Hugging Face BERT-style encoder directory (the root model)', env: 'HMI_MODEL' },
      { flag: 'demo', help: 'serve the demo even if --model is set', env: 'HMI_DEMO=1' },
      { flag: 'demo-dir', arg: '<dir>', help: 'where the demo model is generated and cached', env: 'HMI_DEMO_DIR' },
      { flag: 'demo-tenants', arg: '<n>', help: 'tenants the demo trains at start (default 200, spread over its 2 domains)', env: 'HMI_DEMO_TENANTS' },
      { flag: 'lower-layers', arg: '<n>', help: 'layers materialised as PLOT (default: half the model)', env: 'HMI_LOWER_LAYERS' },
      { flag: 'general-corpus', arg: '<file>', help: "root table's general corpus, one text a line (default: uni-grams only)", env: 'HMI_GENERAL_CORPUS' },
      { flag: 'alpha', arg: '<pct>', help: `default α-coverage of a domain table, in percent (default ${DEFAULTS.alpha * 100})`, env: 'HMI_ALPHA' },
      { flag: 'min-corpus-tokens', arg: '<n>', help: `smallest domain corpus (default ${DEFAULTS.minCorpusTokens})`, env: 'HMI_MIN_CORPUS_TOKENS' },
    ],
  ],
  [
    'Training (manager jobs)',
    [
      { flag: 'bottleneck', arg: '<m>', help: 'adapter bottleneck (default hidden / 8)', env: 'HMI_BOTTLENECK' },
      { flag: 'fpt-steps', arg: '<n>', help: `domain further-pretraining steps (default ${DEFAULTS.fptSteps})`, env: 'HMI_FPT_STEPS' },
      { flag: 'ft-steps', arg: '<n>', help: `tenant fine-tuning steps (default ${DEFAULTS.ftSteps})`, env: 'HMI_FT_STEPS' },
      { flag: 'redis', arg: '<url>', help: 'run manager jobs on BullMQ on this Redis (default: in-process)', env: 'HMI_REDIS_URL' },
      { flag: 'redis-prefix', arg: '<p>', help: `key prefix of the job queue (default ${DEFAULTS.redisPrefix})`, env: 'HMI_REDIS_PREFIX' },
    ],
  ],
  [
    'Serving',
    [
      { flag: 'max-batch', arg: '<n>', help: `requests per batch (default ${DEFAULTS.maxBatch})`, env: 'HMI_MAX_BATCH' },
      { flag: 'slots', arg: '<n>', help: `batches in flight in the pipeline (default ${DEFAULTS.slots})`, env: 'HMI_SLOTS' },
      { flag: 'device-cache', arg: '<n>', help: `tenants kept on the device between batches, an LRU (default ${DEFAULTS.deviceCache}: every batch copies its adapters, as the paper)`, env: 'HMI_DEVICE_CACHE' },
      { flag: 'pipeline', arg: '<mode>', help: `${PIPELINES.join(' | ')} (default ${DEFAULTS.pipeline})`, env: 'HMI_PIPELINE' },
      { flag: 'max-inputs', arg: '<n>', help: `most texts in one classify request (default ${DEFAULTS.maxInputs})`, env: 'HMI_MAX_INPUTS' },
      { flag: 'threads', arg: '<n>', help: 'CPU kernel threads (default: TESSERA_THREADS or all cores)', env: 'HMI_THREADS' },
    ],
  ],
  [
    'Tenant storage',
    [
      { flag: 'tenants-dir', arg: '<dir>', help: 'tenant adapter files (<id>.tsadapt); a restart on the same directory serves them again (default: a scratch directory removed at exit; the demo: <demo-dir>/tenants)', env: 'HMI_TENANTS_DIR' },
      { flag: 'host-mb', arg: '<n>', help: 'host memory for tenant adapters and heads, in MiB; the rest are read from disk when a batch needs them (default: unlimited)', env: 'HMI_HOST_MB' },
    ],
  ],
  [
    'HTTP',
    [
      { flag: 'host', arg: '<addr>', help: `listen address (default ${DEFAULTS.host})`, env: 'HMI_HOST' },
      { flag: 'port', arg: '<n>', help: `listen port (default ${DEFAULTS.port})`, env: 'HMI_PORT' },
      { flag: 'log-level', arg: '<level>', help: `fatal|error|warn|info|debug|trace|silent (${DEFAULTS.logLevel})`, env: 'HMI_LOG_LEVEL' },
      { flag: 'help', short: 'h', help: 'show this help' },
    ],
  ],
]);

export const USAGE = `tessera-hmi: HMI on one machine, a classification server for many tenants of one encoder, with hierarchical knowledge

Usage: tessera-hmi [options]
       pnpm --filter @tessera/hmi start -- [options]

The model's lower layers are served as PLOT, a precomputed tri-gram table (a root table plus one sparse table per
domain); its upper layers are shared, with one bottleneck adapter per layer and a head per tenant. Domains and
tenants are created, updated and deleted by jobs (further-pretraining, fine-tuning), on BullMQ with --redis.

Without --model, serves the demo: a tiny generated encoder, pretrained once into .tessera/hmi-demo at the
repository root (or --demo-dir), with two domains and --demo-tenants tenants trained at start.

${FLAGS.usage}

The kernels run on CUDA when the CUDA addon is built and a GPU answers, else on the CPU (TESSERA_DEVICE=cpu|cuda|auto).
`;

export type CliConfig = NonNullable<ReturnType<typeof parseCli>>;

function linesOf(file: string | undefined): string[] | undefined {
  if (file === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`--general-corpus ${file}: ${(err as Error).message}`);
  }
  return text.split('\n').map((l) => l.trim()).filter((l) => l.length > 0);
}

/** Parses argv (without node and the script) and the environment. Returns null for --help. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = process.env) {
  const values = parseFlags(argv, FLAGS.options);
  if (values.help) return null;
  const str = flagOrEnv(values, env);
  const alphaPct = parseIntegerFlag('--alpha', str('alpha', 'HMI_ALPHA'), 0, 100);
  return {
    modelDir: str('model', 'HMI_MODEL'),
    demo: values.demo === true || (parseBooleanFlag('HMI_DEMO', env.HMI_DEMO) ?? false),
    demoDir: str('demo-dir', 'HMI_DEMO_DIR'),
    demoTenants: parseIntegerFlag('--demo-tenants', str('demo-tenants', 'HMI_DEMO_TENANTS'), 0, 10_000) ?? 200,
    lowerLayers: parseIntegerFlag('--lower-layers', str('lower-layers', 'HMI_LOWER_LAYERS'), 1, 1024),
    generalCorpus: linesOf(str('general-corpus', 'HMI_GENERAL_CORPUS')),
    alpha: alphaPct === undefined ? DEFAULTS.alpha : alphaPct / 100,
    minCorpusTokens: parseIntegerFlag('--min-corpus-tokens', str('min-corpus-tokens', 'HMI_MIN_CORPUS_TOKENS'), 0) ?? DEFAULTS.minCorpusTokens,
    bottleneck: parseIntegerFlag('--bottleneck', str('bottleneck', 'HMI_BOTTLENECK'), 1, 4096),
    fptSteps: parseIntegerFlag('--fpt-steps', str('fpt-steps', 'HMI_FPT_STEPS'), 1, 1_000_000) ?? DEFAULTS.fptSteps,
    ftSteps: parseIntegerFlag('--ft-steps', str('ft-steps', 'HMI_FT_STEPS'), 1, 1_000_000) ?? DEFAULTS.ftSteps,
    redisUrl: str('redis', 'HMI_REDIS_URL'),
    redisPrefix: str('redis-prefix', 'HMI_REDIS_PREFIX') ?? DEFAULTS.redisPrefix,
    maxBatch: parseIntegerFlag('--max-batch', str('max-batch', 'HMI_MAX_BATCH'), 1, 4096) ?? DEFAULTS.maxBatch,
    slots: parseIntegerFlag('--slots', str('slots', 'HMI_SLOTS'), 1, 64) ?? DEFAULTS.slots,
    deviceCache: parseIntegerFlag('--device-cache', str('device-cache', 'HMI_DEVICE_CACHE'), 0, 1_000_000) ?? DEFAULTS.deviceCache,
    pipeline: parseChoiceFlag('--pipeline', str('pipeline', 'HMI_PIPELINE'), PIPELINES, DEFAULTS.pipeline),
    maxInputs: parseIntegerFlag('--max-inputs', str('max-inputs', 'HMI_MAX_INPUTS'), 1, 65_536) ?? DEFAULTS.maxInputs,
    threads: parseIntegerFlag('--threads', str('threads', 'HMI_THREADS'), 1, 1024),
    tenantsDir: str('tenants-dir', 'HMI_TENANTS_DIR'),
    hostMb: parseIntegerFlag('--host-mb', str('host-mb', 'HMI_HOST_MB'), 0, 1 << 30),
    host: str('host', 'HMI_HOST') ?? DEFAULTS.host,
    port: parseIntegerFlag('--port', str('port', 'HMI_PORT'), 0, 65_535) ?? DEFAULTS.port,
    logLevel: parseChoiceFlag('--log-level', str('log-level', 'HMI_LOG_LEVEL'), LOG_LEVELS, DEFAULTS.logLevel),
  };
}

/**
 * Command-line flags and their PETS_* environment equivalents (a flag wins over its variable).
 */
import { flagOrEnv, flagTable, LOG_LEVELS, parseBooleanFlag, parseChoiceFlag, parseFlags, parseIntegerFlag, UsageError } from '@tessera/server-kit';

/** What parseCli throws for a bad command line. */
export { UsageError };

export const STRATEGIES = ['auto', 'cb', 'alpha-only', 'beta-only', 'fixed'] as const;
export type StrategyOption = (typeof STRATEGIES)[number];
export const LAYOUTS = ['padded', 'packed'] as const;
export type LayoutOption = (typeof LAYOUTS)[number];
/** PET operator scheduling (pets.md §6): Algorithm 2's intensity chunks, the artifact's round-robin, or one stream. */
export const SCHEDULINGS = ['intensity', 'round-robin', 'sequential'] as const;
export type SchedulingOption = (typeof SCHEDULINGS)[number];

/** Defaults, named once: the usage text, parseCli and buildServer all read them from here. */
export const DEFAULTS = {
  host: '127.0.0.1',
  /** 8001, so the Punica server (8000) and this one run side by side. */
  port: 8001,
  strategy: 'auto' as StrategyOption,
  layout: 'padded' as LayoutOption,
  scheduling: 'intensity' as SchedulingOption,
  /** 'dynamic': the stream count follows each macro-batch's size (pets.md §6.3). */
  streams: 'dynamic' as number | 'dynamic',
  /** The online window (pets.md §11 #19): CB plans whatever arrived within this many ms of the first query… */
  windowMs: 10,
  /** …or as soon as this many queries are waiting (the artifact's macro-batch cap, 128). */
  windowQueries: 128,
  budgetMiB: 1024,
  maxParamsMiB: 64,
  maxBatchInputs: 64,
  logLevel: 'info',
} as const;

const FLAGS = flagTable([
  [
    'Model and tasks',
    [
      { flag: 'model', arg: '<dir>', help: 'Hugging Face BERT-style encoder directory (the shared model)', env: 'PETS_MODEL' },
      { flag: 'tag', arg: '<name>', help: "the shared model's tag in the API (default: the dir name)", env: 'PETS_TAG' },
      { flag: 'demo', help: 'serve the demo even if --model is set', env: 'PETS_DEMO=1' },
      { flag: 'demo-dir', arg: '<dir>', help: 'where the demo is generated and cached', env: 'PETS_DEMO_DIR' },
      { flag: 'params-root', arg: '<dir>', help: 'registration by path reads only inside this dir (default: uploads only)', env: 'PETS_PARAMS_ROOT' },
      { flag: 'max-params-mb', arg: '<n>', help: `largest parameter file, upload or path (default ${DEFAULTS.maxParamsMiB})`, env: 'PETS_MAX_PARAMS_MB' },
      { flag: 'budget-mb', arg: '<n>', help: `device memory: shared model + loaded tasks (default ${DEFAULTS.budgetMiB})`, env: 'PETS_BUDGET_MB' },
    ],
  ],
  [
    'HTTP',
    [
      { flag: 'host', arg: '<addr>', help: `listen address (default ${DEFAULTS.host})`, env: 'PETS_HOST' },
      { flag: 'port', arg: '<n>', help: `listen port (default ${DEFAULTS.port})`, env: 'PETS_PORT' },
      { flag: 'max-input-tokens', arg: '<n>', help: "longest input in tokens (default: the model's max positions)", env: 'PETS_MAX_INPUT_TOKENS' },
      { flag: 'max-batch-inputs', arg: '<n>', help: `most texts in one classify request (default ${DEFAULTS.maxBatchInputs})`, env: 'PETS_MAX_BATCH_INPUTS' },
      { flag: 'log-level', arg: '<level>', help: `fatal|error|warn|info|debug|trace|silent (${DEFAULTS.logLevel})`, env: 'PETS_LOG_LEVEL' },
    ],
  ],
  [
    'Batching and the engine',
    [
      { flag: 'strategy', arg: '<s>', help: `${STRATEGIES.join(' | ')} (default ${DEFAULTS.strategy}: the cheapest estimate)`, env: 'PETS_STRATEGY' },
      { flag: 'window-ms', arg: '<n>', help: `a window closes this long after its first query (default ${DEFAULTS.windowMs})`, env: 'PETS_WINDOW_MS' },
      { flag: 'window-queries', arg: '<n>', help: `…or once this many queries wait (default ${DEFAULTS.windowQueries})`, env: 'PETS_WINDOW_QUERIES' },
      { flag: 'cost-tables', arg: '<file>', help: 'profiled α/β tables (as --profile writes them), not the analytic model', env: 'PETS_COST_TABLES' },
      { flag: 'profile', help: 'profile α/β tables on this machine at start-up (a small grid)', env: 'PETS_PROFILE=1' },
      { flag: 'profile-out', arg: '<file>', help: 'with --profile: also write the tables there', env: 'PETS_PROFILE_OUT' },
      { flag: 'layout', arg: '<l>', help: `padded (dense, as in the paper) | packed (default ${DEFAULTS.layout})`, env: 'PETS_LAYOUT' },
      { flag: 'scheduling', arg: '<mode>', help: `PET operators: intensity (Algorithm 2) | round-robin | sequential (default ${DEFAULTS.scheduling})`, env: 'PETS_SCHEDULING' },
      { flag: 'streams', arg: '<n|dynamic>', help: `PET operator streams (default ${DEFAULTS.streams}: by the macro-batch's size)`, env: 'PETS_STREAMS' },
      { flag: 'threads', arg: '<n>', help: 'CPU kernel threads (default: TESSERA_THREADS or all cores)', env: 'PETS_THREADS' },
      { flag: 'help', short: 'h', help: 'show this help' },
    ],
  ],
]);

export const USAGE = `tessera-pets: PetS on one machine, a classification server for many parameter-efficient tasks of one shared encoder

Usage: tessera-pets [options]
       pnpm --filter @tessera/pets start -- [options]

Without --model, serves the demo: a tiny generated BERT-style encoder and one task of each PET type (Adapter,
MaskBert, Diff-Pruning, BitFit, LoRA, prefix-tuning), generated once into .tessera/pets-demo at the repository
root (or --demo-dir) and reused afterwards, with its parameter directory as --params-root.

${FLAGS.usage}

The kernels run on CUDA when the CUDA addon is built and a GPU answers, else on the CPU (TESSERA_DEVICE=cpu|cuda|auto).
`;

/** The serving options, each documented once: the command line sets them all (defaults filled in), buildServer takes any. */
export interface ServingOptions {
  /** The shared model's tag in the API (default: the model directory's name). */
  tag: string | undefined;
  /** `POST /v1/tasks {"path": …}` reads parameter files only inside this directory (default: path registration off). */
  paramsRoot: string | undefined;
  /** The largest parameter file accepted, upload or path, in MiB (default 64; fractions allowed). */
  maxParamsMiB: number;
  /** Device memory for the shared model plus the loaded tasks, in MiB (default 1024; fractions allowed). */
  budgetMiB: number;
  /** Longest input in tokens (default: the model's max positions). */
  maxInputTokens: number | undefined;
  /** Most texts in one classify request (default 64). */
  maxBatchInputs: number;
  /** Batching strategy of each window (default 'auto'). */
  strategy: StrategyOption;
  /** The batch window: closes `windowMs` after its first query, or at `windowQueries` queries (defaults 10, 128). */
  windowMs: number;
  windowQueries: number;
  /** Profiled α/β tables (a JSON file as --profile writes it) instead of the analytic cost model. */
  costTables: string | undefined;
  /** Profile α/β tables at start-up (and write them to `profileOut` when given). */
  profile: boolean;
  profileOut: string | undefined;
  /** Batch layout in the engine (default 'padded', as PetS's dense batches). */
  layout: LayoutOption;
  /** PET operator scheduling (default 'intensity': Algorithm 2). */
  scheduling: SchedulingOption;
  /** PET operator streams (default 'dynamic'). */
  streams: number | 'dynamic';
  /** CPU kernel threads of the engine (default: TESSERA_THREADS or all cores). */
  threads: number | undefined;
}

/** The command line: the serving options plus the model (undefined: the demo), demo, host, port and log level. */
export type CliConfig = NonNullable<ReturnType<typeof parseCli>>;

function streamsOf(value: string | undefined): number | 'dynamic' {
  if (value === undefined || value === 'dynamic') return DEFAULTS.streams;
  const n = parseIntegerFlag('--streams', value, 1, 64);
  return n ?? DEFAULTS.streams;
}

/** Parses argv (without node and the script) and the environment. Returns null for --help. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv = process.env) {
  const values = parseFlags(argv, FLAGS.options);
  if (values.help) return null;
  const str = flagOrEnv(values, env);
  const logLevel = parseChoiceFlag('--log-level', str('log-level', 'PETS_LOG_LEVEL'), LOG_LEVELS, DEFAULTS.logLevel);
  const profile = values.profile === true || (parseBooleanFlag('PETS_PROFILE', env.PETS_PROFILE) ?? false);
  const costTables = str('cost-tables', 'PETS_COST_TABLES');
  if (profile && costTables !== undefined) throw new UsageError('--profile and --cost-tables exclude each other: profile here, or read tables profiled before');
  const profileOut = str('profile-out', 'PETS_PROFILE_OUT');
  if (profileOut !== undefined && !profile) throw new UsageError('--profile-out needs --profile');
  const tag = str('tag', 'PETS_TAG');
  if (tag !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$/.test(tag)) {
    throw new UsageError(`--tag ${JSON.stringify(tag)} may use only letters, digits and . _ - : @ + (at most 128, starting with a letter or digit)`);
  }
  return {
    modelDir: str('model', 'PETS_MODEL'),
    tag,
    demo: values.demo === true || (parseBooleanFlag('PETS_DEMO', env.PETS_DEMO) ?? false),
    demoDir: str('demo-dir', 'PETS_DEMO_DIR'),
    paramsRoot: str('params-root', 'PETS_PARAMS_ROOT'),
    maxParamsMiB: parseIntegerFlag('--max-params-mb', str('max-params-mb', 'PETS_MAX_PARAMS_MB'), 1, 4096) ?? DEFAULTS.maxParamsMiB,
    budgetMiB: parseIntegerFlag('--budget-mb', str('budget-mb', 'PETS_BUDGET_MB'), 1) ?? DEFAULTS.budgetMiB,
    host: str('host', 'PETS_HOST') ?? DEFAULTS.host,
    port: parseIntegerFlag('--port', str('port', 'PETS_PORT'), 0, 65_535) ?? DEFAULTS.port,
    maxInputTokens: parseIntegerFlag('--max-input-tokens', str('max-input-tokens', 'PETS_MAX_INPUT_TOKENS'), 1),
    maxBatchInputs: parseIntegerFlag('--max-batch-inputs', str('max-batch-inputs', 'PETS_MAX_BATCH_INPUTS'), 1, 65_536) ?? DEFAULTS.maxBatchInputs,
    logLevel,
    strategy: parseChoiceFlag('--strategy', str('strategy', 'PETS_STRATEGY'), STRATEGIES, DEFAULTS.strategy),
    windowMs: parseIntegerFlag('--window-ms', str('window-ms', 'PETS_WINDOW_MS'), 0, 60_000) ?? DEFAULTS.windowMs,
    windowQueries: parseIntegerFlag('--window-queries', str('window-queries', 'PETS_WINDOW_QUERIES'), 1, 65_536) ?? DEFAULTS.windowQueries,
    costTables,
    profile,
    profileOut,
    layout: parseChoiceFlag('--layout', str('layout', 'PETS_LAYOUT'), LAYOUTS, DEFAULTS.layout),
    scheduling: parseChoiceFlag('--scheduling', str('scheduling', 'PETS_SCHEDULING'), SCHEDULINGS, DEFAULTS.scheduling),
    streams: streamsOf(str('streams', 'PETS_STREAMS')),
    threads: parseIntegerFlag('--threads', str('threads', 'PETS_THREADS'), 1, 1024),
  };
}

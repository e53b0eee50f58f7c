/**
 * The reference servers `tessera serve` runs. Each is its app's own `main(argv, env)` (the function behind its
 * `tessera-<name>` bin), loaded from `<package>/main` when asked for, so `tessera gen` never loads a server and a
 * server's flags, variables and --help stay exactly its own. A new server is one entry here plus a `./main` entry in
 * its package's exports map (and a devDependency, so the workspace links it).
 */
import { type ErrorKind, TesseraError } from '@tessera/core';

export interface ServerEntry {
  /** `tessera serve <name>`. */
  name: string;
  /** The package whose `./main` export holds `main(argv, env)`. */
  package: string;
  /** Its environment variables' prefix: PUNICA_PORT, PETS_PORT, … */
  envPrefix: string;
  /** One line for `tessera serve --help`. */
  summary: string;
  /** Shared flags the server does not take, each with why (the shared-flags test holds it to the rest). */
  without?: Readonly<Record<string, string>>;
}

export const SERVERS: readonly ServerEntry[] = [
  { name: 'punica', package: '@tessera/punica', envPrefix: 'PUNICA', summary: 'OpenAI-compatible multi-LoRA server: many LoRA adapters of one Llama-style model (Punica)' },
  { name: 'pets', package: '@tessera/pets', envPrefix: 'PETS', summary: 'classification for many parameter-efficient tasks of one shared BERT-style encoder (PetS)' },
  {
    name: 'arlo',
    package: '@tessera/arlo',
    envPrefix: 'ARLO',
    summary: 'one encoder served by static-length runtimes: ILP allocation of instances, multi-level-queue dispatch (Arlo)',
    without: { threads: 'each runtime instance runs one kernel thread on its own worker by design (--workers sets how many)' },
  },
  { name: 'blockllm', package: '@tessera/blockllm', envPrefix: 'BLOCKLLM', summary: 'OpenAI-compatible API over many fine-tunes of one foundation, served as chains of shared blocks (BlockLLM)' },
  { name: 'hmi', package: '@tessera/hmi', envPrefix: 'HMI', summary: 'classification for thousands of tenants of one encoder: PLOT lookup for the lower layers, layer-wise staged adapters (HMI)' },
];

/** A flag every server takes, with the variable `<PREFIX>_<NAME>` (a flag wins over its variable). */
export interface SharedFlag {
  flag: string;
  arg?: string;
  help: string;
  /** The variable's name after the prefix, and `=1` for a boolean. */
  env: string;
}

/** The flags and variables shared by every server (tested against each server's own usage text). */
export const SHARED_SERVER_FLAGS: readonly SharedFlag[] = [
  { flag: 'model', arg: '<dir>', help: 'the Hugging Face model directory to serve', env: 'MODEL' },
  { flag: 'demo', help: 'serve the generated demo (also what runs without --model)', env: 'DEMO=1' },
  { flag: 'demo-dir', arg: '<dir>', help: 'where the demo is generated once and reused', env: 'DEMO_DIR' },
  { flag: 'host', arg: '<addr>', help: 'listen address (default 127.0.0.1)', env: 'HOST' },
  { flag: 'port', arg: '<n>', help: 'listen port (0: any free port)', env: 'PORT' },
  { flag: 'threads', arg: '<n>', help: 'CPU kernel threads (default: TESSERA_THREADS or all cores)', env: 'THREADS' },
  { flag: 'log-level', arg: '<level>', help: 'fatal|error|warn|info|debug|trace|silent', env: 'LOG_LEVEL' },
];

/** A server's entry point: parses `argv` and `env` itself, prints its usage for --help, resolves once listening. */
export type ServerMain = (argv: readonly string[], env: NodeJS.ProcessEnv) => Promise<number>;

/** The server's package cannot be loaded here (not installed beside the CLI, or not built): `tessera` exits 2. */
export class ServerUnavailableError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  constructor(
    readonly server: ServerEntry,
    readonly reason: string,
  ) {
    super(
      'TESSERA_SERVER_UNAVAILABLE',
      `the ${server.name} server (${server.package}) cannot be loaded: ${reason}\n` +
        `In a clone of the repository, build it (\`pnpm build\`); elsewhere, install ${server.package} beside @tessera/cli.`,
    );
  }
}

/**
 * Loads `server`'s main. The specifier is built at run time on purpose: tsup bundles a literal import of a
 * devDependency into dist/, and the servers must stay their own packages, loaded only by `tessera serve`.
 */
export async function loadServer(server: ServerEntry): Promise<ServerMain> {
  const specifier = `${server.package}/main`;
  let mod: { main?: unknown };
  try {
    mod = (await import(specifier)) as { main?: unknown };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    // Only the server's own module missing is "unavailable"; a module missing deeper inside it is a real failure.
    if ((e.code === 'ERR_MODULE_NOT_FOUND' || e.code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') && mentionsServer(e.message, server)) {
      throw new ServerUnavailableError(server, e.message.split('\n')[0]!);
    }
    throw err;
  }
  if (typeof mod.main !== 'function') throw new ServerUnavailableError(server, `${specifier} exports no main()`);
  return mod.main as ServerMain;
}

function mentionsServer(message: string, server: ServerEntry): boolean {
  const short = server.package.split('/')[1]!;
  return message.includes(server.package) || new RegExp(`[/\\\\]${short}[/\\\\](dist|src)[/\\\\]main\\.`).test(message);
}

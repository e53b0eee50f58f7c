/**
 * Starting an engine worker thread: which file it runs (the TypeScript source through worker-dev.mjs, or the
 * built JS), and the start-up handshake. The worker posts `{ type: 'ready', … }` once it can serve, or
 * `{ type: 'init-failed' | 'fatal', … }` and exits; it may post other messages (progress) before either.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';

/** The file a Worker runs, its execArgv, and for the dev bootstrap the real entry (passed as workerData.entry). */
export interface WorkerEntry {
  url: URL;
  execArgv: string[];
  entry?: string;
}

/**
 * Which file the worker runs, seen from the client module at `clientUrl` (its import.meta.url). From source (the
 * client is a .ts file: tsx, vitest) server-kit's worker-dev.mjs registers tsx in the worker thread and imports
 * `files.source`, resolving @tessera/* to their src/. From a build (the client is bundled JS), `files.built` next
 * to it (tsup's flat dist/).
 */
export function workerEntry(clientUrl: string, files: { source: string; built: string }): WorkerEntry {
  if (clientUrl.endsWith('.ts')) {
    // Resolved through the package's exports, so it is found whether server-kit runs from src/ or dist/.
    const devBootstrap = pathToFileURL(createRequire(import.meta.url).resolve('@tessera/server-kit/worker-dev.mjs'));
    return { url: devBootstrap, execArgv: ['--conditions=@tessera/source'], entry: new URL(files.source, clientUrl).href };
  }
  return { url: new URL(files.built, clientUrl), execArgv: [] };
}

type FailureMessage<M> = Extract<M, { type: 'init-failed' | 'fatal' }>;

export interface StartWorkerOptions<M extends { type: string }> {
  /** The worker's init data; `entry` is added for the dev bootstrap. */
  workerData: object;
  /** The thread's name (shown in debuggers and heap snapshots). */
  name: string;
  /** Start-up messages other than ready / init-failed / fatal (e.g. progress lines). */
  onMessage?: (message: M) => void;
  /** The app's error for a start-up failure the worker reported. */
  failed: (message: FailureMessage<M>) => Error;
  /** The app's error for a worker that errored or exited before it was ready. */
  unavailable: (message: string, options?: { cause?: unknown }) => Error;
  /** How long a failed worker gets to exit by itself before it is terminated (default 5 s). */
  exitGraceMs?: number;
}

export interface StartedWorker<M extends { type: string }> {
  worker: Worker;
  /** The worker's ready message. */
  ready: Extract<M, { type: 'ready' }>;
  /** Resolves with the exit code when the worker exits (listened from the start, so no exit is missed). */
  exited: Promise<number>;
}

/** Starts the worker and resolves once it reports ready; rejects (after the worker has gone) with the app's error otherwise. */
export async function startWorker<M extends { type: string }>(entry: WorkerEntry, options: StartWorkerOptions<M>): Promise<StartedWorker<M>> {
  const workerData = entry.entry ? { ...options.workerData, entry: entry.entry } : options.workerData;
  const worker = new Worker(entry.url, { workerData, execArgv: entry.execArgv, name: options.name });
  const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
  const ready = await new Promise<Extract<M, { type: 'ready' }>>((resolve, reject) => {
    const onMessage = (msg: M) => {
      if (msg.type === 'ready') {
        cleanup();
        resolve(msg as Extract<M, { type: 'ready' }>);
      } else if (msg.type === 'init-failed' || msg.type === 'fatal') {
        cleanup();
        reject(options.failed(msg as FailureMessage<M>));
      } else options.onMessage?.(msg);
    };
    const onError = (err: Error) => {
      cleanup();
      reject(options.unavailable(`the engine worker failed to start: ${err.message}`, { cause: err }));
    };
    const onExit = (code: number) => {
      cleanup();
      reject(options.unavailable(`the engine worker exited during start-up (exit code ${code})`));
    };
    const cleanup = () => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
    };
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
  }).catch(async (err: unknown) => {
    // The worker exits by itself after reporting a failed start; terminate only one that does not.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, options.exitGraceMs ?? 5_000)))]);
    clearTimeout(timer);
    await worker.terminate();
    throw err;
  });
  return { worker, ready, exited };
}

/**
 * After start-up: reports a worker that errors or exits as lost, once, through `lost` (the app turns it into its
 * own error and fails what was in flight). An exit while `closing()` is the requested shutdown, reported as such.
 */
export function watchWorker(worker: Worker, exited: Promise<number>, options: { closing: () => boolean; lost: (message: string, cause?: Error) => void }): void {
  worker.on('error', (err) => options.lost(`the engine worker failed: ${err.message}`, err));
  void exited.then((code) => options.lost(options.closing() ? 'the engine was shut down' : `the engine worker exited unexpectedly (exit code ${code})`));
}

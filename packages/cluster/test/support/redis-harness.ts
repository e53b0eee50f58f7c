/**
 * What the Redis tests share: a tiny generated decoder (with the greedy reference every distributed run must
 * equal), engine host processes (test/fixtures/host-process.ts) driven over stdin/stdout, a private redis-server
 * for the restart test, unique key prefixes and their cleanup, and waiting for conditions with deadlines.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { type DecoderModel, PagedKvCache, generateBatch, generateModel, loadDecoder } from '@tessera/engine';
import { randomInts } from '@tessera/test-utils';
import { Redis } from 'ioredis';

import type { ClientStream, FinishedResult, GenerateRequest } from '../../src/index.js';

const PACKAGE_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const HOST_SCRIPT = join(PACKAGE_DIR, 'test', 'fixtures', 'host-process.ts');

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A key prefix no other test (or run) uses. */
export function uniquePrefix(name: string): string {
  return `tessera-test-${name}-${process.pid}-${Date.now().toString(36)}`;
}

/** Deletes every key under the prefix. */
export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

/** Polls `condition` until it holds; throws naming `what` past the deadline. */
export async function waitFor(what: string, condition: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// ─── the model ───────────────────────────────────────────────────────────────────────────────────────────────

export interface TinyModel {
  dir: string;
  model: DecoderModel;
  /** Seeded ordinary token ids (no bos/eos). */
  prompt(length: number, seed: number): number[];
  /** A base-model greedy request that runs exactly maxTokens tokens. */
  request(id: string, promptLength: number, maxTokens: number, seed: number): GenerateRequest;
  /** The tokens the request generates alone, in this process (generateBatch, its own cache). */
  reference(request: GenerateRequest): number[];
  dispose(): void;
}

export function makeTinyModel(): TinyModel {
  const root = mkdtempSync(join(tmpdir(), 'tessera-redis-'));
  const dir = join(root, 'model');
  generateModel(dir, { family: 'decoder', size: 'tiny', seed: 23, sharpen: 4 });
  const model = loadDecoder(dir);
  const vocab = model.config.vocabSize;
  const prompt = (length: number, seed: number) => Array.from(randomInts(length, seed, 0, vocab - 2));
  return {
    dir,
    model,
    prompt,
    request: (id, promptLength, maxTokens, seed) => ({
      id,
      adapter: null,
      prompt: prompt(promptLength, seed),
      maxTokens,
      sampling: {},
      stop: [],
      ignoreEos: true,
    }),
    reference(request) {
      const cache = PagedKvCache.create({ ...model.kvShape, numPages: 64 }, model.backend);
      try {
        return generateBatch(model, [{ prompt: request.prompt, maxTokens: request.maxTokens, ignoreEos: request.ignoreEos }], { cache })[0]!.tokens;
      } finally {
        cache.dispose();
      }
    },
    dispose() {
      model.dispose();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

// ─── host processes ──────────────────────────────────────────────────────────────────────────────────────────

export interface HostProcessOptions {
  modelDir: string;
  hostId: string;
  url: string;
  prefix: string;
  maxBatch?: number;
  kvPages?: number;
  stepDelayMs?: number;
  reportEveryMs?: number;
  reportTtlMs?: number;
}

export class HostProcess {
  readonly hostId: string;
  readonly child: ChildProcess;
  /** Resolves with the exit code (or the signal's name) when the process is gone. */
  readonly exited: Promise<number | string>;
  private readonly lines: string[] = [];
  private readonly waiters: { line: string; from: number; resolve: () => void }[] = [];
  private stderr = '';

  private constructor(options: HostProcessOptions) {
    this.hostId = options.hostId;
    const args = [
      '--conditions=@tessera/source',
      '--import',
      'tsx',
      HOST_SCRIPT,
      ...['--model', options.modelDir, '--host', options.hostId, '--url', options.url, '--prefix', options.prefix],
      ...['--max-batch', String(options.maxBatch ?? 2), '--kv-pages', String(options.kvPages ?? 256)],
      ...['--step-delay-ms', String(options.stepDelayMs ?? 0)],
      ...['--report-every-ms', String(options.reportEveryMs ?? 200), '--report-ttl-ms', String(options.reportTtlMs ?? 1000)],
    ];
    this.child = spawn(process.execPath, args, { cwd: PACKAGE_DIR, stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, TESSERA_THREADS: '1' } });
    this.exited = new Promise((resolve) => this.child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      this.lines.push(line);
      for (const w of [...this.waiters]) {
        if (this.lines.indexOf(w.line, w.from) >= 0) {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    });
    this.child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
  }

  /** Starts a host process and waits until its worker is taking jobs. */
  static async start(options: HostProcessOptions): Promise<HostProcess> {
    const host = new HostProcess(options);
    await host.expect('ready', 0, 30_000);
    return host;
  }

  async pause(): Promise<void> {
    await this.command('pause', 'paused');
  }

  async resume(): Promise<void> {
    await this.command('resume', 'resumed');
  }

  /** SIGKILL: no goodbye, its load key simply stops being refreshed. */
  async kill(): Promise<void> {
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGSTOP: the process stops dead (no reports, no steps) but keeps its state, until thaw(). */
  freeze(): void {
    this.child.kill('SIGSTOP');
  }

  /** SIGCONT: a frozen process carries on where it stopped. */
  thaw(): void {
    this.child.kill('SIGCONT');
  }

  /** SIGTERM: closes the worker and exits 0. */
  async stop(): Promise<number | string> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGTERM');
    return this.exited;
  }

  private async command(command: string, ack: string): Promise<void> {
    const from = this.lines.length;
    this.child.stdin!.write(`${command}\n`);
    await this.expect(ack, from, 10_000);
  }

  private expect(line: string, from: number, timeoutMs: number): Promise<void> {
    if (this.lines.indexOf(line, from) >= 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`host ${this.hostId}: no '${line}' within ${timeoutMs} ms; stderr:\n${this.stderr}`)), timeoutMs);
      const waiter = {
        line,
        from,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      this.waiters.push(waiter);
      void this.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`host ${this.hostId} exited (${code}) before '${line}'; stderr:\n${this.stderr}`));
      });
    });
  }
}

// ─── streams ─────────────────────────────────────────────────────────────────────────────────────────────────

export interface Collected {
  /** Token indices in delivery order (0, 1, 2, … when nothing was duplicated or lost). */
  indices: number[];
  tokens: number[];
  result: FinishedResult;
}

/** Reads a stream to its end; rejects with its error. `onToken` sees each token as it arrives. */
export async function collect(stream: ClientStream, onToken?: (count: number) => void): Promise<Collected> {
  const indices: number[] = [];
  const tokens: number[] = [];
  for await (const ev of stream) {
    if (ev.type === 'token') {
      indices.push(ev.index);
      tokens.push(ev.token);
      onToken?.(tokens.length);
    } else if (ev.type === 'finish') {
      return { indices, tokens, result: ev.result };
    } else {
      throw ev.error;
    }
  }
  throw new Error(`request ${stream.id}: the stream ended without a result`);
}

/** 0, 1, …, n-1. */
export function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

// ─── a private redis-server ──────────────────────────────────────────────────────────────────────────────────

export { freePort, PrivateRedis } from '@tessera/test-utils';

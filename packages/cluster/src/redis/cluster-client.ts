/**
 * The frontend's side of the distributed cluster: submit and cancel are jobs on the scheduler's inbox; a
 * request's events come back from its Redis stream through one shared XREAD BLOCK loop over every open stream.
 * The loop remembers the last entry id of each stream, so after a reconnect it goes on from there, and the
 * ClientStream drops what arrives twice (at-least-once writes) or from a superseded attempt.
 */
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';

import { ClientStream } from '../client/client-stream.js';
import { ClusterArgumentError, ClusterError } from '../errors.js';
import type { GenerateRequest, HostLoad } from '../types.js';
import { CLOSE_WAIT_MS, connectRedis, isConnectionError, type RedisOptions, resolveRedisOptions, settleWithin } from './connection.js';
import { CLUSTER_JOB_OPTIONS, jobIds, type RedisKeys, redisKeys, SCHEDULER_QUEUE } from './keys.js';
import { decodeEntry, type StreamEntry } from './stream-events.js';

export interface RedisClusterClient {
  /**
   * Adds a 'submit' job (its job id comes from the request id: idempotent) and returns a ClientStream fed from the
   * request's Redis stream. A request id already open in this client returns its stream.
   */
  submit(request: GenerateRequest): ClientStream;
  /** Client disconnect: a 'cancel' job; the stream ends with finishReason 'cancelled' when the host confirms, or at once if queued. */
  cancel(id: string): void;
  /** The live hosts' last load reports (for /v1/models and /health in the frontend), by host id. */
  hosts(): Promise<HostLoad[]>;
  /** Ends every open stream with a TESSERA_CLUSTER_CLOSED error and closes the connections. */
  close(): Promise<void>;
}

/** Longest a read blocks before looking at the set of open streams again (a missed wake-up costs at most this). */
const READ_BLOCK_MS = 1000;
/** Entries read per stream per round. */
const READ_COUNT = 512;

export async function connectClusterClient(options: RedisOptions): Promise<RedisClusterClient> {
  const { prefix } = resolveRedisOptions(options);
  const redis = await connectRedis(options, 'client');
  let reader: Redis;
  try {
    reader = await connectRedis(options, 'client-reader');
  } catch (err) {
    redis.disconnect();
    throw err;
  }
  const client = new StreamingClusterClient(redis, reader, redisKeys(prefix));
  await client.start();
  return client;
}

interface OpenStream {
  readonly stream: ClientStream;
  readonly key: string;
  /** The last entry id read ('0-0' before any). */
  lastId: string;
}

class StreamingClusterClient implements RedisClusterClient {
  private readonly inbox: Queue;
  /** Open streams by Redis key. */
  private readonly open = new Map<string, OpenStream>();
  private readerId: number | null = null;
  private readerIdStale = false;
  /** The keys of the XREAD in flight, or null between reads. */
  private reading: Set<string> | null = null;
  private wakeIdle: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  private closed = false;

  constructor(
    private readonly redis: Redis,
    private readonly reader: Redis,
    private readonly keys: RedisKeys,
  ) {
    this.inbox = new Queue(SCHEDULER_QUEUE, { connection: redis, prefix: keys.prefix, defaultJobOptions: CLUSTER_JOB_OPTIONS });
    this.inbox.on('error', (err) => this.warn('inbox queue', err));
    // A reconnected reader has a new client id; it is read again between two reads.
    this.reader.on('ready', () => (this.readerIdStale = true));
  }

  async start(): Promise<void> {
    this.readerId = (await this.reader.client('ID')) as number;
    this.loop = this.readLoop();
  }

  submit(request: GenerateRequest): ClientStream {
    if (this.closed) throw new ClusterError('TESSERA_CLUSTER_CLOSED', 'the cluster client is closed');
    if (!request || typeof request.id !== 'string' || request.id.length === 0) {
      throw new ClusterArgumentError('submit: request.id must be a non-empty string');
    }
    const key = this.keys.stream(request.id);
    const existing = this.open.get(key);
    if (existing) return existing.stream;
    const stream = new ClientStream(request.id);
    this.open.set(key, { stream, key, lastId: '0-0' });
    this.inbox.add('submit', request, { jobId: jobIds.submit(request.id) }).catch((err) => {
      this.open.delete(key);
      stream.fail(err instanceof Error ? err : new Error(String(err)));
    });
    this.wakeReader();
    return stream;
  }

  cancel(id: string): void {
    if (this.closed) return;
    this.inbox.add('cancel', { id }, { jobId: jobIds.cancel(id) }).catch((err) => this.warn('cancel', err));
  }

  async hosts(): Promise<HostLoad[]> {
    const members = (await this.redis.smembers(this.keys.hosts)).sort();
    if (members.length === 0) return [];
    const raws = await this.redis.mget(members.map((m) => this.keys.load(m)));
    const loads: HostLoad[] = [];
    raws.forEach((raw, i) => {
      if (raw === null) return;
      try {
        loads.push({ ...(JSON.parse(raw) as HostLoad), hostId: members[i]! });
      } catch {
        // A report this package did not write: not a host.
      }
    });
    return loads;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const { stream } of this.open.values()) {
      if (!stream.done) stream.fail(new ClusterError('TESSERA_CLUSTER_CLOSED', `request ${stream.id}: the cluster client was closed`));
    }
    this.open.clear();
    this.wakeIdle?.();
    this.reader.disconnect();
    await this.loop?.catch(() => {});
    await settleWithin(this.inbox.close(), CLOSE_WAIT_MS);
    await settleWithin(this.redis.quit(), CLOSE_WAIT_MS);
    this.redis.disconnect();
  }

  // ─── the read loop ─────────────────────────────────────────────────────────────────────────────────────────

  private async readLoop(): Promise<void> {
    while (!this.closed) {
      if (this.open.size === 0) {
        await new Promise<void>((resolve) => (this.wakeIdle = resolve));
        this.wakeIdle = null;
        continue;
      }
      if (this.readerIdStale) {
        this.readerIdStale = false;
        this.readerId = (await this.reader.client('ID').catch(() => this.readerId)) as number | null;
      }
      const streams = [...this.open.values()];
      this.reading = new Set(streams.map((s) => s.key));
      let reply: [string, StreamEntry[]][] | null;
      try {
        reply = (await this.reader.xread(
          'COUNT',
          READ_COUNT,
          'BLOCK',
          READ_BLOCK_MS,
          'STREAMS',
          ...streams.map((s) => s.key),
          ...streams.map((s) => s.lastId),
        )) as [string, StreamEntry[]][] | null;
      } catch (err) {
        if (this.closed) return;
        this.warn('stream read', err);
        await new Promise((resolve) => setTimeout(resolve, 100));
        continue;
      } finally {
        this.reading = null;
      }
      for (const [key, entries] of reply ?? []) {
        const open = this.open.get(key);
        if (!open) continue;
        for (const entry of entries) {
          open.lastId = entry[0];
          const event = decodeEntry(entry);
          if (event) open.stream.accept(event);
        }
        if (open.stream.done) this.open.delete(key);
      }
    }
  }

  /** A stream was opened: the read in flight does not include it, so it is cut short (CLIENT UNBLOCK). */
  private wakeReader(): void {
    if (this.wakeIdle) {
      this.wakeIdle();
      return;
    }
    void this.unblock();
  }

  private async unblock(): Promise<void> {
    // The XREAD may not have reached Redis yet when the UNBLOCK does: try again briefly while it is still in flight.
    for (let tries = 0; tries < 10; tries++) {
      const reading = this.reading;
      if (this.closed || !reading || this.readerId === null || [...this.open.keys()].every((k) => reading.has(k))) return;
      const unblocked = (await this.redis.client('UNBLOCK', this.readerId).catch(() => 0)) as number;
      if (unblocked === 1) return;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  private warn(what: string, err: unknown): void {
    if (this.closed || isConnectionError(err)) return;
    process.emitWarning(`tessera cluster client: ${what} failed: ${(err as Error)?.message ?? String(err)}`);
  }
}

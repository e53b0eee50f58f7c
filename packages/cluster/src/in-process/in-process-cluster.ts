/**
 * InProcessCluster: a frontend, the Punica scheduler and several engine hosts in one process. Used by tests and
 * by `@tessera/sim` (simulated GPUs under a virtual clock), and by anyone running more than one engine in a
 * process. The distributed form (RedisCluster*) moves the same messages over BullMQ and Redis streams.
 *
 *   const cluster = new InProcessCluster({ maxBatch: 32 });
 *   cluster.addHost('gpu-0', batcherEngine(batcher0));
 *   const stream = cluster.submit(request);           // ClientStream: tokens once, in order, across migrations
 *   for await (const ev of stream) ...
 */
import { ClusterArgumentError } from '../errors.js';
import { ClientStream } from '../client/client-stream.js';
import { PunicaScheduler, type PunicaSchedulerOptions } from '../scheduler/punica-scheduler.js';
import type { GenerateRequest, HostEngine, HostEvent } from '../types.js';
import { InProcessEngineHost } from './in-process-host.js';

export interface InProcessClusterOptions extends PunicaSchedulerOptions {
  /** Use this scheduler instead of building one from the options. */
  scheduler?: PunicaScheduler;
}

export class InProcessCluster {
  readonly scheduler: PunicaScheduler;
  private readonly hosts = new Map<string, InProcessEngineHost>();
  private readonly streams = new Map<string, ClientStream>();

  constructor(options: InProcessClusterOptions = {}) {
    this.scheduler = options.scheduler ?? new PunicaScheduler(options);
    // The fence: the stream learns of a new attempt before that attempt's host can emit anything.
    this.scheduler.on('placed', ({ id, hostId, attempt, generated }) => {
      this.streams.get(id)?.accept({ kind: 'placed', id, attempt, hostId, generated });
    });
    this.scheduler.on('done', ({ id }) => this.streams.delete(id));
  }

  /** Adds a host running `engine`; queued requests are placed on it if they fit. */
  addHost(id: string, engine: HostEngine): InProcessEngineHost {
    if (this.hosts.has(id)) throw new ClusterArgumentError(`host ${JSON.stringify(id)} is already in the cluster`);
    const host = new InProcessEngineHost(id, engine, (hostId, event) => this.onHostEvent(hostId, event));
    this.hosts.set(id, host);
    this.scheduler.addHost(host);
    return host;
  }

  host(id: string): InProcessEngineHost | undefined {
    return this.hosts.get(id);
  }

  /**
   * Takes a host out as if it died: its requests are placed again, continuing after the tokens their clients
   * already have. The engine itself is not touched (the caller stops it); its later events are ignored.
   */
  removeHost(id: string): string[] {
    if (!this.hosts.delete(id)) return [];
    return this.scheduler.removeHost(id, (requestId) => this.streams.get(requestId)?.delivered ?? []);
  }

  /** Submits a request; its events arrive on the returned stream. A repeated id returns the stream in flight. */
  submit(request: GenerateRequest): ClientStream {
    const existing = this.streams.get(request.id);
    if (existing) return existing;
    const stream = new ClientStream(request.id);
    this.streams.set(request.id, stream);
    this.scheduler.submit(request);
    return stream;
  }

  /** Cancels a request (client disconnect): it leaves its host or the queue; its stream ends 'cancelled'. */
  cancel(id: string): boolean {
    const stream = this.streams.get(id);
    const location = this.scheduler.locate(id);
    if (!this.scheduler.cancel(id)) return false;
    if (stream && !stream.done) {
      const tokens = [...stream.delivered];
      stream.accept({
        kind: 'finish',
        id,
        attempt: Math.max(stream.attempt, location?.attempt ?? 0),
        result: { id, tokens, text: '', finishReason: 'cancelled', promptTokens: 0, completionTokens: tokens.length },
      });
    }
    this.streams.delete(id);
    return true;
  }

  private onHostEvent(hostId: string, event: HostEvent): void {
    if (!this.hosts.has(hostId)) return;
    this.streams.get(event.id)?.accept(event);
    this.scheduler.onHostEvent(hostId, event);
  }
}

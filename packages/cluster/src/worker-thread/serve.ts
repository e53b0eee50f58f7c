/**
 * The host side of the worker-thread transport of the host protocol: runs an engine inside a worker_thread and
 * serves the front end's messages (submit, cancel, admin calls, shutdown, exit). The front side is server-kit's
 * WorkerEngineClient. The same engine object could be served by the in-process or the Redis transport instead.
 *
 *   // engine-worker.ts (the worker's entry)
 *   serveWorkerHost<MyPlacement, MyEvent, MyNotice, MyAdmin, MyReady>(async ({ workerData, progress, notify }) => {
 *     const engine = …;                    // loads the model: everything native happens in this thread
 *     return { engine, admin: { stats: () => engine.stats() }, ready: { … }, shutdown: () => engine.close() };
 *   });
 *
 * Request events and notices are batched per microtask (one engine step's worth) and posted in order, so the front
 * end sees one ordered stream; an admin reply is posted after the events that preceded it. Errors cross as core's
 * serializeError. A start that throws posts `init-failed` and exits; `fatal(err)` reports a failure after start.
 */
import { parentPort, workerData } from 'node:worker_threads';

import { serializeError } from '@tessera/core';

import type { AdminCalls, AdminHandlers, FromWorkerHost, HostMessage, HostPlacement, ProtocolEngine, RequestEventBase, ToWorkerHost } from '../types.js';

export interface WorkerHostContext<Notice> {
  /** The worker's init data (what the front end passed as workerData). */
  workerData: unknown;
  /** A start-up progress line (profiling, loading), shown by the front end. */
  progress(line: string): void;
  /** A notice: an event that belongs to no request, ordered with the request events. */
  notify(notice: Notice): void;
  /** The engine failed after start (its step loop threw): reports it and exits the thread. */
  fatal(err: unknown): void;
}

export interface WorkerHostStarted<Placed extends HostPlacement, Event, Admin extends AdminCalls, Ready> {
  engine: ProtocolEngine<Placed, Event>;
  admin: AdminHandlers<Admin>;
  /** Sent to the front end with the ready message (model summary, start-up tasks…). */
  ready: Ready;
  /** Stops serving: drains or cancels what the engine holds and frees it (the front end drained HTTP first). */
  shutdown(): Promise<void>;
}

export type WorkerHostSpec<Placed extends HostPlacement, Event, Notice, Admin extends AdminCalls, Ready> = (
  context: WorkerHostContext<Notice>,
) => Promise<WorkerHostStarted<Placed, Event, Admin, Ready>>;

export function serveWorkerHost<Placed extends HostPlacement, Event extends RequestEventBase, Notice, Admin extends AdminCalls, Ready>(
  start: WorkerHostSpec<Placed, Event, Notice, Admin, Ready>,
): void {
  const port = parentPort;
  if (!port) throw new Error('serveWorkerHost runs in an engine worker thread (started by a WorkerEngineClient), not as a script');
  const post = (msg: FromWorkerHost<Event, Notice, Ready>) => port.postMessage(msg);

  let outbox: HostMessage<Event, Notice>[] = [];
  const flush = () => {
    if (outbox.length === 0) return;
    const events = outbox;
    outbox = [];
    post({ type: 'events', events });
  };
  const emit = (message: HostMessage<Event, Notice>) => {
    if (outbox.length === 0) queueMicrotask(flush);
    outbox.push(message);
  };
  const fatal = (err: unknown) => {
    flush();
    post({ type: 'fatal', error: serializeError(err) });
    process.exit(1);
  };

  const serve = (started: WorkerHostStarted<Placed, Event, Admin, Ready>) => {
    const reply = (callId: number, work: () => unknown) => {
      Promise.resolve()
        .then(work)
        .then(
          (value) => {
            flush();
            post({ type: 'reply', callId, ok: true, value });
          },
          (err: unknown) => {
            flush();
            post({ type: 'reply', callId, ok: false, error: serializeError(err) });
          },
        );
    };
    port.on('message', (msg: ToWorkerHost<Placed>) => {
      switch (msg.type) {
        case 'submit': {
          const { placement } = msg;
          try {
            started.engine.submit(placement, (event) => emit({ event }));
          } catch (err) {
            // A request the engine cannot take: its stream ends with the typed error, nothing else changed.
            emit({ event: { kind: 'error', id: placement.request.id, attempt: placement.attempt, error: serializeError(err) } as unknown as Event });
          }
          break;
        }
        case 'cancel':
          started.engine.cancel(msg.id);
          break;
        case 'admin': {
          const handler = (started.admin as Record<string, (args: unknown) => unknown>)[msg.name];
          reply(msg.callId, () => {
            if (!handler) throw new Error(`no admin call named ${JSON.stringify(msg.name)}`);
            return handler(msg.args);
          });
          break;
        }
        case 'shutdown':
          reply(msg.callId, async () => {
            await started.shutdown();
            return null;
          });
          break;
        case 'exit':
          // From this thread's event loop, so no native call is in flight (terminating inside one aborts the process).
          process.exit(msg.code);
      }
    });
    post({ type: 'ready', info: started.ready });
  };

  start({ workerData: workerData as unknown, progress: (line) => post({ type: 'progress', line }), notify: (notice) => emit({ notice }), fatal }).then(serve, (err: unknown) => {
    post({ type: 'init-failed', error: serializeError(err) });
    // From JS, with nothing in flight: ending the thread here is safe for the native addon.
    process.exit(1);
  });
}

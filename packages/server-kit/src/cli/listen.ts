/**
 * Serving a built fastify app as a process: listen, and shut down gracefully (close-with-grace) on SIGINT,
 * SIGTERM or an uncaught error: stop accepting connections, let in-flight requests and streams finish (the app's
 * onClose hooks then stop its engine worker), and exit when done or after `graceMs`. A second signal exits at once.
 */
import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';

export interface ListenWithGraceOptions {
  host: string;
  port: number;
  /** How long a signal-triggered shutdown may take before the process exits anyway (default 30 s). */
  graceMs?: number;
}

/** Listens and installs the graceful shutdown; resolves with the address. */
export async function listenWithGrace(app: FastifyInstance, options: ListenWithGraceOptions): Promise<string> {
  closeWithGrace({ delay: options.graceMs ?? 30_000 }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error');
    else app.log.info({ signal }, 'shutting down: draining in-flight requests');
    await app.close();
  });
  return app.listen({ host: options.host, port: options.port });
}

/**
 * ClientStream: a generation request's {@link EventStream} (tokens, then the FinishedResult) as a cluster front end
 * reads it, with the scheduler's `placed` markers and evictions moving the attempt forward. `delivered` is the
 * token ids so far: what a new placement continues after.
 */
import { RemoteError as CoreRemoteError, deserializeError, type SerializedError } from '@tessera/core';

import { RemoteError } from '../errors.js';
import type { FinishedResult, StreamEvent, TokenEvent } from '../types.js';
import { EventStream, type StreamOutput } from './event-stream.js';

export type ClientEvent = StreamOutput<TokenEvent, FinishedResult>;

/** A registered class comes back as itself; anything else as cluster's RemoteError (which names its adapter). */
function revive(error: SerializedError): Error {
  const err = deserializeError(error);
  return err instanceof CoreRemoteError ? new RemoteError(error) : err;
}

export class ClientStream extends EventStream<TokenEvent, FinishedResult, StreamEvent> {
  constructor(id: string) {
    super(id, { revive });
  }

  /** The tokens delivered so far, in order: what a new placement must continue after. */
  get delivered(): readonly number[] {
    return this.items.map((t) => t.token);
  }
}

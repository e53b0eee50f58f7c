/**
 * Errors → HTTP, in one place. A library error states its kind (core's TesseraError); the kind alone decides the
 * status, so a new error class cannot become a 500 by accident and two servers cannot disagree:
 *
 *   invalid 400 · not_found 404 · conflict 409 · capacity 507 (a full store: registered adapters or tasks over the
 *   device budget) · unavailable 503 (a busy engine: KV or queue full; an engine or Redis that is down) · internal 500
 *
 * Errors raised by the HTTP layer itself (an upload over the size limit, an input longer than the model's context)
 * are {@link HttpError}s with their own status. Every error body is
 *
 *   { "error": { "message", "type", "code", "param", …fields } }
 *
 * OpenAI's shape, plus the error's own fields (the task, the adapter, the budget) unless the server turns them off.
 */
import { type ErrorField, type ErrorKind, serializeError, TesseraError, registerErrors } from '@tessera/core';

import { describeSchemaErrors, type SchemaError } from '../plugins/schema-errors.js';

/** The HTTP status of each error kind. */
export const STATUS_BY_KIND: Readonly<Record<ErrorKind, number>> = {
  invalid: 400,
  not_found: 404,
  conflict: 409,
  capacity: 507,
  unavailable: 503,
  internal: 500,
};

/** The body's `type`, from the status (OpenAI's vocabulary, plus capacity_error for 507). */
export type ErrorType = 'invalid_request_error' | 'not_found_error' | 'capacity_error' | 'server_error' | 'service_unavailable_error';

export function errorType(status: number): ErrorType {
  if (status === 404) return 'not_found_error';
  if (status === 507) return 'capacity_error';
  if (status === 503) return 'service_unavailable_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

function kindOfStatus(status: number): ErrorKind {
  if (status === 404) return 'not_found';
  if (status === 409) return 'conflict';
  if (status === 507) return 'capacity';
  if (status === 503) return 'unavailable';
  return status >= 500 ? 'internal' : 'invalid';
}

export interface HttpErrorOptions {
  /** The request field at fault ('messages[0].content', 'params'). */
  param?: string | null;
  /** Extra body fields (snake_case, as the API): the limit broken, the offending index… */
  details?: Record<string, ErrorField>;
  type?: ErrorType;
  cause?: unknown;
}

/** An error of the HTTP layer itself, with its status and the API's own `code` (e.g. 'model_not_found'). */
export class HttpError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly statusCode: number;
  /** The body's `code` (the API's vocabulary, not a TESSERA_* code); null for none. */
  readonly publicCode: string | null;
  readonly param: string | null;
  readonly details: Record<string, ErrorField>;
  readonly type: ErrorType;

  constructor(statusCode: number, publicCode: string | null, message: string, options: HttpErrorOptions = {}) {
    super('TESSERA_HTTP', message, { kind: kindOfStatus(statusCode), ...(options.cause === undefined ? {} : { cause: options.cause }) });
    this.statusCode = statusCode;
    this.publicCode = publicCode;
    this.param = options.param ?? null;
    this.details = options.details ?? {};
    this.type = options.type ?? errorType(statusCode);
  }

  /** The body this error answers with (an HttpError is already in the API's words: no `describe`). */
  toBody(): { error: Record<string, ErrorField> } {
    return errorBody(errorReply(this));
  }
}

/** The engine (worker thread, cluster) is not running or went away: 503 by its kind. */
export class EngineUnavailableError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  constructor(reason: string, options?: { cause?: unknown }) {
    super('TESSERA_ENGINE_UNAVAILABLE', `The engine is unavailable: ${reason}`, options);
  }
}

registerErrors(HttpError, EngineUnavailableError);

/** The status an error answers with: an HttpError's own, a TesseraError's by kind, fastify's 4xx, else 500. */
export function httpStatus(err: unknown): number {
  if (err instanceof HttpError) return err.statusCode;
  if (err instanceof TesseraError) return STATUS_BY_KIND[err.kind];
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return status;
  return 500;
}

/** One error reply: its status and the body's fields. */
export interface ErrorReply {
  status: number;
  message: string;
  type: ErrorType;
  code: string | null;
  param: string | null;
  /** Further body fields. */
  details: Record<string, ErrorField>;
}

export interface ErrorMappingOptions {
  /** Per-field messages for union-typed schema fields (see describeSchemaErrors). */
  unionHints?: Readonly<Record<string, string>>;
  /** The `code` of a schema-validation error (default null). */
  validationCode?: string | null;
  /** Put a library error's own fields in the body (default true; OpenAI's body has exactly four keys). */
  fields?: boolean;
  /**
   * The API's wording of a library error (or of one of fastify's own 4xx): its public code, param, renamed fields
   * or a hint in the message. The status stays the kind's; this only words the body.
   */
  describe?: (err: Error, reply: ErrorReply) => ErrorReply;
}

/** How an API words one of the engine's typed errors (by its stable TESSERA_* code). */
export interface ErrorWording {
  /** The body's public code ('model_not_found'). */
  code: string;
  /** The request field at fault. */
  param?: string;
  type?: ErrorType;
  /** Appended to the message: what the client or operator can do ('; unload tasks, or …'). */
  hint?: string;
}

/**
 * A `describe` from one table of TESSERA_* codes, as both servers word the engine's errors: a listed error gets
 * its public code, param, type and hint; an unlisted one the code null (or its own, with `keepUnlisted`).
 * `fields` renames the error's own fields for the body and drops the others (default: all kept as they are).
 * Errors without a TESSERA_* code are left alone.
 */
export function describeByCode(
  table: Readonly<Record<string, ErrorWording>>,
  options: { fields?: Readonly<Record<string, string>>; keepUnlisted?: boolean } = {},
): (err: Error, reply: ErrorReply) => ErrorReply {
  return (err, reply) => {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string' || !code.startsWith('TESSERA_')) return reply;
    const wording = table[code];
    let details = { ...reply.details };
    if (options.fields !== undefined) {
      details = {};
      // Several fields may carry one API name (task, taskId): the first one set wins.
      for (const [field, value] of Object.entries(reply.details)) {
        const name = options.fields[field];
        if (name !== undefined && details[name] === undefined) details[name] = value;
      }
    }
    return {
      ...reply,
      message: `${reply.message}${wording?.hint ?? ''}`,
      type: wording?.type ?? reply.type,
      code: wording?.code ?? (options.keepUnlisted ? reply.code : null),
      param: wording?.param ?? reply.param,
      details,
    };
  };
}

/** The reply for any thrown value. Unexpected failures get a generic message: the log has the details. */
export function errorReply(err: unknown, options: ErrorMappingOptions = {}): ErrorReply {
  const status = httpStatus(err);
  const base = (message: string, code: string | null, param: string | null = null, details: Record<string, ErrorField> = {}): ErrorReply => ({
    status,
    message,
    type: errorType(status),
    code,
    param,
    details,
  });
  if (err instanceof HttpError) return { ...base(err.message, err.publicCode, err.param, err.details), type: err.type };
  const validation = (err as { validation?: unknown } | null)?.validation;
  if (Array.isArray(validation)) {
    const context = (err as { validationContext?: string }).validationContext ?? 'body';
    const { message, param } = describeSchemaErrors(validation as SchemaError[], context, options.unionHints);
    return { ...base(message, options.validationCode ?? null, param), status: 400, type: 'invalid_request_error' };
  }
  if (err instanceof TesseraError) {
    const reply = base(err.message, err.code, null, options.fields === false ? {} : serializeError(err).fields);
    return options.describe ? { ...options.describe(err, reply), status } : reply;
  }
  if (status < 500 && err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    const reply = base(err.message, typeof code === 'string' ? code : null);
    return options.describe ? { ...options.describe(err, reply), status } : reply;
  }
  return base('internal server error', 'internal_error');
}

/** The JSON body of a reply. */
export function errorBody(reply: ErrorReply): { error: Record<string, ErrorField> } {
  return { error: { message: reply.message, type: reply.type, code: reply.code, param: reply.param, ...reply.details } };
}

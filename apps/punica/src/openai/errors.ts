/**
 * OpenAI-style errors: every non-2xx reply of the server is `{ error: { message, type, param, code } }`, the body
 * the `openai` client parses into its typed errors (NotFoundError, BadRequestError, …). Routes throw
 * {@link ApiError}; the error-handler plugin turns it (and fastify's own validation errors) into that body.
 */

/** The `type` field: OpenAI's vocabulary. */
export type ApiErrorType = 'invalid_request_error' | 'not_found_error' | 'server_error' | 'service_unavailable_error';

export interface OpenAiErrorBody {
  error: { message: string; type: ApiErrorType; param: string | null; code: string | null };
}

export class ApiError extends Error {
  readonly statusCode: number;
  readonly type: ApiErrorType;
  readonly param: string | null;
  readonly code: string | null;

  constructor(statusCode: number, message: string, options: { type?: ApiErrorType; param?: string | null; code?: string | null; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ApiError';
    this.statusCode = statusCode;
    this.type = options.type ?? defaultType(statusCode);
    this.param = options.param ?? null;
    this.code = options.code ?? null;
  }

  toBody(): OpenAiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

function defaultType(status: number): ApiErrorType {
  if (status === 404) return 'not_found_error';
  if (status === 503) return 'service_unavailable_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** 400 with a parameter name: the request itself is wrong. */
export function badRequest(message: string, param: string | null = null, code: string | null = null): ApiError {
  return new ApiError(400, message, { param, code });
}

/** 404 for a `model` that is neither the base model nor a registered adapter (OpenAI's wording and code). */
export function modelNotFound(model: string): ApiError {
  return new ApiError(404, `The model \`${model}\` does not exist.`, { type: 'invalid_request_error', param: 'model', code: 'model_not_found' });
}

/** 503: the engine worker is gone (crashed or shut down); the request was not (or no longer) served. */
export function engineUnavailable(reason: string): ApiError {
  return new ApiError(503, `The engine is unavailable: ${reason}`, { code: 'engine_unavailable' });
}

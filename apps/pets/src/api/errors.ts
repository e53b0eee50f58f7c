/**
 * Error bodies. Every non-2xx reply of the server is
 *
 *   { "error": { "message", "type", "code", "param", …details } }
 *
 * the shape of the Punica server's (OpenAI's) errors, plus the details a client needs to act without parsing the
 * message: the task id, the PET types this server knows, the offending tensor, the input index and token limit.
 * Routes throw {@link ApiError}; the errors plugin turns it (and fastify's own validation errors) into that body;
 * {@link toApiError} maps the engine worker's typed errors to statuses in one table.
 */
import { EngineError, EngineUnavailableError } from '../engine/errors.js';

export type ApiErrorType = 'invalid_request_error' | 'not_found_error' | 'capacity_error' | 'server_error' | 'service_unavailable_error';

/** Detail fields of an error body (snake_case, as the rest of the API). */
export interface ApiErrorDetails {
  task?: string;
  pet_type?: string;
  known_pet_types?: string[];
  tensor?: string;
  shared_model?: string;
  /** The offending input's index in `input`. */
  index?: number;
  /** The offending input's token count, or the request's input count. */
  tokens?: number;
  inputs?: number;
  /** The limit it broke (tokens, inputs or bytes). */
  limit?: number;
  budget_bytes?: number;
  requested_bytes?: number;
}

export interface ApiErrorBody {
  error: { message: string; type: ApiErrorType; code: string | null; param: string | null } & ApiErrorDetails;
}

export class ApiError extends Error {
  readonly statusCode: number;
  readonly type: ApiErrorType;
  readonly code: string | null;
  readonly param: string | null;
  readonly details: ApiErrorDetails;

  constructor(
    statusCode: number,
    message: string,
    options: { type?: ApiErrorType; code?: string | null; param?: string | null; details?: ApiErrorDetails; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ApiError';
    this.statusCode = statusCode;
    this.type = options.type ?? defaultType(statusCode);
    this.code = options.code ?? null;
    this.param = options.param ?? null;
    this.details = options.details ?? {};
  }

  toBody(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, code: this.code, param: this.param, ...this.details } };
  }
}

function defaultType(status: number): ApiErrorType {
  if (status === 404) return 'not_found_error';
  if (status === 507) return 'capacity_error';
  if (status === 503) return 'service_unavailable_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** 400: the request itself is wrong; `param` names the field. */
export function badRequest(message: string, param: string | null = null, code: string | null = null, details: ApiErrorDetails = {}): ApiError {
  return new ApiError(400, message, { param, code, details });
}

export function taskNotFound(id: string): ApiError {
  return new ApiError(404, `task ${JSON.stringify(id)} does not exist`, { code: 'task_not_found', details: { task: id } });
}

export function unknownPetType(petType: string, known: readonly string[]): ApiError {
  return new ApiError(400, `unknown PET type ${JSON.stringify(petType)}; this server runs ${known.map((t) => JSON.stringify(t)).join(', ')}`, {
    param: 'pet_type',
    code: 'unknown_pet_type',
    details: { pet_type: petType, known_pet_types: [...known] },
  });
}

/** 503: the engine worker is gone (crashed or shut down); the request was not (or no longer) served. */
export function engineUnavailable(reason: string): ApiError {
  return new ApiError(503, `The engine is unavailable: ${reason}`, { code: 'engine_unavailable' });
}

/** Error codes of parameter files that cannot be read at all (not a safetensors file, bad header, truncated). */
const MALFORMED_FILE_CODES = new Set(['TESSERA_PET_FORMAT', 'TESSERA_BAD_HEADER', 'TESSERA_TRUNCATED_FILE', 'TESSERA_UNKNOWN_DTYPE']);

/**
 * Maps an engine failure to its HTTP error. Status choices:
 *   unknown task 404; unknown PET type 400 (listing the known ones); unknown shared model tag 400;
 *   malformed parameter file 400 (`malformed_params`: not a PetS safetensors file, a bad header, truncated data);
 *   a well-formed file that does not fit the shared model 422 (`params_shape_mismatch`, naming the tensor), or
 *   whose hyperparameters are invalid or whose PET type is not the registration's 422 (`invalid_pet_config`);
 *   a task in the wrong state (a duplicate id) 409;
 *   the device budget exceeded 507 Insufficient Storage (`budget_exceeded`): the request is fine, the server has
 *   no room until tasks are unloaded (409 would say the request conflicts with something the client can change).
 */
export function toApiError(err: unknown, knownPetTypes: readonly string[] = []): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof EngineUnavailableError) return engineUnavailable(err.message);
  if (!(err instanceof EngineError)) return new ApiError(500, 'internal error', { cause: err });
  const d = err.details;
  const details: ApiErrorDetails = {};
  if (d.task !== undefined) details.task = d.task;
  if (d.petType !== undefined) details.pet_type = d.petType;
  if (d.tensor !== undefined) details.tensor = d.tensor;
  if (d.sharedModel !== undefined) details.shared_model = d.sharedModel;
  if (d.budgetBytes !== undefined) details.budget_bytes = d.budgetBytes;
  if (d.requestedBytes !== undefined) details.requested_bytes = d.requestedBytes;
  const code = err.code ?? '';
  const make = (status: number, apiCode: string, param: string | null = null, extra: ApiErrorDetails = {}) =>
    new ApiError(status, err.message, { code: apiCode, param, details: { ...details, ...extra }, cause: err });
  switch (code) {
    case 'TESSERA_PET_UNKNOWN_TASK':
      return make(404, 'task_not_found');
    case 'TESSERA_PET_UNKNOWN_TYPE':
      return make(400, 'unknown_pet_type', 'pet_type', { known_pet_types: d.knownPetTypes ?? [...knownPetTypes] });
    case 'TESSERA_PET_UNKNOWN_SHARED_MODEL':
      return make(400, 'unknown_shared_model', 'shared_model');
    case 'TESSERA_PET_SHAPE':
      return make(422, 'params_shape_mismatch', 'params');
    case 'TESSERA_PET_CONFIG':
    case 'TESSERA_PET_TYPE_MISMATCH':
      return make(422, 'invalid_pet_config', 'params');
    case 'TESSERA_PET_TASK_STATE':
      return make(409, 'task_state');
    case 'TESSERA_PET_DEVICE_BUDGET':
    case 'TESSERA_BUDGET_EXCEEDED':
      return new ApiError(507, `${err.message}; unload tasks, or start the server with a larger --budget-mb`, { code: 'budget_exceeded', details, cause: err });
    case 'TESSERA_INVALID_ARGUMENT':
      return make(400, 'invalid_argument');
    default:
      if (MALFORMED_FILE_CODES.has(code)) return make(400, 'malformed_params', 'params');
      return new ApiError(500, err.message, { details, cause: err });
  }
}

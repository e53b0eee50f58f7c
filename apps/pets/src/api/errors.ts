/**
 * Error bodies. Every non-2xx reply of the server is
 *
 *   { "error": { "message", "type", "code", "param", …details } }
 *
 * the shape of the Punica server's (OpenAI's) errors, plus the details a client needs to act without parsing the
 * message: the task id, the PET types this server knows, the offending tensor, the input index and token limit.
 * The status always comes from the error's kind (server-kit: invalid 400, not_found 404, conflict 409, a full
 * device budget 507, an engine that is down 503); this file only words the body in this API's vocabulary.
 */
import type { ErrorField } from '@tessera/core';
import { describeByCode, type ErrorMappingOptions, type ErrorReply, type ErrorWording, HttpError, type HttpErrorOptions } from '@tessera/server-kit';

import { UNION_FIELD_HINTS } from './schemas.js';

/** An error of the HTTP layer (a bad path, an input over a limit) with its status and API code. */
export class ApiError extends HttpError {
  constructor(statusCode: number, message: string, options: HttpErrorOptions & { code?: string | null } = {}) {
    const { code, ...rest } = options;
    super(statusCode, code ?? null, message, rest);
  }
}

/** 400: the request itself is wrong; `param` names the field. */
export function badRequest(message: string, param: string | null = null, code: string | null = null, details: Record<string, ErrorField> = {}): ApiError {
  return new ApiError(400, message, { param, code, details });
}

export function unknownPetType(petType: string, known: readonly string[]): ApiError {
  return new ApiError(400, `unknown PET type ${JSON.stringify(petType)}; this server runs ${known.map((t) => JSON.stringify(t)).join(', ')}`, {
    param: 'pet_type',
    code: 'unknown_pet_type',
    details: { pet_type: petType, known_pet_types: [...known] },
  });
}

const BUDGET_HINT = '; unload tasks, or start the server with a larger --budget-mb';

/** The API's code and param for the engine's typed errors (by stable TESSERA_* code); a full budget says what to do. */
const WORDING: Readonly<Record<string, ErrorWording>> = {
  TESSERA_PET_UNKNOWN_TASK: { code: 'task_not_found' },
  TESSERA_PET_UNKNOWN_TYPE: { code: 'unknown_pet_type', param: 'pet_type' },
  TESSERA_PET_UNKNOWN_SHARED_MODEL: { code: 'unknown_shared_model', param: 'shared_model' },
  TESSERA_PET_SHAPE: { code: 'params_shape_mismatch', param: 'params' },
  TESSERA_PET_CONFIG: { code: 'invalid_pet_config', param: 'params' },
  TESSERA_PET_TYPE_MISMATCH: { code: 'invalid_pet_config', param: 'params' },
  TESSERA_PET_TASK_STATE: { code: 'task_state' },
  TESSERA_PET_DEVICE_BUDGET: { code: 'budget_exceeded', hint: BUDGET_HINT },
  TESSERA_BUDGET_EXCEEDED: { code: 'budget_exceeded', hint: BUDGET_HINT },
  TESSERA_INVALID_ARGUMENT: { code: 'invalid_argument' },
  TESSERA_ENGINE_UNAVAILABLE: { code: 'engine_unavailable' },
  // Parameter files that cannot be read at all (not a safetensors file, bad header, truncated).
  TESSERA_PET_FORMAT: { code: 'malformed_params', param: 'params' },
  TESSERA_BAD_HEADER: { code: 'malformed_params', param: 'params' },
  TESSERA_TRUNCATED_FILE: { code: 'malformed_params', param: 'params' },
  TESSERA_UNKNOWN_DTYPE: { code: 'malformed_params', param: 'params' },
};

/** The error fields the body reports, under their API names. */
const DETAILS: Readonly<Record<string, string>> = {
  task: 'task',
  taskId: 'task',
  petType: 'pet_type',
  known: 'known_pet_types',
  tensor: 'tensor',
  tag: 'shared_model',
  sharedModel: 'shared_model',
  budgetBytes: 'budget_bytes',
  requestedBytes: 'requested_bytes',
};

/**
 * How this server words errors: its codes, params and detail names; a budget error says what to do; multipart's
 * file limit names --max-params-mb.
 */
export function petsErrors(options: { knownPetTypes: () => readonly string[]; maxParamsBytes: number }): ErrorMappingOptions {
  // An unlisted TESSERA_* code stays in the body: a client can still tell the errors apart.
  const byCode = describeByCode(WORDING, { fields: DETAILS, keepUnlisted: true });
  return {
    unionHints: UNION_FIELD_HINTS,
    validationCode: 'invalid_request',
    describe(err: Error, reply: ErrorReply): ErrorReply {
      const code = (err as { code?: unknown }).code;
      if (code === 'FST_REQ_FILE_TOO_LARGE') {
        const message = `the parameter file is larger than ${options.maxParamsBytes} bytes (--max-params-mb)`;
        return { ...reply, message, code: 'params_too_large', param: 'params', details: { limit: options.maxParamsBytes } };
      }
      const described = byCode(err, reply);
      if (code === 'TESSERA_PET_UNKNOWN_TYPE') described.details['known_pet_types'] ??= [...options.knownPetTypes()];
      return described;
    },
  };
}

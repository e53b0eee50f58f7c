/**
 * OpenAI-style errors: every non-2xx reply is `{ error: { message, type, param, code } }`, the body the `openai`
 * client parses into its typed errors (NotFoundError, BadRequestError, …). The status comes from the error's kind
 * (server-kit's one table: invalid 400, not_found 404, conflict 409, capacity 507, unavailable 503); this file only
 * words the body in the API's vocabulary: OpenAI's and vLLM's public codes instead of TESSERA_* ones.
 */
import { UnknownAdapterError } from '@tessera/adapter-swap';
import { describeByCode, type ErrorMappingOptions, type ErrorWording, modelNotFound, OPENAI_UNION_FIELD_HINTS } from '@tessera/server-kit';

/** The public code of the engine's typed errors (by their stable TESSERA_* code); any other is null. */
const CODES: Readonly<Record<string, ErrorWording>> = {
  // OpenAI's client reads an unknown model as invalid_request_error (404).
  TESSERA_UNKNOWN_ADAPTER: { code: 'model_not_found', type: 'invalid_request_error' },
  TESSERA_CONTEXT_TOO_LONG: { code: 'context_length_exceeded' },
  TESSERA_KV_TOO_SMALL: { code: 'kv_cache_too_small', hint: " (the server's KV cache, --kv-budget-mib, cannot hold this request)" },
  TESSERA_ADAPTER_EXISTS: { code: 'adapter_exists', param: 'lora_name' },
  TESSERA_ADAPTER_TOO_LARGE: { code: 'adapter_too_large' },
  TESSERA_ADAPTER_IN_USE: { code: 'adapter_in_use' },
  TESSERA_ADAPTER_LOAD_FAILED: { code: 'adapter_load_failed' },
  TESSERA_BUDGET_EXCEEDED: { code: 'insufficient_capacity' },
  TESSERA_KV_EXHAUSTED: { code: 'insufficient_capacity' },
  TESSERA_ENGINE_UNAVAILABLE: { code: 'engine_unavailable' },
};

export const punicaErrors: ErrorMappingOptions = {
  unionHints: OPENAI_UNION_FIELD_HINTS,
  // OpenAI's body has exactly four keys.
  fields: false,
  describe: describeByCode(CODES),
};

/** An engine error about the request for `model`: an adapter that went away is that model's 404. */
export function requestError(err: unknown, model: string): unknown {
  return err instanceof UnknownAdapterError ? modelNotFound(model) : err;
}

/**
 * OpenAI-style errors: every non-2xx reply is `{ error: { message, type, param, code } }`, the body the `openai`
 * client parses into its typed errors (NotFoundError, BadRequestError, …). The status comes from the error's kind
 * (server-kit's one table: invalid 400, not_found 404, conflict 409, capacity 507, unavailable 503); this file only
 * words the body in the API's vocabulary: OpenAI's and vLLM's public codes instead of TESSERA_* ones.
 */
import { UnknownAdapterError } from '@tessera/adapter-swap';
import { type ErrorMappingOptions, type ErrorReply, modelNotFound, OPENAI_UNION_FIELD_HINTS } from '@tessera/server-kit';

/** The public code of the engine's typed errors (by their stable TESSERA_* code); any other is null. */
const CODES: Readonly<Record<string, string>> = {
  TESSERA_UNKNOWN_ADAPTER: 'model_not_found',
  TESSERA_CONTEXT_TOO_LONG: 'context_length_exceeded',
  TESSERA_KV_TOO_SMALL: 'kv_cache_too_small',
  TESSERA_ADAPTER_EXISTS: 'adapter_exists',
  TESSERA_ADAPTER_TOO_LARGE: 'adapter_too_large',
  TESSERA_ADAPTER_IN_USE: 'adapter_in_use',
  TESSERA_ADAPTER_LOAD_FAILED: 'adapter_load_failed',
  TESSERA_BUDGET_EXCEEDED: 'insufficient_capacity',
  TESSERA_KV_EXHAUSTED: 'insufficient_capacity',
  TESSERA_ENGINE_UNAVAILABLE: 'engine_unavailable',
};

export const punicaErrors: ErrorMappingOptions = {
  unionHints: OPENAI_UNION_FIELD_HINTS,
  // OpenAI's body has exactly four keys.
  fields: false,
  describe(err: Error, reply: ErrorReply): ErrorReply {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string' || !code.startsWith('TESSERA_')) return reply;
    const described = { ...reply, code: CODES[code] ?? null };
    if (code === 'TESSERA_UNKNOWN_ADAPTER') return { ...described, type: 'invalid_request_error' };
    if (code === 'TESSERA_ADAPTER_EXISTS') return { ...described, param: 'lora_name' };
    if (code === 'TESSERA_KV_TOO_SMALL') return { ...described, message: `${reply.message} (the server's KV cache, --kv-budget-mib, cannot hold this request)` };
    return described;
  },
};

/** An engine error about the request for `model`: an adapter that went away is that model's 404. */
export function requestError(err: unknown, model: string): unknown {
  return err instanceof UnknownAdapterError ? modelNotFound(model) : err;
}

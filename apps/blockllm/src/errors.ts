/**
 * BlockLLM's typed errors and their OpenAI wording. The status comes from the error's kind (server-kit's one
 * table: invalid 400, not_found 404, conflict 409, capacity 507, unavailable 503); this file only names the public
 * codes. The zoo's own errors (ZooNotFoundError, ZooInvalidError, ZooConflictError) carry their kinds already.
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';
import { describeByCode, type ErrorMappingOptions, OPENAI_UNION_FIELD_HINTS } from '@tessera/server-kit';

export type BlockllmErrorCode = 'TESSERA_KV_TOO_SMALL' | 'TESSERA_INGEST_INVALID' | 'TESSERA_UNSUPPORTED' | 'TESSERA_PLACEMENT_INVALID';

/** A placement job or a device step that names what is not there (404). */
export class BlockllmPlacementNotFoundError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(message: string) {
    super('TESSERA_PLACEMENT_NOT_FOUND', message);
  }
}

/** A placement job that contradicts the placement as it is (409): the instance exists, does not fit, is in use. */
export class BlockllmPlacementConflictError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(message: string) {
    super('TESSERA_PLACEMENT_CONFLICT', message);
  }
}

/** A request or an ingest the server cannot take as asked (400). */
export class BlockllmRequestError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(code: BlockllmErrorCode, message: string) {
    super(code, message);
  }
}

export const blockllmErrors: ErrorMappingOptions = {
  unionHints: OPENAI_UNION_FIELD_HINTS,
  // OpenAI's body has exactly four keys.
  fields: false,
  describe: describeByCode({
    TESSERA_KV_TOO_SMALL: { code: 'kv_cache_too_small', hint: " (each block's KV cache, --kv-pages, cannot hold this request)" },
    TESSERA_INGEST_INVALID: { code: 'invalid_ingest' },
    TESSERA_UNSUPPORTED: { code: 'unsupported' },
    TESSERA_PLACEMENT_INVALID: { code: 'invalid_placement' },
    TESSERA_PLACEMENT_NOT_FOUND: { code: 'not_found' },
    TESSERA_PLACEMENT_CONFLICT: { code: 'placement_conflict' },
    TESSERA_ZOO_NOT_FOUND: { code: 'not_found' },
    TESSERA_ZOO_CONFLICT: { code: 'conflict' },
    TESSERA_ZOO_INVALID: { code: 'invalid_request' },
    TESSERA_KV_EXHAUSTED: { code: 'insufficient_capacity' },
    TESSERA_ENGINE_UNAVAILABLE: { code: 'engine_unavailable' },
  }),
};

registerErrors(BlockllmRequestError, BlockllmPlacementNotFoundError, BlockllmPlacementConflictError);

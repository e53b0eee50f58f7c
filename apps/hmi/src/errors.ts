/**
 * The server's typed errors. The status comes from each error's kind (server-kit: invalid 400, not_found 404,
 * conflict 409, unavailable 503); `hmiErrors` words the body in this API's vocabulary:
 *
 *   { "error": { "message", "type", "code", "param", …fields } }
 *
 * with the fields a client needs to act without parsing the message (the tenant, domain or job id).
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';
import { describeByCode, type ErrorMappingOptions } from '@tessera/server-kit';

export class HmiError extends TesseraError {
  /** The request field at fault (not enumerable: the body carries it as `param`, not among the fields). */
  declare readonly param: string | null;
  constructor(code: string, kind: ErrorKind, message: string, fields: Record<string, string | number> = {}, param: string | null = null) {
    super(code, message, { kind });
    Object.defineProperty(this, 'param', { value: param, enumerable: false });
    Object.assign(this, fields);
  }
}

export class UnknownTenantError extends HmiError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly tenant: string) {
    super('TESSERA_HMI_UNKNOWN_TENANT', 'not_found', `no tenant ${JSON.stringify(tenant)}`);
  }
}

export class UnknownDomainError extends HmiError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly domain: string) {
    super('TESSERA_HMI_UNKNOWN_DOMAIN', 'not_found', `no domain ${JSON.stringify(domain)}`, {}, 'domain');
  }
}

export class UnknownJobError extends HmiError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly job: string) {
    super('TESSERA_HMI_UNKNOWN_JOB', 'not_found', `no job ${JSON.stringify(job)}`);
  }
}

/** 409: a name taken (or reserved by a queued job), a domain that still has tenants, a job already finished. */
export class HmiConflictError extends HmiError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(code: string, message: string, fields: Record<string, string | number> = {}) {
    super(code, 'conflict', message, fields);
  }
}

/** 400: input the manager or the classifier cannot take (beyond what the route schemas check). */
export class HmiInputError extends HmiError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(code: string, message: string, param: string | null, fields: Record<string, string | number> = {}) {
    super(code, 'invalid', message, fields, param);
  }
}

/** A job cancelled by `DELETE /v1/jobs/:id`: its processor stops at the next check and registers nothing. */
export class JobCancelledError extends HmiError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(readonly job: string) {
    super('TESSERA_HMI_JOB_CANCELLED', 'conflict', `job ${job} was cancelled`);
  }
}

registerErrors(UnknownTenantError, UnknownDomainError, UnknownJobError, HmiConflictError, HmiInputError, JobCancelledError);

const CODES = {
  TESSERA_HMI_UNKNOWN_TENANT: { code: 'tenant_not_found' },
  TESSERA_HMI_UNKNOWN_DOMAIN: { code: 'domain_not_found', param: 'domain' },
  TESSERA_HMI_UNKNOWN_JOB: { code: 'job_not_found' },
  TESSERA_HMI_JOB_CANCELLED: { code: 'job_cancelled' },
  TESSERA_HMI_TENANT_EXISTS: { code: 'tenant_exists', param: 'id' },
  TESSERA_HMI_DOMAIN_EXISTS: { code: 'domain_exists', param: 'name' },
  TESSERA_HMI_DOMAIN_IN_USE: { code: 'domain_in_use' },
  TESSERA_HMI_BUSY: { code: 'operation_pending' },
  TESSERA_HMI_JOB_FINISHED: { code: 'job_finished' },
  TESSERA_HMI_ROOT: { code: 'root_domain' },
  TESSERA_HMI_CORPUS_TOO_SMALL: { code: 'corpus_too_small', param: 'corpus' },
  TESSERA_HMI_BAD_LABEL: { code: 'invalid_label', param: 'examples' },
  TESSERA_HMI_BAD_LABELS: { code: 'invalid_labels', param: 'labels' },
  TESSERA_HMI_BAD_INPUT: { code: 'invalid_input', param: 'texts' },
  TESSERA_HMI_BAD_NAME: { code: 'invalid_name', param: 'name' },
  TESSERA_CORPUS_TOO_SMALL: { code: 'corpus_too_small', param: 'corpus' },
  TESSERA_TOKEN_ID_OUT_OF_RANGE: { code: 'token_id_out_of_range', param: 'token_ids' },
  TESSERA_INVALID_ARGUMENT: { code: 'invalid_argument' },
  TESSERA_REDIS_UNAVAILABLE: { code: 'redis_unavailable' },
} as const;

/** The body's wording: API codes for the TESSERA_* codes, `param` from the error when it names one. */
export function hmiErrors(): ErrorMappingOptions {
  const byCode = describeByCode(CODES, { keepUnlisted: true });
  return {
    validationCode: 'invalid_request',
    describe: (err, reply) => {
      const r = byCode(err, reply);
      const param = err instanceof HmiError && err.param !== null ? err.param : r.param;
      return { ...r, param };
    },
  };
}

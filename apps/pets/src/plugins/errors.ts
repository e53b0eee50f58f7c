/**
 * Error bodies for everything that goes wrong: ApiErrors thrown by routes, fastify's schema validation errors
 * (400 with the offending field as `param`), its own 4xx (bad JSON, wrong content type, body too large), the
 * multipart plugin's limits (413 for a parameter file over --max-params-mb), unknown routes (404), and unexpected
 * failures (500, logged, no internals in the body). The schema messages are Punica's (apps/punica/src/plugins/errors.ts).
 */
import type { FastifyError } from 'fastify';

import { ApiError, toApiError } from '../api/errors.js';
import { UNION_FIELD_HINTS } from '../api/schemas.js';
import { definePlugin } from './define-plugin.js';

interface SchemaError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
}

/** '/input/0' → 'input[0]'. */
export function paramOf(instancePath: string): string {
  return instancePath
    .split('/')
    .filter((s) => s.length > 0)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((acc, seg) => (/^\d+$/.test(seg) ? `${acc}[${seg}]` : acc === '' ? seg : `${acc}.${seg}`), '');
}

/** One readable message for a list of schema errors: the first problem, with a hint for union-typed fields. */
export function describeSchemaErrors(errors: readonly SchemaError[], context: string): { message: string; param: string | null } {
  const required = errors.find((e) => e.keyword === 'required');
  if (required) {
    const props = (required.params.requiredProperties ?? required.params.missingProperty ?? []) as string[] | string;
    const missing = Array.isArray(props) ? props : [props];
    const param = [paramOf(required.instancePath), missing[0] ?? ''].filter((s) => s !== '').join('.');
    return { message: `${context}: ${missing.map((m) => `'${m}'`).join(', ')} ${missing.length === 1 ? 'is' : 'are'} required${required.instancePath ? ` in ${paramOf(required.instancePath)}` : ''}`, param };
  }
  const first = errors[0];
  if (!first) return { message: `${context} is invalid`, param: null };
  // The outermost union (anyOf) around the first error: its field gets one message, not one per branch.
  const union = errors
    .filter((e) => e.keyword === 'anyOf' && (first.instancePath === e.instancePath || first.instancePath.startsWith(`${e.instancePath}/`)))
    .sort((a, b) => a.instancePath.length - b.instancePath.length)[0];
  if (union) {
    const param = paramOf(union.instancePath);
    const key = union.instancePath.split('/').filter((s) => s !== '' && !/^\d+$/.test(s)).pop() ?? '';
    const hint = UNION_FIELD_HINTS[key];
    if (hint) return { message: `${param} ${hint}`, param };
    const branches = errors.filter((e) => e !== union && e.keyword !== 'anyOf' && e.instancePath.startsWith(union.instancePath) && e.message !== 'must be null');
    const messages = [...new Set(branches.map((e) => e.message ?? 'is invalid'))];
    return { message: `${param} ${messages.join(' or ') || 'has an invalid value'}`, param };
  }
  const param = paramOf(first.instancePath);
  return { message: `${param || context} ${first.message ?? 'is invalid'}`, param: param || null };
}

export interface ErrorsPluginOptions {
  /** The parameter-file limit, named in the 413 of an oversized upload. */
  maxParamsBytes: number;
}

export const errorsPlugin = definePlugin<ErrorsPluginOptions>(
  async (app, options) => {
    app.setErrorHandler((err: FastifyError | ApiError | Error, request, reply) => {
      let api: ApiError;
      if (err instanceof ApiError) api = err;
      else if ('validation' in err && Array.isArray(err.validation)) {
        const { message, param } = describeSchemaErrors(err.validation as unknown as SchemaError[], err.validationContext ?? 'body');
        api = new ApiError(400, message, { param, code: 'invalid_request' });
      } else if ('code' in err && err.code === 'FST_REQ_FILE_TOO_LARGE') {
        api = new ApiError(413, `the parameter file is larger than ${options.maxParamsBytes} bytes (--max-params-mb)`, {
          param: 'params',
          code: 'params_too_large',
          details: { limit: options.maxParamsBytes },
        });
      } else if ('statusCode' in err && typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
        api = new ApiError(err.statusCode, err.message, { code: 'code' in err && typeof err.code === 'string' ? err.code : null });
      } else api = toApiError(err);
      if (api.statusCode >= 500) request.log.error({ err }, 'request failed');
      // An unexpected failure's message may carry internals (paths, stack fragments): the log has it, the body does not.
      if (api.statusCode === 500 && api.code === null && !(err instanceof ApiError)) api = new ApiError(500, 'internal server error', { code: 'internal_error' });
      void reply.code(api.statusCode).send(api.toBody());
    });
    app.setNotFoundHandler((request, reply) => {
      const api = new ApiError(404, `Route ${request.method} ${request.url} not found`, { code: 'route_not_found' });
      void reply.code(404).send(api.toBody());
    });
  },
  { name: 'tessera-pets-errors' },
);

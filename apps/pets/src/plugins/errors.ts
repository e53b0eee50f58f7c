/**
 * Error bodies for everything that goes wrong: ApiErrors thrown by routes, fastify's schema validation errors
 * (400 with the offending field as `param`), its own 4xx (bad JSON, wrong content type, body too large), the
 * multipart plugin's limits (413 for a parameter file over --max-params-mb), unknown routes (404), and unexpected
 * failures (500, logged, no internals in the body). The schema messages come from @tessera/server-kit.
 */
import type { FastifyError } from 'fastify';

import { definePlugin, describeSchemaErrors as describeWithHints, type SchemaError } from '@tessera/server-kit';

import { ApiError, toApiError } from '../api/errors.js';
import { UNION_FIELD_HINTS } from '../api/schemas.js';

/** The schema-error message (server-kit's translation) with this API's union-field hints. */
export function describeSchemaErrors(errors: readonly SchemaError[], context: string): { message: string; param: string | null } {
  return describeWithHints(errors, context, UNION_FIELD_HINTS);
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

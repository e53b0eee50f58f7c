/**
 * OpenAI-style error bodies for everything that goes wrong: ApiErrors thrown by routes, fastify's schema
 * validation errors (400 with the offending field as `param`), its own 4xx (bad JSON, wrong content type, body
 * too large), unknown routes (404), and unexpected failures (500, logged, no internals in the body).
 */
import type { FastifyError } from 'fastify';

import { definePlugin, describeSchemaErrors, type SchemaError } from '@tessera/server-kit';

import { ApiError } from '../openai/errors.js';
import { UNION_FIELD_HINTS } from '../openai/schemas.js';
import { toApiError } from '../openai/generation.js';

export const errorsPlugin = definePlugin(
  async (app) => {
    app.setErrorHandler((err: FastifyError | ApiError | Error, request, reply) => {
      let api: ApiError;
      if (err instanceof ApiError) api = err;
      else if ('validation' in err && Array.isArray(err.validation)) {
        const { message, param } = describeSchemaErrors(err.validation as unknown as SchemaError[], err.validationContext ?? 'body', UNION_FIELD_HINTS);
        api = new ApiError(400, message, { param });
      } else if ('statusCode' in err && typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
        api = new ApiError(err.statusCode, err.message, { code: 'code' in err && typeof err.code === 'string' ? err.code : null });
      } else api = toApiError(err);
      if (api.statusCode >= 500) request.log.error({ err }, 'request failed');
      void reply.code(api.statusCode).send(api.toBody());
    });
    app.setNotFoundHandler((request, reply) => {
      const api = new ApiError(404, `Route ${request.method} ${request.url} not found`, { type: 'not_found_error', code: 'route_not_found' });
      void reply.code(404).send(api.toBody());
    });
  },
  { name: 'tessera-punica-errors' },
);

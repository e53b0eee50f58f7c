/**
 * OpenAI-style error bodies for everything that goes wrong: ApiErrors thrown by routes, fastify's schema
 * validation errors (400 with the offending field as `param`), its own 4xx (bad JSON, wrong content type, body
 * too large), unknown routes (404), and unexpected failures (500, logged, no internals in the body).
 */
import type { FastifyError } from 'fastify';

import { ApiError } from '../openai/errors.js';
import { UNION_FIELD_HINTS } from '../openai/schemas.js';
import { toApiError } from '../openai/generation.js';
import { definePlugin } from './define-plugin.js';

interface SchemaError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
}

/** '/messages/0/content' → 'messages[0].content'. */
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
    // Nullable fields (X | null): report X's complaint.
    const branches = errors.filter((e) => e !== union && e.keyword !== 'anyOf' && e.instancePath.startsWith(union.instancePath) && e.message !== 'must be null');
    const messages = [...new Set(branches.map((e) => e.message ?? 'is invalid'))];
    return { message: `${param} ${messages.join(' or ') || 'has an invalid value'}`, param };
  }
  const param = paramOf(first.instancePath);
  return { message: `${param || context} ${first.message ?? 'is invalid'}`, param: param || null };
}

export const errorsPlugin = definePlugin(
  async (app) => {
    app.setErrorHandler((err: FastifyError | ApiError | Error, request, reply) => {
      let api: ApiError;
      if (err instanceof ApiError) api = err;
      else if ('validation' in err && Array.isArray(err.validation)) {
        const { message, param } = describeSchemaErrors(err.validation as unknown as SchemaError[], err.validationContext ?? 'body');
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

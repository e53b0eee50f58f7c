/**
 * Engine errors across the thread boundary: serialized by core (class name, kind, code, fields), rebuilt on the
 * HTTP side, their status taken from their kind (server-kit) and their body worded in this API's vocabulary.
 */
import { describe, expect, it } from 'vitest';

import { deserializeError, serializeError, TesseraError } from '@tessera/core';
import { BudgetExceededError } from '@tessera/native';
import { DeviceBudgetError, PetConfigError, PetFormatError, PetShapeError, PetTypeMismatchError, TaskStateError, UnknownPetTypeError, UnknownSharedModelError, UnknownTaskError } from '@tessera/pet-ops';
import { describeSchemaErrors, EngineUnavailableError, errorBody, errorReply, paramOf } from '@tessera/server-kit';

import { ApiError, petsErrors } from '../src/api/errors.js';
import { UNION_FIELD_HINTS } from '../src/api/schemas.js';

/** What the HTTP side sees after the error crossed the thread boundary (structured clone). */
function remote(err: unknown): Error {
  return deserializeError(structuredClone(serializeError(err)));
}

const known = ['adapter', 'maskbert'];
const options = petsErrors({ knownPetTypes: () => known, maxParamsBytes: 1024 });
function reply(err: unknown): { status: number; error: Record<string, unknown> } {
  const r = errorReply(err, options);
  return { status: r.status, error: errorBody(r).error };
}

describe('engine errors over the thread boundary', () => {
  const cases: [Error, number, string, Record<string, unknown>][] = [
    [new UnknownTaskError('t9'), 404, 'task_not_found', { task: 't9' }],
    [new UnknownPetTypeError('ia3', []), 400, 'unknown_pet_type', { pet_type: 'ia3', param: 'pet_type' }],
    [new UnknownSharedModelError('gpt', ['bert']), 400, 'unknown_shared_model', { shared_model: 'gpt' }],
    [new PetFormatError('<upload>', 'not a safetensors file'), 400, 'malformed_params', { param: 'params' }],
    [new PetShapeError('bert.encoder.layer.0.adapter.down.weight', '[64, 5]', '[64, 6]'), 400, 'params_shape_mismatch', { tensor: 'bert.encoder.layer.0.adapter.down.weight' }],
    [new PetConfigError('empty labels'), 400, 'invalid_pet_config', {}],
    [new PetTypeMismatchError('upload', 'adapter', 'bitfit'), 400, 'invalid_pet_config', { pet_type: 'adapter' }],
    [new TaskStateError('task id taken'), 409, 'task_state', {}],
    [new DeviceBudgetError('loading t', 900, 100, 1000), 507, 'budget_exceeded', { budget_bytes: 1000, requested_bytes: 900, type: 'capacity_error' }],
    [new BudgetExceededError('cannot allocate 8 bytes'), 507, 'budget_exceeded', { type: 'capacity_error' }],
  ];
  it.each(cases)('%s → %i %s', (err, status, code, fields) => {
    const r = reply(remote(err));
    expect(r.status).toBe(status);
    expect(r.error).toMatchObject({ code, ...fields });
  });

  it('lists the known PET types when the error does not', () => {
    expect(reply(remote(new UnknownPetTypeError('ia3', []))).error['known_pet_types']).toEqual([]);
    expect(reply(remote(Object.assign(new UnknownPetTypeError('ia3', []), { known: undefined }))).error['known_pet_types']).toEqual(known);
  });

  it('503 when the engine is gone, 500 for anything untyped, and ApiErrors pass through', () => {
    expect(reply(new EngineUnavailableError('the engine worker crashed'))).toMatchObject({ status: 503, error: { code: 'engine_unavailable' } });
    expect(reply(remote(new Error('kaboom'))).status).toBe(500);
    expect(reply(new TypeError('local bug'))).toMatchObject({ status: 500, error: { message: 'internal server error' } });
    expect(reply(new ApiError(418, 'teapot')).status).toBe(418);
    expect(remote(new UnknownTaskError('x'))).toBeInstanceOf(TesseraError);
  });
});

describe('schema error messages', () => {
  it('names the field, with hints for union-typed fields', () => {
    expect(paramOf('/input/3')).toBe('input[3]');
    expect(describeSchemaErrors([{ keyword: 'required', instancePath: '', params: { requiredProperties: ['pet_type'] } }], 'body', UNION_FIELD_HINTS)).toEqual({
      message: "body: 'pet_type' is required",
      param: 'pet_type',
    });
    expect(
      describeSchemaErrors([{ keyword: 'anyOf', instancePath: '/input', params: {} }, { keyword: 'type', instancePath: '/input', params: {}, message: 'must be string' }], 'body', UNION_FIELD_HINTS),
    ).toEqual({ message: 'input must be a string or a non-empty array of strings', param: 'input' });
  });
});

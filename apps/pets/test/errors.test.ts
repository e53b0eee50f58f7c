/**
 * Engine errors across the thread boundary: serialized with their code and details, rebuilt as EngineErrors, and
 * mapped to HTTP statuses in one table.
 */
import { describe, expect, it } from 'vitest';

import { paramOf } from '@tessera/server-kit';

import { ApiError, toApiError } from '../src/api/errors.js';
import { EngineError, EngineUnavailableError } from '../src/engine/errors.js';
import { serializeError } from '../src/engine/protocol.js';
import { describeSchemaErrors } from '../src/plugins/errors.js';

/** An error shaped like pet-ops' typed errors (code plus detail fields). */
function typed(code: string, message: string, fields: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { code }, fields);
}

/** What the HTTP side sees after the error crossed the thread boundary (structured clone). */
function remote(err: unknown): EngineError {
  return new EngineError(structuredClone(serializeError(err)));
}

describe('serializeError', () => {
  it('keeps name, message, code and the detail fields pet-ops errors carry', () => {
    const err = Object.assign(typed('TESSERA_PET_UNKNOWN_TYPE', 'unknown PET type "x"', { petType: 'x', known: ['adapter', 'bitfit'] }), { name: 'UnknownPetTypeError' });
    expect(serializeError(err)).toEqual({
      name: 'UnknownPetTypeError',
      message: 'unknown PET type "x"',
      code: 'TESSERA_PET_UNKNOWN_TYPE',
      details: { petType: 'x', knownPetTypes: ['adapter', 'bitfit'] },
    });
    expect(serializeError(typed('TESSERA_PET_UNKNOWN_TASK', 'no task', { taskId: 't1' })).details).toEqual({ task: 't1' });
    expect(serializeError(typed('TESSERA_PET_UNKNOWN_SHARED_MODEL', 'no model', { tag: 'bert' })).details).toEqual({ sharedModel: 'bert' });
    expect(serializeError('plain')).toEqual({ name: 'Error', message: 'plain', code: null, details: {} });
    // Fields of the wrong type are not details.
    expect(serializeError(typed('X', 'm', { tensor: { nested: true }, budgetBytes: Number.NaN })).details).toEqual({});
  });
});

describe('toApiError', () => {
  const known = ['adapter', 'maskbert'];
  const cases: [Error, number, string, Record<string, unknown>][] = [
    [typed('TESSERA_PET_UNKNOWN_TASK', 'no task "t9"', { taskId: 't9' }), 404, 'task_not_found', { task: 't9' }],
    [typed('TESSERA_PET_UNKNOWN_TYPE', 'unknown PET type "ia3"', { petType: 'ia3' }), 400, 'unknown_pet_type', { pet_type: 'ia3', known_pet_types: known, param: 'pet_type' }],
    [typed('TESSERA_PET_UNKNOWN_SHARED_MODEL', 'no model', { tag: 'gpt' }), 400, 'unknown_shared_model', { shared_model: 'gpt' }],
    [typed('TESSERA_PET_FORMAT', '<upload>: not a safetensors file'), 400, 'malformed_params', { param: 'params' }],
    [typed('TESSERA_BAD_HEADER', 'bad header'), 400, 'malformed_params', {}],
    [typed('TESSERA_PET_SHAPE', 'bert.encoder.layer.0.adapter.down.weight: expected [64, 5], got [64, 6]', { tensor: 'bert.encoder.layer.0.adapter.down.weight' }), 422, 'params_shape_mismatch', { tensor: 'bert.encoder.layer.0.adapter.down.weight' }],
    [typed('TESSERA_PET_CONFIG', 'empty labels'), 422, 'invalid_pet_config', {}],
    [typed('TESSERA_PET_TYPE_MISMATCH', 'says adapter, holds bitfit', { petType: 'adapter' }), 422, 'invalid_pet_config', { pet_type: 'adapter' }],
    [typed('TESSERA_PET_TASK_STATE', 'task id taken'), 409, 'task_state', {}],
    [typed('TESSERA_PET_DEVICE_BUDGET', 'loading t: 900 bytes did not fit', { budgetBytes: 1000, requestedBytes: 900 }), 507, 'budget_exceeded', { budget_bytes: 1000, requested_bytes: 900, type: 'capacity_error' }],
  ];
  it.each(cases)('%s → %i %s', (err, status, code, fields) => {
    const api = toApiError(remote(err), known);
    expect(api.statusCode).toBe(status);
    expect(api.toBody().error).toMatchObject({ code, ...fields });
  });

  it('503 when the engine is gone, 500 for anything untyped, and ApiErrors pass through', () => {
    expect(toApiError(new EngineUnavailableError('the engine worker crashed')).statusCode).toBe(503);
    expect(toApiError(remote(new Error('kaboom'))).statusCode).toBe(500);
    expect(toApiError(new TypeError('local bug')).statusCode).toBe(500);
    const api = new ApiError(418, 'teapot');
    expect(toApiError(api)).toBe(api);
  });
});

describe('schema error messages', () => {
  it('names the field, with hints for union-typed fields', () => {
    expect(paramOf('/input/3')).toBe('input[3]');
    expect(describeSchemaErrors([{ keyword: 'required', instancePath: '', params: { requiredProperties: ['pet_type'] } }], 'body')).toEqual({
      message: "body: 'pet_type' is required",
      param: 'pet_type',
    });
    expect(describeSchemaErrors([{ keyword: 'anyOf', instancePath: '/input', params: {} }, { keyword: 'type', instancePath: '/input', params: {}, message: 'must be string' }], 'body')).toEqual({
      message: 'input must be a string or a non-empty array of strings',
      param: 'input',
    });
  });
});

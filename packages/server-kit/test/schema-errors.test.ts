import { describe, expect, it } from 'vitest';

import { describeSchemaErrors, paramOf } from '../src/index.js';

describe('paramOf', () => {
  it('turns a JSON pointer into a dotted, indexed path', () => {
    expect(paramOf('/messages/0/content')).toBe('messages[0].content');
    expect(paramOf('/input/3')).toBe('input[3]');
    expect(paramOf('/a~1b/c~0d')).toBe('a/b.c~d');
    expect(paramOf('')).toBe('');
  });
});

describe('describeSchemaErrors', () => {
  it('names a missing property, at the top level and nested', () => {
    expect(describeSchemaErrors([{ keyword: 'required', instancePath: '', params: { missingProperty: 'model' } }], 'body')).toEqual({
      message: "body: 'model' is required",
      param: 'model',
    });
    expect(describeSchemaErrors([{ keyword: 'required', instancePath: '/messages/1', params: { requiredProperties: ['role', 'content'] } }], 'body')).toEqual({
      message: "body: 'role', 'content' are required in messages[1]",
      param: 'messages[1].role',
    });
  });

  it('uses the first error, with the field as param, or the context for the whole value', () => {
    expect(describeSchemaErrors([{ keyword: 'maximum', instancePath: '/max_tokens', params: {}, message: 'must be <= 4096' }], 'body')).toEqual({
      message: 'max_tokens must be <= 4096',
      param: 'max_tokens',
    });
    expect(describeSchemaErrors([{ keyword: 'type', instancePath: '', params: {}, message: 'must be object' }], 'body')).toEqual({
      message: 'body must be object',
      param: null,
    });
    expect(describeSchemaErrors([], 'querystring')).toEqual({ message: 'querystring is invalid', param: null });
  });

  it('gives a union-typed field one message: its hint, or its branches without the null branch', () => {
    const stopErrors = [
      { keyword: 'type', instancePath: '/stop', params: {}, message: 'must be string' },
      { keyword: 'type', instancePath: '/stop', params: {}, message: 'must be array' },
      { keyword: 'anyOf', instancePath: '/stop', params: {}, message: 'must match a schema in anyOf' },
    ];
    expect(describeSchemaErrors(stopErrors, 'body', { stop: 'must be a string or an array of strings' })).toEqual({
      message: 'stop must be a string or an array of strings',
      param: 'stop',
    });
    expect(describeSchemaErrors(stopErrors, 'body')).toEqual({ message: 'stop must be string or must be array', param: 'stop' });
    // Nullable (X | null): only X's complaint; the hint key skips indices ('/messages/0/content' → 'content').
    const nullable = [
      { keyword: 'minimum', instancePath: '/messages/0/temperature', params: {}, message: 'must be >= 0' },
      { keyword: 'type', instancePath: '/messages/0/temperature', params: {}, message: 'must be null' },
      { keyword: 'anyOf', instancePath: '/messages/0/temperature', params: {} },
    ];
    expect(describeSchemaErrors(nullable, 'body')).toEqual({ message: 'messages[0].temperature must be >= 0', param: 'messages[0].temperature' });
    const inner = [
      { keyword: 'type', instancePath: '/messages/0/content/1/text', params: {}, message: 'must be string' },
      { keyword: 'anyOf', instancePath: '/messages/0/content/1', params: {} },
      { keyword: 'anyOf', instancePath: '/messages/0/content', params: {} },
    ];
    expect(describeSchemaErrors(inner, 'body', { content: 'must be a string or an array of content parts' })).toEqual({
      message: 'messages[0].content must be a string or an array of content parts',
      param: 'messages[0].content',
    });
  });
});

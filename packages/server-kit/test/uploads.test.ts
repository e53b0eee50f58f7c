/** Files a request brings: a path under a root (symlinks followed, a size bound), and a JSON-plus-file form. */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Type } from 'typebox';
import { afterAll, describe, expect, it } from 'vitest';

import { errorBody, errorReply, HttpError, jsonAndFileForm, type MultipartPart, readFileUnderRoot } from '../src/index.js';

const scratch = realpathSync(mkdtempSync(join(tmpdir(), 'server-kit-uploads-')));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The body an error answers with, and its status. */
async function refusal(promise: Promise<unknown>): Promise<{ status: number; error: Record<string, unknown> }> {
  const err = await promise.then(
    () => expect.unreachable('expected a refusal'),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(HttpError);
  const reply = errorReply(err);
  // HttpError's own toBody() is the body the error handler sends.
  expect((err as HttpError).toBody()).toEqual(errorBody(reply));
  return { status: reply.status, error: errorBody(reply).error };
}

describe('readFileUnderRoot', () => {
  const root = join(scratch, 'root');
  mkdirSync(join(root, 'sub'), { recursive: true });
  writeFileSync(join(root, 'sub', 'a.bin'), 'hello');
  writeFileSync(join(scratch, 'secret.bin'), 'secret');
  symlinkSync(join(scratch, 'secret.bin'), join(root, 'escape.bin'));
  symlinkSync(join(root, 'sub', 'a.bin'), join(root, 'inside.bin'));
  const options = { maxBytes: 5, rootName: 'the params root', limitName: '--max-mb' };

  it('reads a file inside the root, also through a symlink that stays inside', async () => {
    expect((await readFileUnderRoot(root, 'sub/a.bin', options)).toString()).toBe('hello');
    expect((await readFileUnderRoot(root, 'inside.bin', options)).toString()).toBe('hello');
  });

  it('refuses absolute paths, ../ and symlinks out of the root, naming the field', async () => {
    for (const rel of [join(root, 'sub', 'a.bin'), '../secret.bin', 'sub/../../secret.bin', 'escape.bin']) {
      const r = await refusal(readFileUnderRoot(root, rel, options));
      expect(r, rel).toMatchObject({ status: 400, error: { code: 'path_outside_root', param: 'path' } });
      expect(r.error['message']).toContain('the params root');
    }
  });

  it('refuses a missing file and a directory; a file over the limit is a 413 naming the limit', async () => {
    expect(await refusal(readFileUnderRoot(root, 'nope.bin', options))).toMatchObject({ status: 400, error: { code: 'file_not_found' } });
    expect(await refusal(readFileUnderRoot(root, 'sub', options))).toMatchObject({ status: 400, error: { code: 'file_not_found' } });
    const big = await refusal(readFileUnderRoot(root, 'sub/a.bin', { ...options, maxBytes: 4 }));
    expect(big).toMatchObject({ status: 413, error: { code: 'file_too_large', param: 'path', limit: 4 } });
    expect(big.error['message']).toMatch(/5 bytes; the limit is 4 \(--max-mb\)/);
  });

  it("uses the app's codes and param", async () => {
    const custom = { maxBytes: 1, param: 'file', codes: { outside: 'escape', missing: 'gone', tooLarge: 'big' } };
    expect(await refusal(readFileUnderRoot(root, '../secret.bin', custom))).toMatchObject({ error: { code: 'escape', param: 'file' } });
    expect(await refusal(readFileUnderRoot(root, 'nope', custom))).toMatchObject({ error: { code: 'gone' } });
    expect(await refusal(readFileUnderRoot(root, 'sub/a.bin', custom))).toMatchObject({ status: 413, error: { code: 'big' } });
  });
});

describe('jsonAndFileForm', () => {
  const readForm = jsonAndFileForm({
    json: { field: 'metadata', schema: Type.Object({ kind: Type.String(), id: Type.Optional(Type.String({ pattern: '^[a-z]+$' })) }) },
    file: { field: 'params', what: 'the parameter file' },
    code: 'invalid_request',
  });
  let drained = 0;
  const file = (fieldname: string, bytes = 'bytes'): MultipartPart => ({
    type: 'file',
    fieldname,
    file: { resume: () => drained++ },
    toBuffer: async () => Buffer.from(bytes),
  });
  const field = (fieldname: string, value: unknown): MultipartPart => ({ type: 'field', fieldname, value });
  async function* parts(...list: MultipartPart[]): AsyncGenerator<MultipartPart> {
    yield* list;
  }

  it('reads the JSON field and the file, in either order', async () => {
    const expected = { json: { kind: 'a' }, file: Buffer.from('bytes') };
    expect(await readForm(parts(field('metadata', '{"kind": "a"}'), file('params')))).toEqual(expected);
    expect(await readForm(parts(file('params'), field('metadata', '{"kind": "a"}')))).toEqual(expected);
  });

  it('refuses anything else with a 400 naming the field', async () => {
    const meta = field('metadata', '{"kind": "a"}');
    const cases: [MultipartPart[], string][] = [
      [[meta, file('other')], 'other'],
      [[meta, file('params'), file('params')], 'params'],
      [[meta, field('extra', 'x'), file('params')], 'extra'],
      [[field('metadata', 5), file('params')], 'metadata'],
      [[file('params')], 'metadata'],
      [[meta], 'params'],
      [[field('metadata', '{kind: a'), file('params')], 'metadata'],
      [[field('metadata', '{}'), file('params')], 'metadata.kind'],
      [[field('metadata', '{"kind": "a", "id": "A/B"}'), file('params')], 'metadata.id'],
    ];
    for (const [list, param] of cases) {
      expect(await refusal(readForm(parts(...list))), param).toMatchObject({ status: 400, error: { code: 'invalid_request', param } });
    }
    // A file in the wrong field is drained, so the request stream can end.
    expect(drained).toBe(1);
  });
});

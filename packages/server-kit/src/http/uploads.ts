/**
 * Files a request brings: one named by a path under a server-side root, or one uploaded with a JSON field in a
 * multipart form. Both are checked before anything reaches the engine, and every refusal is an {@link HttpError}
 * naming the field at fault, so a bad request changes nothing.
 */
import { open, realpath, stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';

import type { Static, TSchema } from 'typebox';
import { Compile } from 'typebox/compile';

import { isInside } from '../cli/repository.js';
import { describeSchemaErrors, type SchemaError } from '../plugins/schema-errors.js';
import { HttpError } from './errors.js';

export interface ReadUnderRootOptions {
  /** The largest file accepted: a bigger one is a 413 (details `{ limit }`) before a byte of it is read. */
  maxBytes: number;
  /** The request field that named the path (default 'path'). */
  param?: string;
  /** How messages name the root ('the params root'; default 'the root') and the limit's flag ('--max-params-mb'). */
  rootName?: string;
  limitName?: string;
  /** The body's codes (defaults path_outside_root, file_not_found, file_too_large). */
  codes?: { outside?: string; missing?: string; tooLarge?: string };
}

/**
 * Reads the file `rel` names under `root` (an already resolved real path). `rel` must be relative and stay inside
 * the root both as written and after symlinks are followed; only then is the file opened, so nothing outside the
 * root is read. Missing or not a regular file: 400 `missing`; outside: 400 `outside`; over the limit: 413.
 */
export async function readFileUnderRoot(root: string, rel: string, options: ReadUnderRootOptions): Promise<Buffer> {
  const { maxBytes, param = 'path', rootName = 'the root', codes = {} } = options;
  const refuse = (code: string, why: string) =>
    new HttpError(400, code, `${param} ${JSON.stringify(rel)} ${why}`, { param });
  const outside = (why: string) => refuse(codes.outside ?? 'path_outside_root', why);
  const missing = (why: string) => refuse(codes.missing ?? 'file_not_found', why);
  if (isAbsolute(rel)) throw outside(`must be relative to ${rootName}`);
  const candidate = resolve(root, rel);
  if (!isInside(root, candidate)) throw outside(`leaves ${rootName}`);
  let real: string;
  try {
    real = await realpath(candidate);
  } catch {
    throw missing(`does not exist under ${rootName}`);
  }
  if (!isInside(root, real)) throw outside(`leads outside ${rootName} (through a symbolic link)`);
  const info = await stat(real);
  if (!info.isFile()) throw missing('is not a file');
  if (info.size > maxBytes) {
    const limit = options.limitName === undefined ? '' : ` (${options.limitName})`;
    const message = `${rel} is ${info.size} bytes; the limit is ${maxBytes}${limit}`;
    throw new HttpError(413, codes.tooLarge ?? 'file_too_large', message, { param, details: { limit: maxBytes } });
  }
  // Read through the descriptor of the resolved path, with the size checked above as a bound (the file may
  // change meanwhile: a shorter read is what it holds now, a longer file is cut at the checked size).
  const handle = await open(real, 'r');
  try {
    const bytes = Buffer.allocUnsafeSlow(info.size);
    let read = 0;
    while (read < info.size) {
      const { bytesRead } = await handle.read(bytes, read, info.size - read, read);
      if (bytesRead === 0) break;
      read += bytesRead;
    }
    return bytes.subarray(0, read);
  } finally {
    await handle.close();
  }
}

/** One part of a multipart body, as @fastify/multipart's `request.parts()` yields it (typed here: no dependency). */
export type MultipartPart =
  | { type: 'file'; fieldname: string; file: { resume(): unknown }; toBuffer(): Promise<Buffer> }
  | { type: 'field'; fieldname: string; value: unknown };

export interface JsonAndFileForm<T extends TSchema> {
  /** The JSON field and its schema; a value that breaks it is a 400 naming the field inside it ('metadata.id'). */
  json: { field: string; schema: T; unionHints?: Readonly<Record<string, string>>; example?: string };
  /** The file field, and what the file is ('the parameter file') for the messages. */
  file: { field: string; what: string };
  /** The body's code of every refusal (default null). */
  code?: string | null;
}

/**
 * A reader of a multipart form of exactly one JSON field and one file, in either order; anything else is a 400.
 * The schema is compiled once, here. The size limits are the multipart plugin's: a file over its `fileSize`
 * makes `toBuffer()` throw @fastify/multipart's FST_REQ_FILE_TOO_LARGE (413), which the app words.
 *
 *   const readForm = jsonAndFileForm({
 *     json: { field: 'metadata', schema: Metadata },
 *     file: { field: 'params', what: 'the parameter file' },
 *   });
 *   const { json, file } = await readForm(request.parts());
 */
export function jsonAndFileForm<T extends TSchema>(
  form: JsonAndFileForm<T>,
): (parts: AsyncIterable<MultipartPart>) => Promise<{ json: Static<T>; file: Buffer }> {
  const check = Compile(form.json.schema);
  const { field, example } = form.json;
  const fileField = form.file.field;
  const refuse = (message: string, param: string) => new HttpError(400, form.code ?? null, message, { param });
  return async (parts) => {
    let text: string | null = null;
    let file: Buffer | null = null;
    for await (const part of parts) {
      if (part.type === 'file') {
        if (part.fieldname !== fileField) {
          // Drain it, so the request stream can end; then refuse.
          part.file.resume();
          const name = JSON.stringify(part.fieldname);
          throw refuse(`unexpected file field ${name}: ${form.file.what} goes in the field "${fileField}"`, part.fieldname);
        }
        if (file !== null) throw refuse(`two files in the field "${fileField}": send one`, fileField);
        file = await part.toBuffer();
      } else {
        if (part.fieldname !== field) {
          const name = JSON.stringify(part.fieldname);
          throw refuse(`unexpected form field ${name}: send "${field}" (JSON) and "${fileField}" (the file)`, part.fieldname);
        }
        if (typeof part.value !== 'string') throw refuse(`the "${field}" field must be JSON text`, field);
        text = part.value;
      }
    }
    if (text === null) throw refuse(`the form needs a "${field}" field: ${example ?? 'JSON text'}`, field);
    if (file === null) throw refuse(`the form needs a "${fileField}" file: ${form.file.what}`, fileField);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw refuse(`the "${field}" field is not valid JSON: ${(err as Error).message}`, field);
    }
    if (!check.Check(json)) {
      const errors = [...check.Errors(json)] as unknown as SchemaError[];
      const { message, param } = describeSchemaErrors(errors, field, form.json.unionHints);
      throw refuse(message, param === null ? field : `${field}.${param}`);
    }
    return { json: json as Static<T>, file };
  };
}

/**
 * Runtime adapter management with vLLM's shapes:
 *   POST /v1/load_lora_adapter   { "lora_name": "sql", "lora_path": "/adapters/sql" }
 *   POST /v1/unload_lora_adapter { "lora_name": "sql" }
 * Both answer 200 with vLLM's plain-text "Success: …" line, or an OpenAI-style error body.
 *
 * A load validates before registering: the name (no path separators, no `..`, not the base model's name, not
 * taken), the directory (exists; inside `adapterRoot` when one is configured), and the adapter itself, which the
 * engine reads once and checks against the model (modules, shapes, dtypes). A bad adapter is a 400 and changes
 * nothing: the server keeps serving and every registered adapter stays. The adapter becomes resident on first use.
 *
 * An unload removes the name at once (new requests get 404), lets requests already using it finish, then frees it.
 * These routes change what the server serves: they are on by default on the loopback demo, and can be switched
 * off with `--no-adapter-admin` (vLLM guards them behind VLLM_ALLOW_RUNTIME_LORA_UPDATING).
 */
import { realpath, stat } from 'node:fs/promises';
import { resolve } from 'node:path';

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';

import { badRequest, ErrorBody, errorReply, HttpError, httpStatus, isInside } from '@tessera/server-kit';

import { punicaErrors } from '../openai/errors.js';
import { LoadLoraAdapterRequest, UnloadLoraAdapterRequest } from '../openai/schemas.js';

/** vLLM answers both routes with a plain-text line. */
const SuccessText = Type.String();

export interface AdapterRoutesOptions {
  /** When set, lora_path must resolve (symlinks followed) inside this directory. */
  adapterRoot?: string | undefined;
}

const MAX_NAME = 128;
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@+-]*$/;

/** Why `name` cannot be an adapter's name, or null when it can. */
export function adapterNameProblem(name: string): string | null {
  if (name.length === 0) return 'must not be empty';
  if (name.length > MAX_NAME) return `is ${name.length} characters long; the limit is ${MAX_NAME}`;
  if (name.includes('/') || name.includes('\\')) return 'must not contain a path separator (/ or \\)';
  if (name.includes('..')) return 'must not contain ".."';
  if (!NAME_PATTERN.test(name)) return 'may use only letters, digits and . _ - : @ +, and must start with a letter or digit';
  return null;
}


const adapters: FastifyPluginAsyncTypebox<AdapterRoutesOptions> = async (app, options) => {
  const root = options.adapterRoot === undefined ? null : await realpath(resolve(options.adapterRoot));

  app.post('/v1/load_lora_adapter', { schema: { body: LoadLoraAdapterRequest, response: { 200: SuccessText, '4xx': ErrorBody, '5xx': ErrorBody } } }, async (request, reply) => {
    const { lora_name: name, lora_path: rawPath } = request.body;
    const problem = adapterNameProblem(name);
    if (problem) throw badRequest(`lora_name ${JSON.stringify(name)} ${problem}`, 'lora_name');
    if (request.body.load_inplace === true) throw badRequest('load_inplace is not supported: unload the adapter, then load it again', 'load_inplace');
    if (name === app.models.base.name) throw badRequest(`lora_name ${JSON.stringify(name)} is the base model's name`, 'lora_name', 'adapter_exists');
    if (app.models.isTaken(name)) throw badRequest(`The lora adapter '${name}' has already been loaded.`, 'lora_name', 'adapter_exists');

    let path: string;
    try {
      path = await realpath(resolve(rawPath));
    } catch {
      throw badRequest(`lora_path ${JSON.stringify(rawPath)} does not exist`, 'lora_path');
    }
    if (root !== null && !isInside(root, path)) throw badRequest(`lora_path ${JSON.stringify(rawPath)} is outside the adapter root ${root}`, 'lora_path');
    if (!(await stat(path)).isDirectory()) throw badRequest(`lora_path ${JSON.stringify(rawPath)} is not a directory (a PEFT adapter directory holds adapter_config.json and adapter_model.safetensors)`, 'lora_path');

    if (!app.models.reserve(name)) throw badRequest(`The lora adapter '${name}' has already been loaded.`, 'lora_name', 'adapter_exists');
    try {
      const status = await app.engine.call('load-adapter', { name, path });
      app.models.settle(name, { name, path: status.path, rank: status.rank, created: Math.floor(Date.now() / 1000) });
    } catch (err) {
      app.models.settle(name, null);
      if (httpStatus(err) !== 400) throw err;
      // A malformed adapter (its files, or a mismatch with the model): the same 400, saying which adapter.
      const r = errorReply(err, punicaErrors);
      throw new HttpError(400, r.code ?? 'invalid_adapter', `lora adapter ${JSON.stringify(name)} at ${path} cannot be loaded: ${r.message}`, { param: r.param ?? 'lora_path', cause: err });
    }
    request.log.info({ adapter: name, path }, 'adapter registered');
    return reply.type('text/plain; charset=utf-8').send(`Success: LoRA adapter '${name}' added successfully.`);
  });

  app.post('/v1/unload_lora_adapter', { schema: { body: UnloadLoraAdapterRequest, response: { 200: SuccessText, '4xx': ErrorBody, '5xx': ErrorBody } } }, async (request, reply) => {
    const { lora_name: name } = request.body;
    const entry = app.models.remove(name);
    if (!entry) throw new HttpError(404, 'model_not_found', `The lora adapter '${name}' cannot be found.`, { type: 'invalid_request_error', param: 'lora_name' });
    try {
      await app.engine.call('unload-adapter', name);
    } catch (err) {
      // Still registered in the engine (or the engine is down): keep serving it under its name.
      if (app.engine.healthy) app.models.add(entry);
      throw err;
    }
    request.log.info({ adapter: name }, 'adapter unregistered');
    return reply.type('text/plain; charset=utf-8').send(`Success: LoRA adapter '${name}' removed successfully.`);
  });
};

export default adapters;

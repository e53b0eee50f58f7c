/**
 * The Task Manager's API (pets.md §3.2–3.4: the Task Register and the Task Loader, plus the unload and unregister
 * the paper leaves out):
 *
 *   POST   /v1/tasks              register a task: JSON { pet_type, path, … } naming a parameter file under
 *                                 --params-root, or multipart/form-data with a `metadata` field (the same JSON
 *                                 without path) and a `params` file (the safetensors bytes)             → 201 task
 *   GET    /v1/tasks              every task, with the device memory figures
 *   GET    /v1/tasks/:id          one task, with the memory figures
 *   POST   /v1/tasks/:id/load     upload its parameters to the device (counted against --budget-mb)
 *   POST   /v1/tasks/:id/unload   free its device memory; it stays registered (and loads again on its next classify)
 *   DELETE /v1/tasks/:id          unload and unregister it
 *
 * A registration is checked in layers, and each failure changes nothing (every task registered before stays):
 * the metadata's schema, the PET type (400 listing the known ones), the shared model tag, the path (relative,
 * inside the root after symlinks: 400 otherwise, and nothing outside the root is read), the size (413), then the
 * worker reads the file and checks every tensor against the shared model (400 malformed, 422 naming the tensor).
 */
import { open, realpath, stat } from 'node:fs/promises';
import { isAbsolute, relative, resolve, sep } from 'node:path';

import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { Compile } from 'typebox/compile';

import { ApiError, badRequest, unknownPetType } from '../api/errors.js';
import { describeSchemaErrors } from '@tessera/server-kit';

import { ErrorBody, type Memory, RegisterTaskJson, type Task, TaskList, TaskMetadata, TaskParams, TaskWithMemory, Task as TaskSchema, UNION_FIELD_HINTS } from '../api/schemas.js';
import type { MemorySummary, TaskSummary } from '../engine/protocol.js';

export interface TaskRoutesOptions {
  /** Where `path` registrations may read parameter files (null: path registration is off). */
  paramsRoot: string | null;
  /** The largest parameter file accepted (uploads and paths). */
  maxParamsBytes: number;
}

export function taskBody(t: TaskSummary): Task {
  return {
    id: t.id,
    object: 'task',
    name: t.name,
    pet_type: t.petType,
    shared_model: t.sharedModel,
    labels: t.labels,
    state: t.state,
    stored_bytes: t.storedBytes,
    device_bytes: t.deviceBytes,
  };
}

export function memoryBody(m: MemorySummary): Memory {
  return { budget_bytes: m.budgetBytes, shared_bytes: m.sharedBytes, pet_bytes: m.petBytes, loaded_tasks: m.loadedTasks, registered_tasks: m.registeredTasks };
}

function isInside(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

const checkMetadata = Compile(TaskMetadata);

/** The multipart form: `metadata` (JSON text) and `params` (the file), in either order. Anything else is a 400. */
async function readMultipart(request: FastifyRequest): Promise<{ metadata: TaskMetadata; params: Buffer }> {
  let metadataText: string | null = null;
  let params: Buffer | null = null;
  for await (const part of request.parts()) {
    if (part.type === 'file') {
      if (part.fieldname !== 'params') {
        // Drain it, so the request stream can end; then refuse.
        part.file.resume();
        throw badRequest(`unexpected file field ${JSON.stringify(part.fieldname)}: the parameter file goes in the field "params"`, part.fieldname, 'invalid_request');
      }
      if (params !== null) throw badRequest('two files in the field "params": send one parameter file per task', 'params', 'invalid_request');
      // toBuffer() enforces the fileSize limit (FST_REQ_FILE_TOO_LARGE → 413 in the errors plugin).
      params = await part.toBuffer();
    } else {
      if (part.fieldname !== 'metadata') throw badRequest(`unexpected form field ${JSON.stringify(part.fieldname)}: send "metadata" (JSON) and "params" (the file)`, part.fieldname, 'invalid_request');
      if (typeof part.value !== 'string') throw badRequest('the "metadata" field must be JSON text', 'metadata', 'invalid_request');
      metadataText = part.value;
    }
  }
  if (metadataText === null) throw badRequest('multipart registration needs a "metadata" field: {"pet_type": …}', 'metadata', 'invalid_request');
  if (params === null) throw badRequest('multipart registration needs a "params" file: the task\'s safetensors parameter file', 'params', 'invalid_request');
  let metadata: unknown;
  try {
    metadata = JSON.parse(metadataText);
  } catch (err) {
    throw badRequest(`the "metadata" field is not valid JSON: ${(err as Error).message}`, 'metadata', 'invalid_request');
  }
  if (!checkMetadata.Check(metadata)) {
    const { message, param } = describeSchemaErrors([...checkMetadata.Errors(metadata)] as never, 'metadata', UNION_FIELD_HINTS);
    throw badRequest(message, param === null ? 'metadata' : `metadata.${param}`, 'invalid_request');
  }
  return { metadata, params };
}

/**
 * Reads the parameter file `rel` names under `root`. `rel` must be relative and stay inside the root both as
 * written and after symlinks are followed; only then is the file opened. Nothing outside the root is read.
 */
async function readUnderRoot(root: string | null, rel: string, maxBytes: number): Promise<Buffer> {
  if (root === null) throw badRequest('registration by path is off: start the server with --params-root <dir>, or upload the file (multipart)', 'path', 'params_root_not_configured');
  if (isAbsolute(rel)) throw badRequest(`path ${JSON.stringify(rel)} must be relative to the params root`, 'path', 'path_outside_root');
  const candidate = resolve(root, rel);
  if (!isInside(root, candidate)) throw badRequest(`path ${JSON.stringify(rel)} leaves the params root`, 'path', 'path_outside_root');
  let real: string;
  try {
    real = await realpath(candidate);
  } catch {
    throw badRequest(`path ${JSON.stringify(rel)} does not exist under the params root`, 'path', 'params_not_found');
  }
  if (!isInside(root, real)) throw badRequest(`path ${JSON.stringify(rel)} leads outside the params root (through a symbolic link)`, 'path', 'path_outside_root');
  const info = await stat(real);
  if (!info.isFile()) throw badRequest(`path ${JSON.stringify(rel)} is not a file (a task's parameters are one safetensors file)`, 'path', 'params_not_found');
  if (info.size > maxBytes) {
    throw new ApiError(413, `${rel} is ${info.size} bytes; the limit is ${maxBytes} (--max-params-mb)`, { param: 'path', code: 'params_too_large', details: { limit: maxBytes } });
  }
  // Read through the descriptor of the resolved path, with the size checked above as a bound.
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

const tasks: FastifyPluginAsyncTypebox<TaskRoutesOptions> = async (app, options) => {
  const root = options.paramsRoot;
  const errors = { '4xx': ErrorBody, '5xx': ErrorBody };

  app.post(
    '/v1/tasks',
    {
      schema: {
        // JSON bodies are validated here; a multipart form has no body schema (its metadata is checked in readMultipart).
        body: { content: { 'application/json': { schema: RegisterTaskJson } } } as unknown as typeof RegisterTaskJson,
        response: { 201: TaskSchema, ...errors },
      },
    },
    async (request, reply) => {
      let metadata: TaskMetadata;
      let params: Buffer;
      let source: string;
      if (request.isMultipart()) {
        ({ metadata, params } = await readMultipart(request));
        checkMetadataAgainstServer(app, metadata);
        source = 'upload';
      } else {
        const body = request.body;
        metadata = body;
        // Checked before any file is touched: a bad PET type or tag costs no read.
        checkMetadataAgainstServer(app, metadata);
        params = await readUnderRoot(root, body.path, options.maxParamsBytes);
        source = body.path;
      }
      if (params.byteLength === 0) throw badRequest('the parameter file is empty', 'params', 'malformed_params');
      const task = await app.engine.registerTask({
          petType: metadata.pet_type,
          sharedModel: metadata.shared_model ?? app.modelInfo.tag,
          params,
          source,
          ...(metadata.id !== undefined ? { id: metadata.id } : {}),
          ...(metadata.name !== undefined ? { name: metadata.name } : {}),
          load: metadata.load ?? false,
        });
      request.log.info({ task: task.id, petType: task.petType, source, state: task.state }, 'task registered');
      return reply.code(201).send(taskBody(task));
    },
  );

  app.get('/v1/tasks', { schema: { response: { 200: TaskList, ...errors } } }, async () => {
    const { tasks: list, memory } = await app.engine.tasks();
    return { object: 'list' as const, data: list.map(taskBody), memory: memoryBody(memory) };
  });

  app.get('/v1/tasks/:id', { schema: { params: TaskParams, response: { 200: TaskWithMemory, ...errors } } }, async (request) => {
    const { task, memory } = await app.engine.task(request.params.id);
    return { ...taskBody(task), memory: memoryBody(memory) };
  });

  app.post('/v1/tasks/:id/load', { schema: { params: TaskParams, response: { 200: TaskSchema, ...errors } } }, async (request) => {
    const task = await app.engine.loadTask(request.params.id);
    request.log.info({ task: task.id, deviceBytes: task.deviceBytes }, 'task loaded');
    return taskBody(task);
  });

  app.post('/v1/tasks/:id/unload', { schema: { params: TaskParams, response: { 200: TaskSchema, ...errors } } }, async (request) => {
    const task = await app.engine.unloadTask(request.params.id);
    request.log.info({ task: task.id }, 'task unloaded');
    return taskBody(task);
  });

  app.delete(
    '/v1/tasks/:id',
    { schema: { params: TaskParams, response: { 200: Type.Object({ id: Type.String(), object: Type.Literal('task'), deleted: Type.Boolean() }), ...errors } } },
    async (request) => {
      const task = await app.engine.deleteTask(request.params.id);
      request.log.info({ task: task.id }, 'task unregistered');
      return { id: task.id, object: 'task' as const, deleted: true };
    },
  );
};

/** What the HTTP side can check without the engine: the PET type and the shared model tag. */
function checkMetadataAgainstServer(app: FastifyInstance, metadata: TaskMetadata): void {
  if (!app.modelInfo.petTypes.includes(metadata.pet_type)) throw unknownPetType(metadata.pet_type, app.modelInfo.petTypes);
  if (metadata.shared_model !== undefined && metadata.shared_model !== app.modelInfo.tag) {
    throw badRequest(`unknown shared model ${JSON.stringify(metadata.shared_model)}; this server serves ${JSON.stringify(app.modelInfo.tag)}`, 'shared_model', 'unknown_shared_model', {
      shared_model: metadata.shared_model,
    });
  }
}

export default tasks;

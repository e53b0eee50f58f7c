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
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';

import { jsonAndFileForm, readFileUnderRoot } from '@tessera/server-kit';

import { badRequest, unknownPetType } from '../api/errors.js';
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

const readForm = jsonAndFileForm({
  json: { field: 'metadata', schema: TaskMetadata, unionHints: UNION_FIELD_HINTS, example: '{"pet_type": …}' },
  file: { field: 'params', what: "the task's safetensors parameter file" },
  code: 'invalid_request',
});

const tasks: FastifyPluginAsyncTypebox<TaskRoutesOptions> = async (app, options) => {
  const root = options.paramsRoot;
  const errors = { '4xx': ErrorBody, '5xx': ErrorBody };

  app.post(
    '/v1/tasks',
    {
      schema: {
        // JSON bodies are validated here; a multipart form has no body schema (its metadata is checked by readForm).
        body: { content: { 'application/json': { schema: RegisterTaskJson } } } as unknown as typeof RegisterTaskJson,
        response: { 201: TaskSchema, ...errors },
      },
    },
    async (request, reply) => {
      let metadata: TaskMetadata;
      let params: Buffer;
      let source: string;
      if (request.isMultipart()) {
        ({ json: metadata, file: params } = await readForm(request.parts()));
        checkMetadataAgainstServer(app, metadata);
        source = 'upload';
      } else {
        const body = request.body;
        metadata = body;
        // Checked before any file is touched: a bad PET type or tag costs no read.
        checkMetadataAgainstServer(app, metadata);
        if (root === null) {
          const message = 'registration by path is off: start the server with --params-root <dir>, or upload the file (multipart)';
          throw badRequest(message, 'path', 'params_root_not_configured');
        }
        params = await readFileUnderRoot(root, body.path, {
          maxBytes: options.maxParamsBytes,
          rootName: 'the params root',
          limitName: '--max-params-mb',
          codes: { missing: 'params_not_found', tooLarge: 'params_too_large' },
        });
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

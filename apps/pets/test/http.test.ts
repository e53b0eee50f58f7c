/**
 * The server end to end (fastify inject, and one real listen): registration by upload and by path, load, classify
 * (results checked against PetEngine in this thread), list, unload, delete; every 4xx with its body, and the task
 * set unchanged after each rejection; concurrent requests of different tasks batched together.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { encodeClassifyInputs } from '../src/api/inputs.js';
import { type Fixture, makeFixture, metricValue, multipartBody, serve, TAG, TASKS } from './support/fixture.js';
import { makeReference, normwiseError, type Reference } from './support/reference.js';

let fixture: Fixture;
let app: FastifyInstance;
let reference: Reference;

const LIMITS = { maxBatchInputs: 8, maxInputTokens: 64 };

beforeAll(async () => {
  fixture = makeFixture();
  // A wide window, so the concurrent requests below surely share one.
  app = await serve(fixture, { windowMs: 150, ...LIMITS });
  reference = makeReference(fixture);
});

afterAll(async () => {
  await app?.close();
  reference?.dispose();
  fixture?.cleanup();
});

interface TaskBody {
  id: string;
  object: string;
  name: string | null;
  pet_type: string;
  shared_model: string;
  labels: string[];
  state: string;
  stored_bytes: number;
  device_bytes: number | null;
}
interface ClassifyBody {
  task: string;
  object: string;
  data: { index: number; label: string; label_index: number; logits: number[]; probabilities: number[] }[];
  usage: { prompt_tokens: number };
}
interface ErrorBody {
  error: { message: string; type: string; code: string | null; param: string | null } & Record<string, unknown>;
}

async function registerPath(body: Record<string, unknown>) {
  return app.inject({ method: 'POST', url: '/v1/tasks', payload: body });
}

async function registerUpload(metadata: unknown, params: Uint8Array | null) {
  const { body, headers } = multipartBody(metadata, params);
  return app.inject({ method: 'POST', url: '/v1/tasks', payload: body, headers });
}

async function classify(id: string, body: unknown) {
  return app.inject({ method: 'POST', url: `/v1/tasks/${id}/classify`, payload: body as Record<string, unknown> });
}

/** The tokens the server computes for a request (the same preprocessing). */
function tokens(body: { input: string | string[]; input_pair?: string | string[] }) {
  return encodeClassifyInputs(body, app.tokenizer, app.inputLimits);
}

async function taskList(): Promise<TaskBody[]> {
  const res = await app.inject({ method: 'GET', url: '/v1/tasks' });
  expect(res.statusCode).toBe(200);
  return (res.json() as { data: TaskBody[] }).data;
}

const texts = ['a wonderful, moving film', 'the plot makes no sense at all and the acting is worse', 'ok', 'I would watch it again with my family'];

describe('the task manager API', () => {
  it('starts with no tasks and reports health', async () => {
    const health = await app.inject({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toMatchObject({ status: 'ok', ready: true, shared_model: TAG, tasks_registered: 0, tasks_loaded: 0 });
    const list = await app.inject({ method: 'GET', url: '/v1/tasks' });
    expect(list.json()).toMatchObject({ object: 'list', data: [] });
    expect((list.json() as { memory: { shared_bytes: number } }).memory.shared_bytes).toBeGreaterThan(0);
  });

  it('registers a task from an uploaded parameter file (multipart): registered, not loaded', async () => {
    const res = await registerUpload({ pet_type: 'adapter', id: 'sentiment', name: 'Movie sentiment' }, fixture.bytes.get('sentiment')!);
    expect(res.statusCode, res.body).toBe(201);
    const task = res.json() as TaskBody;
    expect(task).toMatchObject({ id: 'sentiment', object: 'task', name: 'Movie sentiment', pet_type: 'adapter', shared_model: TAG, labels: ['negative', 'neutral', 'positive'], state: 'registered', device_bytes: null });
    expect(task.stored_bytes).toBeGreaterThan(0);
  });

  it('registers tasks from paths under --params-root, loading one at once', async () => {
    const topic = await registerPath({ pet_type: 'maskbert', id: 'topic', path: 'topic.safetensors', load: true });
    expect(topic.statusCode, topic.body).toBe(201);
    expect(topic.json()).toMatchObject({ id: 'topic', state: 'loaded', labels: TASKS[1]!.labels });
    expect((topic.json() as TaskBody).device_bytes).toBeGreaterThan(0);
    for (const t of TASKS.slice(2)) {
      const res = await registerPath({ pet_type: t.type, id: t.id, path: `./${t.id}.safetensors`, shared_model: TAG });
      expect(res.statusCode, res.body).toBe(201);
    }
    // Without an id the server assigns one.
    const anonymous = await registerPath({ pet_type: 'bitfit', path: 'toxicity.safetensors' });
    expect(anonymous.statusCode).toBe(201);
    const id = (anonymous.json() as TaskBody).id;
    expect(id).toMatch(/^task-\d+$/);
    expect((await app.inject({ method: 'DELETE', url: `/v1/tasks/${id}` })).json()).toEqual({ id, object: 'task', deleted: true });
    expect((await taskList()).map((t) => t.id)).toEqual(TASKS.map((t) => t.id));
  });

  it('loads a task; GET /v1/tasks/:id reports it with the memory figures', async () => {
    const load = await app.inject({ method: 'POST', url: '/v1/tasks/sentiment/load' });
    expect(load.statusCode).toBe(200);
    expect(load.json()).toMatchObject({ id: 'sentiment', state: 'loaded' });
    const res = await app.inject({ method: 'GET', url: '/v1/tasks/sentiment' });
    const body = res.json() as TaskBody & { memory: Record<string, number> };
    expect(body.device_bytes).toBeGreaterThan(0);
    expect(body.memory.loaded_tasks).toBe(2);
    expect(body.memory.registered_tasks).toBe(TASKS.length);
    const loadedBytes = (await taskList()).reduce((n, t) => n + (t.device_bytes ?? 0), 0);
    expect(body.memory.pet_bytes).toBe(loadedBytes);
    expect(body.memory.budget_bytes).toBe(1024 * 1024 * 1024);
    expect((await app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ tasks_registered: TASKS.length, tasks_loaded: 2 });
  });
});

describe('classify', () => {
  it('one text: the logits PetEngine.classify gives for the same tokens, exactly', async () => {
    const body = { input: texts[0]! };
    const res = await classify('sentiment', body);
    expect(res.statusCode, res.body).toBe(200);
    const out = res.json() as ClassifyBody;
    const inputs = tokens(body);
    const [want] = reference.classify('sentiment', inputs);
    expect(out).toMatchObject({ task: 'sentiment', object: 'list', usage: { prompt_tokens: inputs[0]!.ids.length } });
    expect(out.data).toHaveLength(1);
    expect(out.data[0]!.logits).toEqual(Array.from(want!.logits));
    expect(out.data[0]).toMatchObject({ index: 0, label: want!.label, label_index: want!.labelIndex });
    expect(out.data[0]!.probabilities.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 6);
    expect(out.data[0]!.probabilities.indexOf(Math.max(...out.data[0]!.probabilities))).toBe(want!.labelIndex);
  });

  it('many texts: exactly the window plan replayed through PetEngine.run, and PetEngine.classify to 1e-5', async () => {
    const body = { input: texts };
    const res = await classify('topic', body);
    expect(res.statusCode, res.body).toBe(200);
    const out = res.json() as ClassifyBody;
    const inputs = tokens(body);
    const replayed = reference.replay('topic', inputs);
    const direct = reference.classify('topic', inputs);
    expect(out.data.map((d) => d.index)).toEqual([0, 1, 2, 3]);
    out.data.forEach((d, i) => {
      expect(d.logits).toEqual(Array.from(replayed.results[i]!.logits));
      expect(d.label).toBe(replayed.results[i]!.label);
      expect(normwiseError(d.logits, direct[i]!.logits)).toBeLessThan(1e-5);
      expect(TASKS[1]!.labels).toContain(d.label);
    });
    expect(out.usage.prompt_tokens).toBe(inputs.reduce((n, x) => n + x.ids.length, 0));
  });

  it('sentence pairs: [CLS] a [SEP] b [SEP] with token types, as PetEngine sees them', async () => {
    const body = { input: ['a man is playing a guitar'], input_pair: ['someone plays music'] };
    const res = await classify('sentiment', body);
    expect(res.statusCode, res.body).toBe(200);
    const inputs = tokens(body);
    expect(inputs[0]!.tokenTypes).toContain(1);
    const [want] = reference.classify('sentiment', inputs);
    expect((res.json() as ClassifyBody).data[0]!.logits).toEqual(Array.from(want!.logits));
  });

  it('loads a registered task on its first classify (the Task Loader before the first invocation)', async () => {
    expect((await app.inject({ method: 'GET', url: '/v1/tasks/spam' })).json()).toMatchObject({ state: 'registered' });
    const body = { input: 'win a free prize now' };
    const res = await classify('spam', body);
    expect(res.statusCode, res.body).toBe(200);
    const [want] = reference.classify('spam', tokens(body));
    expect((res.json() as ClassifyBody).data[0]!.logits).toEqual(Array.from(want!.logits));
    expect((await app.inject({ method: 'GET', url: '/v1/tasks/spam' })).json()).toMatchObject({ state: 'loaded' });
  });

  it('batches concurrent requests of different tasks together; each gets its own result', async () => {
    await app.inject({ method: 'GET', url: '/metrics' }); // drain earlier batches from the counters
    const requests = TASKS.map((t, i) => ({ id: t.id, body: { input: i % 2 === 0 ? texts[i % texts.length]! : [texts[i % texts.length]!, texts[(i + 1) % texts.length]!] } }));
    const responses = await Promise.all(requests.map((r) => classify(r.id, r.body)));
    responses.forEach((res, i) => {
      expect(res.statusCode, res.body).toBe(200);
      const out = res.json() as ClassifyBody;
      const { id, body } = requests[i]!;
      expect(out.task).toBe(id);
      const want = reference.classify(id, tokens(body));
      expect(out.data).toHaveLength(want.length);
      out.data.forEach((d, j) => {
        // Other rows in the batch change the GEMMs' blocking, so the same row may round differently: 1e-5 normwise.
        expect(normwiseError(d.logits, want[j]!.logits), `${id}[${j}]`).toBeLessThan(1e-5);
        expect(d.label).toBe(want[j]!.label);
        expect(TASKS[i]!.labels).toContain(d.label);
      });
    });
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const batches = metricValue(metrics, 'tessera_pets_macro_batch_tasks_count')!;
    const singleTask = metricValue(metrics, 'tessera_pets_macro_batch_tasks_bucket{le="1"}')!;
    expect(batches).toBeGreaterThan(0);
    // At least one macro-batch mixed tasks (of different PET types).
    expect(batches - singleTask).toBeGreaterThan(0);
    expect(metricValue(metrics, 'tessera_pets_queries_classified_total')).toBeGreaterThanOrEqual(9);
    const plans = ['cb', 'alpha-only', 'beta-only', 'fixed'].map((s) => metricValue(metrics, `tessera_pets_plans_total{strategy="${s}"}`) ?? 0);
    expect(plans.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(metricValue(metrics, 'tessera_pets_tasks{state="loaded"}')).toBe(TASKS.length);
    expect(metricValue(metrics, 'tessera_pets_device_bytes{kind="shared"}')).toBeGreaterThan(0);
    expect(metricValue(metrics, 'tessera_pets_device_bytes{kind="pet"}')).toBeGreaterThan(0);
    const share = metricValue(metrics, 'tessera_pets_pet_time_share')!;
    expect(share).toBeGreaterThan(0);
    expect(share).toBeLessThan(1);
    expect(metricValue(metrics, 'tessera_http_requests_total{method="POST",route="/v1/tasks/:id/classify",status_code="200"}')).toBeGreaterThanOrEqual(TASKS.length);
  });

  it('an unload while a classify of the task waits: the classify is answered first, then the task unloads', async () => {
    const order: string[] = [];
    const pending = classify('intent', { input: texts[1]! }).then((res) => (order.push('classify'), res));
    // The classify is posted to the worker (it waits there in the 150 ms window) before the unload is sent; the
    // worker takes messages in order, so the unload finds the task held by the classify and waits for it.
    await expect.poll(() => app.engine.inFlight, { timeout: 5_000, interval: 1 }).toBe(1);
    const unload = app.inject({ method: 'POST', url: '/v1/tasks/intent/unload' }).then((res) => (order.push('unload'), res));
    const [c, u] = await Promise.all([pending, unload]);
    expect(order).toEqual(['classify', 'unload']);
    expect(c.statusCode, c.body).toBe(200);
    expect(u.statusCode, u.body).toBe(200);
    expect(u.json()).toMatchObject({ id: 'intent', state: 'registered', device_bytes: null });
  });
});

describe('rejections: a clear 4xx, and every task registered before is still there', () => {
  let before: TaskBody[];

  beforeAll(async () => {
    before = await taskList();
  });

  const cases: { what: string; send: () => Promise<{ statusCode: number; json(): unknown }>; status: number; error: Record<string, unknown> }[] = [
    { what: 'classify an unknown task', send: () => classify('nope', { input: 'x' }), status: 404, error: { code: 'task_not_found', task: 'nope', type: 'not_found_error' } },
    { what: 'load an unknown task', send: () => app.inject({ method: 'POST', url: '/v1/tasks/nope/load' }), status: 404, error: { code: 'task_not_found', task: 'nope' } },
    { what: 'unload an unknown task', send: () => app.inject({ method: 'POST', url: '/v1/tasks/nope/unload' }), status: 404, error: { code: 'task_not_found' } },
    { what: 'delete an unknown task', send: () => app.inject({ method: 'DELETE', url: '/v1/tasks/nope' }), status: 404, error: { code: 'task_not_found' } },
    { what: 'get an unknown task', send: () => app.inject({ method: 'GET', url: '/v1/tasks/nope' }), status: 404, error: { code: 'task_not_found' } },
    {
      what: 'an unknown PET type (path)',
      send: () => registerPath({ pet_type: 'ia3', path: 'sentiment.safetensors' }),
      status: 400,
      error: { code: 'unknown_pet_type', param: 'pet_type', pet_type: 'ia3', known_pet_types: ['adapter', 'maskbert', 'diff', 'bitfit', 'lora', 'prefix', 'standard'] },
    },
    { what: 'an unknown PET type (upload)', send: () => registerUpload({ pet_type: 'compacter' }, fixture.bytes.get('spam')!), status: 400, error: { code: 'unknown_pet_type', pet_type: 'compacter' } },
    { what: 'an unknown shared model', send: () => registerPath({ pet_type: 'adapter', shared_model: 'bert-large', path: 'sentiment.safetensors' }), status: 400, error: { code: 'unknown_shared_model', shared_model: 'bert-large' } },
    { what: 'a file that is not safetensors (path)', send: () => registerPath({ pet_type: 'adapter', path: 'broken/garbage.safetensors' }), status: 400, error: { code: 'malformed_params', param: 'params' } },
    { what: 'a file that is not safetensors (upload)', send: () => registerUpload({ pet_type: 'adapter' }, Buffer.from('{"not": "safetensors"}')), status: 400, error: { code: 'malformed_params' } },
    { what: 'an empty parameter file', send: () => registerPath({ pet_type: 'adapter', path: 'broken/empty.safetensors' }), status: 400, error: { code: 'malformed_params' } },
    {
      what: 'a parameter file of another model width',
      send: () => registerPath({ pet_type: 'adapter', id: 'narrow', path: 'broken/narrow-adapter.safetensors' }),
      status: 400,
      error: { code: 'params_shape_mismatch', param: 'params' },
    },
    { what: 'a file of another PET type than declared', send: () => registerUpload({ pet_type: 'bitfit', id: 'liar' }, fixture.bytes.get('sentiment')!), status: 400, error: { code: 'invalid_pet_config', pet_type: 'bitfit' } },
    { what: 'an id already taken', send: () => registerUpload({ pet_type: 'adapter', id: 'sentiment' }, fixture.bytes.get('sentiment')!), status: 409, error: { code: 'task_state' } },
    { what: 'a path out of the root', send: () => registerPath({ pet_type: 'bitfit', path: '../outside/secret.safetensors' }), status: 400, error: { code: 'path_outside_root', param: 'path' } },
    { what: 'an absolute path', send: () => registerPath({ pet_type: 'bitfit', path: join(fixture.dir, 'outside', 'secret.safetensors') }), status: 400, error: { code: 'path_outside_root' } },
    { what: 'a symlink out of the root', send: () => registerPath({ pet_type: 'bitfit', path: 'escape.safetensors' }), status: 400, error: { code: 'path_outside_root' } },
    { what: 'a missing file', send: () => registerPath({ pet_type: 'bitfit', path: 'missing.safetensors' }), status: 400, error: { code: 'params_not_found' } },
    { what: 'a directory', send: () => registerPath({ pet_type: 'bitfit', path: 'broken' }), status: 400, error: { code: 'params_not_found' } },
    { what: 'a JSON body without path', send: () => registerPath({ pet_type: 'adapter' }), status: 400, error: { param: 'path' } },
    { what: 'multipart without a file', send: () => registerUpload({ pet_type: 'adapter' }, null), status: 400, error: { param: 'params' } },
    { what: 'multipart without metadata', send: () => registerUpload(undefined, fixture.bytes.get('spam')!), status: 400, error: { param: 'metadata' } },
    { what: 'multipart with metadata that is not JSON', send: () => registerUpload('{pet_type: adapter', fixture.bytes.get('spam')!), status: 400, error: { param: 'metadata' } },
    { what: 'multipart metadata without pet_type', send: () => registerUpload({ name: 'x' }, fixture.bytes.get('spam')!), status: 400, error: { param: 'metadata.pet_type' } },
    { what: 'a task id with a path separator', send: () => registerUpload({ pet_type: 'diff', id: '../x' }, fixture.bytes.get('spam')!), status: 400, error: { param: 'metadata.id' } },
    {
      what: 'more texts than --max-batch-inputs',
      send: () => classify('sentiment', { input: Array.from({ length: 9 }, () => 'x') }),
      status: 413,
      error: { code: 'too_many_inputs', inputs: 9, limit: LIMITS.maxBatchInputs },
    },
    {
      what: 'a text over --max-input-tokens',
      send: () => classify('sentiment', { input: ['short', 'the movie was great and '.repeat(8)] }),
      status: 413,
      error: { code: 'input_too_long', param: 'input[1]', index: 1, limit: LIMITS.maxInputTokens },
    },
    {
      what: "a text over the model's positions",
      send: () => classify('sentiment', { input: 'the movie was great and '.repeat(40) }),
      status: 422,
      error: { code: 'input_exceeds_model_positions', param: 'input', limit: 128 },
    },
    { what: 'input of the wrong type', send: () => classify('sentiment', { input: 5 }), status: 400, error: { param: 'input' } },
    { what: 'an empty input list', send: () => classify('sentiment', { input: [] }), status: 400, error: { param: 'input' } },
    { what: 'input_pair of another shape', send: () => classify('sentiment', { input: ['a', 'b'], input_pair: ['c'] }), status: 400, error: { code: 'pair_shape_mismatch' } },
    { what: 'an unknown route', send: () => app.inject({ method: 'GET', url: '/v1/nothing' }), status: 404, error: { code: 'route_not_found' } },
  ];

  it.each(cases)('$what → $status', async ({ send, status, error }) => {
    const res = await send();
    expect(res.statusCode, JSON.stringify(res.json())).toBe(status);
    const body = res.json() as ErrorBody;
    expect(body.error).toMatchObject(error);
    expect(body.error.message.length).toBeGreaterThan(10);
    expect(await taskList()).toEqual(before);
  });

  it('a shape mismatch names the tensor', async () => {
    const res = await registerPath({ pet_type: 'adapter', path: 'broken/narrow-adapter.safetensors' });
    const { error } = res.json() as ErrorBody;
    expect(typeof error.tensor).toBe('string');
    expect(error.message).toContain(error.tensor as string);
  });

  it('after all of them, the tasks still classify', async () => {
    for (const t of TASKS) {
      const res = await classify(t.id, { input: 'still here' });
      expect(res.statusCode, res.body).toBe(200);
    }
  });
});

describe('unload and delete', () => {
  it('unload keeps the task registered; delete removes it (404 afterwards), the others stay', async () => {
    const unload = await app.inject({ method: 'POST', url: '/v1/tasks/formality/unload' });
    expect(unload.json()).toMatchObject({ id: 'formality', state: 'registered', device_bytes: null });
    const del = await app.inject({ method: 'DELETE', url: '/v1/tasks/formality' });
    expect(del.statusCode).toBe(200);
    expect(del.json()).toEqual({ id: 'formality', object: 'task', deleted: true });
    expect((await app.inject({ method: 'GET', url: '/v1/tasks/formality' })).statusCode).toBe(404);
    expect((await classify('formality', { input: 'x' })).statusCode).toBe(404);
    expect((await taskList()).map((t) => t.id)).toEqual(TASKS.slice(0, -1).map((t) => t.id));
    // The id is free again.
    const again = await registerUpload({ pet_type: 'prefix', id: 'formality' }, fixture.bytes.get('formality')!);
    expect(again.statusCode).toBe(201);
  });
});

describe('over a real socket', () => {
  it('registers by a FormData upload and classifies with fetch', async () => {
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    const form = new FormData();
    form.set('metadata', JSON.stringify({ pet_type: 'diff', id: 'spam-2', load: true }));
    form.set('params', new Blob([readFileSync(join(fixture.paramsDir, 'spam.safetensors'))]), 'spam.safetensors');
    const reg = await fetch(`${address}/v1/tasks`, { method: 'POST', body: form });
    expect(reg.status).toBe(201);
    expect(await reg.json()).toMatchObject({ id: 'spam-2', pet_type: 'diff', state: 'loaded' });
    const res = await fetch(`${address}/v1/tasks/spam-2/classify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: texts[2] }) });
    expect(res.status).toBe(200);
    const [want] = reference.classify('spam', tokens({ input: texts[2]! }));
    expect(((await res.json()) as ClassifyBody).data[0]!.logits).toEqual(Array.from(want!.logits));
  });
});

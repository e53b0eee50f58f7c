/**
 * TypeBox schemas of the HTTP API: request bodies (validated by fastify before a handler runs) and response bodies
 * (they also drive fast serialization, so every field a body carries is declared here). Unknown request fields are
 * accepted and ignored.
 */
import { type Static, Type } from 'typebox';

import { Nullable } from '@tessera/server-kit';

/** Task ids and names: no path separators, no `..`, at most 128 characters. */
export const TASK_ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$';

/** Task metadata: what a register call says about the task besides its parameters. */
const metadataFields = {
  /** adapter | maskbert | diff | bitfit | lora | prefix | standard */
  pet_type: Type.String({ minLength: 1, maxLength: 64 }),
  /** The shared model's tag (default: the one this server loaded). */
  shared_model: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  /** The task id (default: assigned by the server). */
  id: Type.Optional(Type.String({ pattern: TASK_ID_PATTERN })),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
  /** Load it (upload its parameters to the device) at once; default false: loaded on first classify. */
  load: Type.Optional(Type.Boolean()),
};

/** The multipart form's `metadata` field. */
export const TaskMetadata = Type.Object(metadataFields);
export type TaskMetadata = Static<typeof TaskMetadata>;

/** POST /v1/tasks as JSON: the parameter file is named by a path relative to --params-root. */
export const RegisterTaskJson = Type.Object({ ...metadataFields, path: Type.String({ minLength: 1, maxLength: 4096 }) });
export type RegisterTaskJson = Static<typeof RegisterTaskJson>;

export const TaskParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 256 }) });

export const Task = Type.Object({
  id: Type.String(),
  object: Type.Literal('task'),
  name: Nullable(Type.String()),
  pet_type: Type.String(),
  shared_model: Type.String(),
  labels: Type.Array(Type.String()),
  state: Type.Union([Type.Literal('registered'), Type.Literal('loaded')]),
  stored_bytes: Type.Integer(),
  device_bytes: Nullable(Type.Integer()),
});
export type Task = Static<typeof Task>;

export const Memory = Type.Object({
  budget_bytes: Type.Integer(),
  shared_bytes: Type.Integer(),
  pet_bytes: Type.Integer(),
  loaded_tasks: Type.Integer(),
  registered_tasks: Type.Integer(),
});
export type Memory = Static<typeof Memory>;

export const TaskWithMemory = Type.Object({ ...Task.properties, memory: Memory });

export const TaskList = Type.Object({ object: Type.Literal('list'), data: Type.Array(Task), memory: Memory });

const Texts = Type.Union([Type.String({ maxLength: 1_000_000 }), Type.Array(Type.String({ maxLength: 1_000_000 }), { minItems: 1 })]);

export const ClassifyRequest = Type.Object({
  /** One text, or a list of texts classified together (one result each, in order). */
  input: Texts,
  /** The second text of each input for sentence-pair tasks ([CLS] a [SEP] b [SEP], token types 0 / 1): same shape as `input`. */
  input_pair: Type.Optional(Texts),
});
export type ClassifyRequest = Static<typeof ClassifyRequest>;

export const Classification = Type.Object({
  index: Type.Integer(),
  label: Type.String(),
  label_index: Type.Integer(),
  logits: Type.Array(Type.Number()),
  /** softmax(logits). */
  probabilities: Type.Array(Type.Number()),
});

export const ClassifyResponse = Type.Object({
  task: Type.String(),
  object: Type.Literal('list'),
  data: Type.Array(Classification),
  usage: Type.Object({ prompt_tokens: Type.Integer() }),
});

export const ErrorBody = Type.Object({
  error: Type.Object({
    message: Type.String(),
    type: Type.String(),
    code: Nullable(Type.String()),
    param: Nullable(Type.String()),
    task: Type.Optional(Type.String()),
    pet_type: Type.Optional(Type.String()),
    known_pet_types: Type.Optional(Type.Array(Type.String())),
    tensor: Type.Optional(Type.String()),
    shared_model: Type.Optional(Type.String()),
    index: Type.Optional(Type.Integer()),
    tokens: Type.Optional(Type.Integer()),
    inputs: Type.Optional(Type.Integer()),
    limit: Type.Optional(Type.Integer()),
    budget_bytes: Type.Optional(Type.Integer()),
    requested_bytes: Type.Optional(Type.Integer()),
  }),
});

/** Hints for union-typed fields, used in place of the validator's per-branch messages. */
export const UNION_FIELD_HINTS: Readonly<Record<string, string>> = {
  input: 'must be a string or a non-empty array of strings',
  input_pair: 'must be a string or a non-empty array of strings, the same shape as input',
};

/**
 * TypeBox schemas of the request bodies (validated before a handler runs; a violation is a 400 naming the field).
 * Unknown fields are accepted and ignored.
 */
import { type Static, Type } from 'typebox';

export const ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$';

const Text = Type.String({ minLength: 1, maxLength: 100_000 });
/** Training steps of the job (default: the server's --fpt-steps / --ft-steps). */
const Steps = Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 }));

export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });

export const CreateDomain = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 64 }),
  /** The domain corpus: texts. */
  corpus: Type.Array(Text, { minItems: 1, maxItems: 100_000 }),
  /** α-coverage of the domain table, in (0, 1] (default the server's --alpha). */
  alpha: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1 })),
  steps: Steps,
});
export type CreateDomain = Static<typeof CreateDomain>;

export const UpdateDomain = Type.Object({ corpus: Type.Array(Text, { minItems: 1, maxItems: 100_000 }), steps: Steps });
export type UpdateDomain = Static<typeof UpdateDomain>;

const Example = Type.Object({ text: Text, label: Type.String({ minLength: 1, maxLength: 128 }) });

export const CreateTenant = Type.Object({
  /** Default: assigned (tenant-1, tenant-2, …). */
  id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  /** A domain name, or "root". */
  domain: Type.String({ minLength: 1, maxLength: 64 }),
  labels: Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { minItems: 2, maxItems: 64 }),
  examples: Type.Array(Example, { minItems: 1, maxItems: 100_000 }),
  steps: Steps,
});
export type CreateTenant = Static<typeof CreateTenant>;

export const UpdateTenant = Type.Object({ examples: Type.Array(Example, { minItems: 1, maxItems: 100_000 }), steps: Steps });
export type UpdateTenant = Static<typeof UpdateTenant>;

/** Texts, or token ids ([CLS] … [SEP] included, as the tokenizer's template adds them): exactly one of the two. */
export const ClassifyRequest = Type.Object({
  texts: Type.Optional(Type.Array(Text, { minItems: 1 })),
  token_ids: Type.Optional(Type.Array(Type.Array(Type.Integer(), { minItems: 1 }), { minItems: 1 })),
});
export type ClassifyRequest = Static<typeof ClassifyRequest>;

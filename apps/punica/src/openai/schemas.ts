/**
 * TypeBox schemas of Punica's own endpoints: GET /v1/models (OpenAI's model card with vLLM's lineage, the adapter's
 * residency and rank) and vLLM's runtime adapter loading. The generation endpoints' schemas are server-kit's.
 */
import { Nullable } from '@tessera/server-kit';
import { type Static, Type } from 'typebox';

/** Where an adapter's weights are now: only on disk, in the host cache, or resident in device memory. */
export const Residency = Type.Union([Type.Literal('disk'), Type.Literal('host'), Type.Literal('device')]);
export type Residency = Static<typeof Residency>;

/** One entry of GET /v1/models: OpenAI's fields, vLLM's lineage (`root`, `parent`) and our residency. */
export const ModelCard = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  created: Type.Integer(),
  owned_by: Type.String(),
  /** The base model: its directory. An adapter: the adapter's directory (vLLM's convention). */
  root: Type.String(),
  /** null for the base model; the base model's id for an adapter. */
  parent: Nullable(Type.String()),
  max_model_len: Type.Integer(),
  /** Base model: always 'device'. Adapter: 'disk' | 'host' | 'device'. */
  residency: Residency,
  /** Adapters only: LoRA rank (max over layers) when known. */
  lora_rank: Type.Optional(Type.Integer()),
});
export type ModelCard = Static<typeof ModelCard>;

export const ModelList = Type.Object({ object: Type.Literal('list'), data: Type.Array(ModelCard) });
export type ModelList = Static<typeof ModelList>;

export const ModelParams = Type.Object({ model: Type.String() });

export const LoadLoraAdapterRequest = Type.Object(
  { lora_name: Type.String(), lora_path: Type.String({ minLength: 1 }), load_inplace: Type.Optional(Type.Boolean()) },
  { additionalProperties: true },
);
export type LoadLoraAdapterRequest = Static<typeof LoadLoraAdapterRequest>;

export const UnloadLoraAdapterRequest = Type.Object(
  { lora_name: Type.String(), lora_int_id: Type.Optional(Type.Integer()) },
  { additionalProperties: true },
);
export type UnloadLoraAdapterRequest = Static<typeof UnloadLoraAdapterRequest>;

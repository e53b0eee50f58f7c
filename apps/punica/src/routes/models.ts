/**
 * GET /v1/models and GET /v1/models/:model: the base model and every registered adapter. Adapters carry vLLM's
 * lineage (`root`: the adapter directory, `parent`: the base model's id) and where their weights are now
 * (`residency`: 'disk' | 'host' | 'device'), sampled from the engine's adapter cache.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';

import { ErrorBody, modelNotFound } from '@tessera/server-kit';

import { ModelCard, ModelList, ModelParams } from '../openai/schemas.js';

async function modelCards(app: FastifyInstance): Promise<ModelCard[]> {
  const { base } = app.models;
  const residency = new Map((await app.engine.call('adapters', null)).map((a) => [a.name, a.residency]));
  const cards: ModelCard[] = [
    { id: base.name, object: 'model', created: base.created, owned_by: 'tessera', root: base.root, parent: null, max_model_len: base.maxModelLen, residency: 'device' },
  ];
  for (const a of app.models.adapters()) {
    cards.push({
      id: a.name,
      object: 'model',
      created: a.created,
      owned_by: 'tessera',
      root: a.path,
      parent: base.name,
      max_model_len: base.maxModelLen,
      // An adapter registered on the HTTP side but already gone from the engine (an unload in flight) is on disk.
      residency: residency.get(a.name) ?? 'disk',
      lora_rank: a.rank,
    });
  }
  return cards;
}

const models: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/v1/models', { schema: { response: { 200: ModelList, '5xx': ErrorBody } } }, async () => ({ object: 'list' as const, data: await modelCards(app) }));

  app.get('/v1/models/:model', { schema: { params: ModelParams, response: { 200: ModelCard, '4xx': ErrorBody, '5xx': ErrorBody } } }, async (request) => {
    const { model } = request.params;
    const { adapter } = app.models.resolve(model);
    const id = adapter ?? app.models.base.name;
    const card = (await modelCards(app)).find((c) => c.id === id);
    if (!card) throw modelNotFound(model);
    return card;
  });
};

export default models;

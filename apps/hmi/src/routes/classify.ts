/**
 * POST /v1/tenants/:id/classify: texts (or token ids) classified by one tenant's model.
 *
 *   { "texts": ["the blood test came back", "fish in the river"] }   → data[0], data[1]
 *   { "token_ids": [[2, 338, 109, 3]] }
 *
 * Each input is one request of the dispatcher, batched with other tenants' requests of the same PLOT version.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { HmiInputError } from '../errors.js';
import { ClassifyRequest, IdParams } from '../schemas.js';

const classify: FastifyPluginAsyncTypebox = async (app) => {
  const { model, tokenizer } = app.engine;
  const maxPositions = model.config.maxPositions;
  const vocab = model.config.vocabSize;
  const maxInputs = app.hmiLimits.maxInputs;

  app.post('/v1/tenants/:id/classify', { schema: { params: IdParams, body: ClassifyRequest } }, async (req) => {
    const { texts, token_ids: tokenIds } = req.body;
    if ((texts === undefined) === (tokenIds === undefined)) throw new HmiInputError('TESSERA_HMI_BAD_INPUT', 'give exactly one of "texts" and "token_ids"', 'texts');
    const n = (texts ?? tokenIds)!.length;
    if (n > maxInputs) throw new HmiInputError('TESSERA_HMI_BAD_INPUT', `${n} inputs; a request takes at most ${maxInputs}`, texts ? 'texts' : 'token_ids', { limit: maxInputs });
    // The tenant first: an unknown tenant is a 404 whatever the inputs.
    app.engine.manager.tenant(req.params.id);
    const inputs = texts
      ? texts.map((t) => tokenizer.encode(t))
      : tokenIds!.map((ids, i) => {
          for (const id of ids) {
            if (id < 1 || id >= vocab) throw new HmiInputError('TESSERA_HMI_BAD_INPUT', `token_ids[${i}] holds ${id}, outside [1, ${vocab})`, `token_ids[${i}]`, { vocab_size: vocab });
          }
          return ids;
        });
    inputs.forEach((ids, i) => {
      const param = texts ? `texts[${i}]` : `token_ids[${i}]`;
      if (ids.length === 0) throw new HmiInputError('TESSERA_HMI_BAD_INPUT', `${param} is empty after tokenization`, param);
      if (ids.length > maxPositions) throw new HmiInputError('TESSERA_HMI_BAD_INPUT', `${param} is ${ids.length} tokens, more than the model's ${maxPositions} positions`, param, { tokens: ids.length, limit: maxPositions });
    });
    const results = await app.engine.classify(req.params.id, inputs);
    return {
      object: 'list' as const,
      tenant: req.params.id,
      data: results.map((r, index) => ({ index, label: r.label, label_index: r.labelIndex, logits: r.logits, probabilities: r.probabilities })),
      usage: { prompt_tokens: inputs.reduce((s, x) => s + x.length, 0) },
    };
  });
};

export default classify;

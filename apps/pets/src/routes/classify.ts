/**
 * POST /v1/tasks/:id/classify: one text or a list of texts (optionally sentence pairs) classified by one task.
 *
 *   { "input": "a great movie" }                         → data[0]
 *   { "input": ["a great movie", "dull"] }               → data[0], data[1]
 *   { "input": "a man plays", "input_pair": "someone plays" }
 *
 * Each text is one query of the engine's batch window: queries of concurrent requests, of any task and PET type,
 * are planned together (coordinated batching) and may share macro-batches. A registered task that is not loaded
 * is loaded on its first classify, as PetS's Task Loader does before a task's first invocation (pets.md §3.3).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { encodeClassifyInputs, softmax } from '../api/inputs.js';
import { ClassifyRequest, ClassifyResponse, ErrorBody, TaskParams } from '../api/schemas.js';

const classify: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/v1/tasks/:id/classify',
    { schema: { params: TaskParams, body: ClassifyRequest, response: { 200: ClassifyResponse, '4xx': ErrorBody, '5xx': ErrorBody } } },
    async (request) => {
      const { id } = request.params;
      const inputs = encodeClassifyInputs(request.body, app.tokenizer, app.inputLimits);
      const results = await app.engine.classify(id, inputs);
      return {
        task: id,
        object: 'list' as const,
        data: results.map((r, index) => ({ index, label: r.label, label_index: r.labelIndex, logits: r.logits, probabilities: softmax(r.logits) })),
        usage: { prompt_tokens: inputs.reduce((n, input) => n + input.ids.length, 0) },
      };
    },
  );
};

export default classify;

/**
 * TypeBox schemas of the OpenAI-compatible API: request bodies (validated by fastify before a handler runs) and
 * response bodies (they also drive fast serialization). Field names and shapes follow OpenAI's API and vLLM's
 * extensions (`top_k`, `ignore_eos`). Unknown request fields are accepted and ignored,
 * as OpenAI and vLLM do; known fields this server cannot honour (penalties, logit_bias, tools, …) are
 * rejected by the routes with a 400 that names them, never silently ignored.
 */
import { type Static, type TSchema, Type } from 'typebox';

export function Nullable<T extends TSchema>(schema: T) {
  return Type.Union([schema, Type.Null()]);
}

/** `stop`: one string or up to 16 strings, each non-empty. */
const Stop = Nullable(Type.Union([Type.String({ minLength: 1 }), Type.Array(Type.String({ minLength: 1 }), { maxItems: 16 })]));

const TokenIds = Type.Array(Type.Integer({ minimum: 0 }), { minItems: 0 });

const StreamOptions = Nullable(
  Type.Object({ include_usage: Type.Optional(Nullable(Type.Boolean())), continuous_usage_stats: Type.Optional(Nullable(Type.Boolean())) }),
);

/** Sampling and stopping fields shared by both generation endpoints. */
const samplingFields = {
  model: Type.String({ minLength: 1 }),
  max_tokens: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
  temperature: Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 2 }))),
  top_p: Type.Optional(Nullable(Type.Number({ exclusiveMinimum: 0, maximum: 1 }))),
  /** vLLM extension: keep the k most likely tokens; -1 or 0 = off. */
  top_k: Type.Optional(Nullable(Type.Integer({ minimum: -1 }))),
  n: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
  seed: Type.Optional(Nullable(Type.Integer({ minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER }))),
  stop: Type.Optional(Stop),
  stream: Type.Optional(Nullable(Type.Boolean())),
  stream_options: Type.Optional(StreamOptions),
  /** vLLM extension: keep generating past the end-of-sequence token. */
  ignore_eos: Type.Optional(Nullable(Type.Boolean())),
  presence_penalty: Type.Optional(Nullable(Type.Number())),
  frequency_penalty: Type.Optional(Nullable(Type.Number())),
  logit_bias: Type.Optional(Nullable(Type.Record(Type.String(), Type.Number()))),
  user: Type.Optional(Nullable(Type.String())),
};

export const CompletionRequest = Type.Object(
  {
    ...samplingFields,
    /** 0 only with `echo` (the route checks it): the prompt alone, scored. */
    max_tokens: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
    /** A string, token ids, or a list of either (a batch of prompts). */
    prompt: Type.Union([Type.String(), TokenIds, Type.Array(Type.String(), { minItems: 1 }), Type.Array(TokenIds, { minItems: 1 })]),
    echo: Type.Optional(Nullable(Type.Boolean())),
    logprobs: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
    best_of: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
    suffix: Type.Optional(Nullable(Type.String())),
  },
  { additionalProperties: true },
);
export type CompletionRequest = Static<typeof CompletionRequest>;

const TextPart = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: true });
const OtherPart = Type.Object({ type: Type.String() }, { additionalProperties: true });

export const ChatMessage = Type.Object(
  {
    role: Type.Union([Type.Literal('system'), Type.Literal('developer'), Type.Literal('user'), Type.Literal('assistant')]),
    content: Nullable(Type.Union([Type.String(), Type.Array(Type.Union([TextPart, OtherPart]))])),
    name: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);
export type ChatMessage = Static<typeof ChatMessage>;

export const ChatCompletionRequest = Type.Object(
  {
    ...samplingFields,
    messages: Type.Array(ChatMessage, { minItems: 1 }),
    /** OpenAI's newer name for max_tokens; either may be given (not both with different values). */
    max_completion_tokens: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
    logprobs: Type.Optional(Nullable(Type.Boolean())),
    top_logprobs: Type.Optional(Nullable(Type.Integer({ minimum: 0 }))),
    tools: Type.Optional(Nullable(Type.Array(Type.Unknown()))),
    tool_choice: Type.Optional(Type.Unknown()),
    response_format: Type.Optional(Nullable(Type.Object({ type: Type.String() }, { additionalProperties: true }))),
  },
  { additionalProperties: true },
);
export type ChatCompletionRequest = Static<typeof ChatCompletionRequest>;

/** Friendlier messages for the union-typed fields, whose raw schema errors list every branch. */
export const UNION_FIELD_HINTS: Readonly<Record<string, string>> = {
  prompt: 'must be a string, an array of token ids, or an array of either',
  stop: 'must be a non-empty string or an array of at most 16 non-empty strings',
  content: 'must be a string, an array of content parts, or null',
  role: "must be one of 'system', 'developer', 'user', 'assistant'",
};

export const Usage = Type.Object({
  prompt_tokens: Type.Integer(),
  completion_tokens: Type.Integer(),
  total_tokens: Type.Integer(),
});
export type Usage = Static<typeof Usage>;

export const FinishReason = Nullable(Type.Union([Type.Literal('stop'), Type.Literal('length')]));
export type FinishReason = Static<typeof FinishReason>;

/** Completions' (legacy) logprobs: per token its text, log-probability, the top alternatives (with the chosen one) and its text offset. */
export const CompletionLogprobs = Nullable(
  Type.Object({
    tokens: Type.Array(Type.String()),
    token_logprobs: Type.Array(Nullable(Type.Number())),
    top_logprobs: Type.Array(Nullable(Type.Record(Type.String(), Type.Number()))),
    text_offset: Type.Array(Type.Integer()),
  }),
);
export type CompletionLogprobs = Static<typeof CompletionLogprobs>;

const ChatTopLogprob = Type.Object({ token: Type.String(), logprob: Type.Number(), bytes: Nullable(Type.Array(Type.Integer())) });

/** Chat's logprobs: per token its text, log-probability, UTF-8 bytes and the `top_logprobs` most likely alternatives. */
export const ChatLogprobs = Nullable(
  Type.Object({
    content: Nullable(Type.Array(Type.Object({ token: Type.String(), logprob: Type.Number(), bytes: Nullable(Type.Array(Type.Integer())), top_logprobs: Type.Array(ChatTopLogprob) }))),
  }),
);
export type ChatLogprobs = Static<typeof ChatLogprobs>;

export const CompletionResponse = Type.Object({
  id: Type.String(),
  object: Type.Literal('text_completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Type.Object({ index: Type.Integer(), text: Type.String(), logprobs: CompletionLogprobs, finish_reason: FinishReason }),
  ),
  usage: Usage,
});
export type CompletionResponse = Static<typeof CompletionResponse>;

export const ChatCompletionResponse = Type.Object({
  id: Type.String(),
  object: Type.Literal('chat.completion'),
  created: Type.Integer(),
  model: Type.String(),
  choices: Type.Array(
    Type.Object({
      index: Type.Integer(),
      message: Type.Object({ role: Type.Literal('assistant'), content: Type.String() }),
      logprobs: ChatLogprobs,
      finish_reason: FinishReason,
    }),
  ),
  usage: Usage,
});
export type ChatCompletionResponse = Static<typeof ChatCompletionResponse>;

/** vLLM's POST /tokenize: a prompt, or chat messages (rendered by the chat template with its generation prompt). */
export const TokenizeRequest = Type.Union([
  Type.Object({ model: Type.String({ minLength: 1 }), prompt: Type.String(), add_special_tokens: Type.Optional(Nullable(Type.Boolean())) }, { additionalProperties: true }),
  Type.Object({ model: Type.String({ minLength: 1 }), messages: Type.Array(ChatMessage, { minItems: 1 }) }, { additionalProperties: true }),
]);
export type TokenizeRequest = Static<typeof TokenizeRequest>;

export const TokenizeResponse = Type.Object({ count: Type.Integer(), max_model_len: Type.Integer(), tokens: Type.Array(Type.Integer()), token_strs: Nullable(Type.Array(Type.String())) });

/** vLLM's POST /detokenize. */
export const DetokenizeRequest = Type.Object({ model: Type.String({ minLength: 1 }), tokens: TokenIds }, { additionalProperties: true });
export type DetokenizeRequest = Static<typeof DetokenizeRequest>;

export const DetokenizeResponse = Type.Object({ prompt: Type.String() });

export const ErrorBody = Type.Object({
  error: Type.Object({ message: Type.String(), type: Type.String(), param: Nullable(Type.String()), code: Nullable(Type.String()) }),
});

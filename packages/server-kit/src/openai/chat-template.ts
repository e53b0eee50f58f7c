/**
 * The chat template: how /v1/chat/completions turns messages into one prompt. Models here are generated or
 * user-supplied Llama-style decoders whose tokenizer.json carries no Jinja chat template we could run, so the
 * server uses one small, documented, role-prefixed template for every model:
 *
 *   <BOS>system: {content}\n        (OpenAI's 'developer' role is rendered as 'system')
 *   user: {content}\n
 *   assistant: {content}\n
 *   …
 *   assistant:                     (the generation prompt: the model continues as the assistant)
 *
 * BOS comes from the tokenizer's post-processor (as for /v1/completions). Content is a string or a list of
 * parts; text parts are concatenated, any other part type (images, audio) is refused with a 400.
 */
import { badRequest } from './generation.js';
import type { ChatMessage } from './schemas.js';

export const CHAT_ROLE_PREFIX: Readonly<Record<ChatMessage['role'], string>> = {
  system: 'system',
  developer: 'system',
  user: 'user',
  assistant: 'assistant',
};

/** The text of one message's content. */
export function messageText(message: ChatMessage, index: number): string {
  const { content } = message;
  if (content === null) return '';
  if (typeof content === 'string') return content;
  return content
    .map((part, p) => {
      if (part.type !== 'text' || typeof (part as { text?: unknown }).text !== 'string') {
        throw badRequest(`messages[${index}].content[${p}]: content parts of type ${JSON.stringify(part.type)} are not supported (text only)`, `messages[${index}].content`);
      }
      return (part as { text: string }).text;
    })
    .join('');
}

/** Renders the conversation and the assistant generation prompt. */
export function renderChat(messages: readonly ChatMessage[]): string {
  const lines = messages.map((m, i) => `${CHAT_ROLE_PREFIX[m.role]}: ${messageText(m, i)}\n`);
  return `${lines.join('')}assistant:`;
}

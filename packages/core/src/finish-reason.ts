/**
 * Why a generated sequence ended: its end-of-sequence token, a stop string or token, its token limit, or a
 * cancellation (a client that went away, an admin call). One type for the engine, the batcher, the host protocol
 * and the servers' OpenAI mapping.
 */
export type FinishReason = 'eos' | 'stop' | 'length' | 'cancelled';

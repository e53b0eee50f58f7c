/**
 * Held-out perplexity through the serving path: the decoder's forward with logits for every position, a LoRA
 * attached per sequence by `LoraDelta` exactly as the Punica server attaches it. Each quotation is scored on its
 * own as the model saw it in training (BOS + text + EOS): the mean negative log-likelihood of every token after
 * BOS, EOS included, over all quotations of the split; perplexity is its exponential.
 */
import { readFileSync } from 'node:fs';

import {
  type DecoderModel,
  type LoraAdapter,
  LoraDelta,
  logSumExp,
  PagedKvCache,
  type TextTokenizer,
} from '@tessera/engine';

/** The quotations of a `{text}` JSONL file. */
export function readTexts(path: string): string[] {
  return readFileSync(path, 'utf8').split('\n').filter((l) => l.trim() !== '').map((l) => (JSON.parse(l) as { text: string }).text);
}

export interface NllResult {
  /** Summed negative log-likelihood (nats). */
  nll: number;
  /** Tokens predicted. */
  tokens: number;
  /** Quotations cut to the model's positions. */
  truncated: number;
}

export function perplexityOf(r: NllResult): number {
  return Math.exp(r.nll / r.tokens);
}

/**
 * Scores `texts` with the base model (adapter null) or with one adapter. Deterministic: same inputs, same sums.
 * Quotations longer than the model's positions are cut to them (counted in `truncated`).
 */
export function scoreTexts(model: DecoderModel, tokenizer: TextTokenizer, texts: readonly string[], adapter: LoraAdapter | null, options: { batch?: number } = {}): NllResult {
  const eos = model.config.eosTokenIds[0]!;
  const maxLen = model.config.maxPositions;
  const batch = options.batch ?? 8;
  const key = adapter ? 'adapter' : null;
  const deltas = adapter ? [new LoraDelta(new Map([[key!, adapter]]))] : [];
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: Math.ceil((batch * maxLen) / 16) + batch * 2 });
  const result: NllResult = { nll: 0, tokens: 0, truncated: 0 };
  const vocab = model.config.vocabSize;
  try {
    for (let start = 0; start < texts.length; start += batch) {
      const seqs = texts.slice(start, start + batch).map((text) => {
        const ids = [...tokenizer.encode(text), eos];
        if (ids.length > maxLen) {
          result.truncated++;
          return ids.slice(0, maxLen);
        }
        return ids;
      });
      const out = model.forward(seqs.map((ids, i) => ({ id: `ppl-${start + i}`, tokens: ids, key })), { cache, deltas, logits: 'all' });
      const logits = out.logits!.toArray() as Float32Array;
      out.logits!.dispose();
      seqs.forEach((ids, i) => {
        const base = out.offsets[i]!;
        for (let t = 0; t + 1 < ids.length; t++) {
          const row = logits.subarray((base + t) * vocab, (base + t + 1) * vocab);
          result.nll += logSumExp(row) - row[ids[t + 1]!]!;
          result.tokens++;
        }
        cache.release(`ppl-${start + i}`);
      });
    }
  } finally {
    cache.dispose();
  }
  return result;
}

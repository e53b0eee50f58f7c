/**
 * prefix-cache: issue 19's shared-system-prompt workload on the real engine. Every request is one system prompt
 * (the same tokens for all) plus its own user turn, across four LoRA tenants and the base model, all submitted at
 * once to the Punica policy. Served with the batcher's prefix cache off and on (alternating, repeated, medians):
 * the hit rate (prefill tokens attached from cached pages over prefill tokens looked up), the prefill tokens
 * actually computed, tokens/s, and whether every greedy output is the same with and without the cache (it must be).
 * The cache is keyed by adapter, so each tenant computes the system prompt once: the best possible hit rate is
 * (requests − tenants) × cacheable system-prompt tokens over all prompt tokens.
 */
import { pagesForLength, PagedKvCache, loadDecoder } from '@tessera/engine';
import type { BatcherRequest } from '@tessera/batcher';
import { rng } from '../data.js';
import { miniModelDir } from '../models.js';
import { median } from '../stats.js';
import { barChart } from '../svg.js';
import type { Row } from '../table.js';
import type { Bench, BenchContext, BenchOutput } from '../types.js';
import { adapterDirs, type RunResult, serve, sgmvLoraDelta } from './punica-textgen.js';

const TENANT_ADAPTERS = 4;
const LORA_RANK = 16;

export interface PrefixCacheOptions {
  requests?: number;
  systemTokens?: number;
  maxTokens?: number;
  rounds?: number;
}

export async function prefixCacheFigure(ctx: BenchContext, options: PrefixCacheOptions = {}): Promise<BenchOutput> {
  const n = options.requests ?? (ctx.quick ? 30 : 80);
  const maxTokens = options.maxTokens ?? (ctx.quick ? 8 : 16);
  const rounds = options.rounds ?? (ctx.quick ? 2 : 3);
  const SYSTEM_TOKENS = options.systemTokens ?? 160;
  const maxBatch = 16;
  const model = loadDecoder(miniModelDir('decoder', ctx.log));
  const c = model.config;
  const dirs = adapterDirs(model, TENANT_ADAPTERS, LORA_RANK, ctx);
  const applied = await sgmvLoraDelta(model, dirs);
  const tenants: (string | null)[] = [...dirs.keys(), null];

  const next = rng(19);
  const token = () => 5 + Math.floor(next() * (c.vocabSize - 10));
  const system = Array.from({ length: SYSTEM_TOKENS }, token);
  const requests: BatcherRequest[] = Array.from({ length: n }, (_, i) => ({
    id: `r${i}`,
    adapter: tenants[i % tenants.length]!,
    prompt: [...system, ...Array.from({ length: 8 + Math.floor(next() * 25) }, token)],
    maxTokens,
    ignoreEos: true,
  }));
  const promptTokens = requests.reduce((s, r) => s + r.prompt.length, 0);
  const cacheable = Math.floor(SYSTEM_TOKENS / 16) * 16;
  const bestHitRate = ((n - tenants.length) * cacheable) / promptTokens;
  // Room for a full batch plus every tenant's cached system prompt: the cache competes with nothing here.
  const numPages = maxBatch * pagesForLength(SYSTEM_TOKENS + 32 + maxTokens) + tenants.length * pagesForLength(SYSTEM_TOKENS) + 8;

  const runs: { on: RunResult[]; off: RunResult[] } = { on: [], off: [] };
  let differing = 0;
  try {
    const cache = PagedKvCache.create({ ...model.kvShape, numPages }, model.backend);
    try {
      ctx.log('prefix-cache: warm-up');
      await serve(model, cache, [applied.delta], 'punica', maxBatch, requests.slice(0, tenants.length).map((r) => ({ ...r, id: `warm-${r.id}`, maxTokens: 2 })));
      for (let round = 1; round <= rounds; round++) {
        for (const on of [false, true]) {
          ctx.log(`prefix-cache: cache ${on ? 'on' : 'off'}, round ${round} of ${rounds}`);
          // A fresh cache each run: the "on" runs start cold and warm up within the run, as a server would.
          const fresh = PagedKvCache.create({ ...model.kvShape, numPages }, model.backend);
          try {
            (on ? runs.on : runs.off).push(await serve(model, fresh, [applied.delta], 'punica', maxBatch, requests, { prefixCache: on }));
          } finally {
            fresh.dispose();
          }
        }
      }
    } finally {
      cache.dispose();
    }
    const reference = runs.off[0]!.tokens;
    for (const run of [...runs.on, ...runs.off]) for (const [id, tokens] of run.tokens) if (reference.get(id)!.join() !== tokens.join()) differing++;
  } finally {
    applied.dispose();
    model.dispose();
  }

  const generated = n * maxTokens;
  const row = (name: 'off' | 'on'): Row => {
    const rs = runs[name];
    const s = rs[0]!.stats;
    const ms = median(rs.map((r) => r.ms));
    return {
      prefix_cache: name,
      hit_rate: s.prefixLookupTokens === 0 ? 0 : s.prefixHitTokens / s.prefixLookupTokens,
      prefill_tokens_computed: s.prefixLookupTokens === 0 ? promptTokens : s.prefixLookupTokens - s.prefixHitTokens,
      tokens_per_s: (promptTokens + generated) / (ms / 1000),
      wall_s: ms / 1000,
      steps: s.steps,
    };
  };
  const rows = [row('off'), row('on')];
  const [off, on] = rows as [Row, Row];
  const ratios = {
    prefix_hit_rate: on.hit_rate as number,
    prefix_hit_rate_of_best: (on.hit_rate as number) / bestHitRate,
    prefill_tokens_on_vs_off: (on.prefill_tokens_computed as number) / (off.prefill_tokens_computed as number),
    throughput_on_vs_off: (on.tokens_per_s as number) / (off.tokens_per_s as number),
    differing_outputs: differing,
  };
  return {
    params: { requests: n, tenants: tenants.length, systemTokens: SYSTEM_TOKENS, promptTokens, maxTokens, maxBatch, loraRank: LORA_RANK, kvPages: numPages, rounds, bestHitRate },
    rows,
    ratios,
    table: {
      columns: [
        { key: 'prefix_cache', header: 'prefix cache' },
        { key: 'hit_rate', header: 'hit rate (tokens)' },
        { key: 'prefill_tokens_computed', header: 'prefill tokens computed' },
        { key: 'tokens_per_s', header: 'tok/s (prompt+gen)' },
        { key: 'wall_s', header: 'wall s (median)' },
        { key: 'steps', header: 'steps' },
      ],
      rows,
      notes: [
        `${n} requests over ${tenants.length} tenants (${TENANT_ADAPTERS} LoRA rank ${LORA_RANK} + base), each a shared ${SYSTEM_TOKENS}-token system prompt + an 8–32-token user turn, ${maxTokens} forced greedy tokens; all submitted at once; max batch ${maxBatch}; mini decoder.`,
        `Best possible hit rate (each tenant computes the system prompt once; full 16-token pages only): ${(100 * bestHitRate).toFixed(1)} %.`,
        `Greedy outputs that differ between any two runs (with or without the cache): ${differing} (must be 0). Wall time: median of ${rounds} alternating runs each.`,
      ],
    },
    svg: barChart({
      title: 'Prefix cache on a shared system prompt: prefill tokens computed and throughput (on / off)',
      categories: ['prefill tokens computed', 'tokens/s'],
      series: [{ name: 'cache on / cache off', values: [ratios.prefill_tokens_on_vs_off, ratios.throughput_on_vs_off] }],
      yLabel: 'ratio',
      referenceLines: [{ value: 1, label: 'off' }],
    }),
  };
}

export const prefixCacheBench: Bench = { name: 'prefix-cache', run: (ctx) => prefixCacheFigure(ctx) };

import { type Clock, fnv1a32, mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import {
  KvCoordinator,
  meanRowCosine,
  selectSpeculation,
  ServingInvalidError,
  ServingStateError,
  SpeculationLedger,
  type SpeculationCandidate,
} from '../src/planner/index.js';

class ManualClock implements Clock {
  t = 0;
  now(): number {
    return this.t;
  }
}

describe('selectSpeculation (algorithm 5.8, behaviour 22)', () => {
  it('takes the top 10 % by drain time, skipping last blocks, blocks without surrogates and neighbours of chosen ones', () => {
    const chains = [['e', 'a', 'b', 'c', 'h'], ['e', 'x', 'b', 'h']];
    const cands: SpeculationCandidate[] = [
      { instance: 'h@0', block: 'h', drainMs: 100 },
      { instance: 'b@0', block: 'b', drainMs: 90 },
      { instance: 'a@0', block: 'a', drainMs: 80 },
      { instance: 'c@0', block: 'c', drainMs: 70 },
      { instance: 'x@0', block: 'x', drainMs: 60 },
      { instance: 'e@0', block: 'e', drainMs: 50 },
      ...Array.from({ length: 14 }, (_, i) => ({ instance: `idle${i}`, block: `idle${i}`, drainMs: 0 })),
    ];
    const surrogates = new Set(['a', 'b', 'c', 'x', 'e', 'h']);
    // 20 instances → budget 2: h is last, b is taken, a/c/x neighbour b, e is next.
    expect(selectSpeculation(cands, chains, surrogates).map((c) => c.instance)).toEqual(['b@0', 'e@0']);
    expect(selectSpeculation(cands, chains, new Set(['c', 'x'])).map((c) => c.instance)).toEqual(['c@0', 'x@0']);
    expect(selectSpeculation([], chains, surrogates)).toEqual([]);
    expect(() => selectSpeculation(cands, chains, surrogates, 1.5)).toThrow(ServingInvalidError);
  });

  it('holds its rules on random chains (seeded)', () => {
    const rand = mulberry32(3);
    for (let trial = 0; trial < 200; trial++) {
      const blocks = Array.from({ length: 3 + Math.floor(rand() * 10) }, (_, i) => `b${i}`);
      const chains = Array.from({ length: 1 + Math.floor(rand() * 4) }, () => Array.from({ length: 2 + Math.floor(rand() * 5) }, () => blocks[Math.floor(rand() * blocks.length)]!).filter((b, i, a) => i === 0 || a[i - 1] !== b));
      const cands = blocks.flatMap((b) => Array.from({ length: 1 + Math.floor(rand() * 2) }, (_, k) => ({ instance: `${b}@${k}`, block: b, drainMs: Math.floor(rand() * 50) })));
      const surrogates = new Set(blocks.filter(() => rand() < 0.6));
      const fraction = rand() * 0.5;
      const chosen = selectSpeculation(cands, chains, surrogates, fraction);
      expect(chosen.length).toBeLessThanOrEqual(Math.ceil(fraction * cands.length));
      const blocksChosen = new Set(chosen.map((c) => c.block));
      for (const c of chosen) {
        expect(surrogates.has(c.block)).toBe(true);
        for (const chain of chains) {
          expect(chain.at(-1)).not.toBe(c.block);
          chain.forEach((b, i) => {
            if (b === c.block && i + 1 < chain.length && chain[i + 1] !== b) expect(blocksChosen.has(chain[i + 1]!)).toBe(false);
          });
        }
      }
      // Drain order: a skipped eligible candidate never outranks a chosen one unless a rule excluded it.
      for (let i = 1; i < chosen.length; i++) expect(chosen[i]!.drainMs).toBeLessThanOrEqual(chosen[i - 1]!.drainMs);
    }
  });
});

describe('SpeculationLedger (algorithm 5.8)', () => {
  it('refuses the last block and a block adjacent to an open speculation', () => {
    const ledger = new SpeculationLedger();
    expect(() => ledger.open('r', 0, 4, 5)).toThrow(/last block/);
    ledger.open('r', 0, 1, 5);
    expect(() => ledger.open('r', 0, 2, 5)).toThrow(ServingStateError);
    expect(() => ledger.open('r', 0, 0, 5)).toThrow(/adjacent/);
    ledger.open('r', 0, 3, 5);
    ledger.open('s', 0, 2, 5); // another request is independent
  });

  it('commits at cosine ≥ 0.95 (the threshold itself accepts) and keeps the early downstream work', () => {
    const ledger = new SpeculationLedger();
    const tag = ledger.open('r', 0, 1, 4);
    ledger.record({ request: 'r', iteration: 0, position: 1, instance: 'x', block: 'X', kvTokens: 1 });
    const down = ledger.record({ request: 'r', iteration: 0, position: 2, instance: 'y', block: 'Y', kvTokens: 1 });
    expect(down.dependsOn).toEqual([tag]);
    expect(ledger.canRelease('r', 0)).toBe(false);
    expect(ledger.verify(tag, 0.95)).toEqual({ tag, accepted: true, committedSteps: 1 });
    expect(ledger.canRelease('r', 0)).toBe(true);
    expect(ledger.finalSteps('r', 0).map((s) => s.position)).toEqual([1, 2]);
    expect(ledger.stats()).toEqual({ speculations: 1, accepted: 1, rolledBack: 0, droppedSteps: 0 });
  });

  it('aborts below 0.95: drops exactly the tentative steps, lists their KV to truncate, and aborts tags opened downstream', () => {
    const ledger = new SpeculationLedger();
    const t1 = ledger.open('r', 2, 1, 6);
    ledger.record({ request: 'r', iteration: 2, position: 0, instance: 'e', block: 'E', kvTokens: 0 });
    ledger.record({ request: 'r', iteration: 2, position: 1, instance: 'x', block: 'X', kvTokens: 1 });
    ledger.record({ request: 'r', iteration: 2, position: 2, instance: 'y', block: 'Y', kvTokens: 1 });
    const t2 = ledger.open('r', 2, 3, 6);
    ledger.record({ request: 'r', iteration: 2, position: 3, instance: 'z', block: 'Z', kvTokens: 1 });
    ledger.record({ request: 'r', iteration: 2, position: 4, instance: 'f', block: 'F', kvTokens: 0 });
    const v = ledger.verify(t1, 0.9499);
    if (v.accepted) throw new Error('expected a rollback');
    expect(v.resumeAt).toBe(2);
    expect(v.abortedTags).toEqual([t2]);
    expect(v.dropped.map((s) => s.position)).toEqual([2, 3, 4]);
    expect(v.truncate).toEqual([
      { instance: 'z', block: 'Z', request: 'r', tokens: 1 },
      { instance: 'y', block: 'Y', request: 'r', tokens: 1 },
    ]);
    expect(ledger.finalSteps('r', 2).map((s) => s.position)).toEqual([0, 1]);
    expect(ledger.canRelease('r', 2)).toBe(true);
    expect(() => ledger.verify(t1, 1)).toThrow(/no tag/);
  });

  it('meanRowCosine is the mean per-row cosine (A18)', () => {
    expect(meanRowCosine([1, 0, 0, 1], [1, 0, 0, 1], 2)).toBeCloseTo(1, 12);
    expect(meanRowCosine([1, 0, 0, 1], [1, 0, 1, 0], 2)).toBeCloseTo(0.5, 12);
    expect(meanRowCosine([3, 4], [-3, -4], 2)).toBeCloseTo(-1, 12);
    expect(() => meanRowCosine([1, 2, 3], [1, 2, 3], 2)).toThrow(ServingInvalidError);
  });
});

// ─── Forced mispredictions roll back to exactly the non-speculative state ──────────────────────────────────────

/**
 * A toy chain whose every block's output depends on its input and on how many KV positions the block holds for the
 * request (as attention does): a tentative KV append that survived a rollback, or a step on a wrong input that was
 * kept, changes every later token. Tokens are 16-bit hashes.
 */
interface Run {
  tokens: Map<string, number[]>;
  kv: Map<string, number | null>;
  stats: ReturnType<SpeculationLedger['stats']> | null;
  finals: Map<string, number[][]>;
}

const CHAIN = ['emb', 'att0', 'ffn0', 'att1', 'ffn1', 'att2', 'head'];
const HAS_KV = new Set(['att0', 'att1', 'att2']);

function runChain(seed: number, speculate: boolean): Run {
  const rand = mulberry32(seed);
  const kv = new KvCoordinator({ clock: new ManualClock() });
  const ledger = new SpeculationLedger();
  const requests = Array.from({ length: 6 }, (_, i) => ({ id: `r${i}`, prompt: 1 + Math.floor(rand() * 30), maxTokens: 1 + Math.floor(rand() * 6) }));
  const specRand = mulberry32(seed ^ 0x5eed);
  const tokens = new Map<string, number[]>();
  const finals = new Map<string, number[][]>();
  const step = (request: string, iteration: number, position: number, input: number, newTokens: number): number => {
    const block = CHAIN[position]!;
    const instance = `${block}@d${position % 2}`;
    const before = HAS_KV.has(block) ? kv.tokensAt(request, block, instance) ?? 0 : 0;
    if (HAS_KV.has(block)) kv.append(request, block, instance, newTokens);
    if (speculate) ledger.record({ request, iteration, position, instance, block, kvTokens: HAS_KV.has(block) ? newTokens : 0 });
    return fnv1a32(`${block}|${input}|${before}`) & 0xffff;
  };
  for (const r of requests) {
    const out: number[] = [];
    let input = r.prompt * 7919;
    for (let iteration = 0; iteration < r.maxTokens; iteration++) {
      const newTokens = iteration === 0 ? r.prompt : 1;
      const pending: { tag: string; position: number; real: number; verifyIn: number; hit: boolean }[] = [];
      let cur = input;
      let position = 0;
      while (position < CHAIN.length || pending.length > 0) {
        if (position < CHAIN.length) {
          const y = step(r.id, iteration, position, position === 0 ? input : cur, newTokens);
          cur = y;
          for (const p of pending) p.verifyIn--;
          const adjacentOpen = pending.some((p) => Math.abs(p.position - position) <= 1);
          if (speculate && position < CHAIN.length - 1 && !adjacentOpen && specRand() < 0.5) {
            const tag = ledger.open(r.id, iteration, position, CHAIN.length);
            const hit = specRand() < 0.5;
            // The successor starts on the surrogate's prediction: exact on a hit, wrong on a miss.
            cur = hit ? y : (y ^ 0x5a5a) & 0xffff;
            pending.push({ tag, position, real: y, verifyIn: Math.floor(specRand() * (CHAIN.length - position)), hit });
          }
          position++;
        }
        // The real block finishes: verify the oldest pending speculation when its time has come (or the chain ran out).
        const due = pending[0];
        if (due && (due.verifyIn <= 0 || position >= CHAIN.length)) {
          pending.shift();
          const v = ledger.verify(due.tag, due.hit ? 0.99 : 0.4);
          if (!v.accepted) {
            for (const t of v.truncate) kv.truncate(t.request, t.block, t.instance, kv.tokensAt(t.request, t.block, t.instance)! - t.tokens);
            for (const aborted of v.abortedTags) pending.splice(pending.findIndex((p) => p.tag === aborted), 1);
            position = v.resumeAt;
            cur = due.real;
          }
        }
      }
      if (speculate) {
        expect(ledger.canRelease(r.id, iteration)).toBe(true);
        const steps = ledger.finalSteps(r.id, iteration);
        expect(steps.map((s) => s.block)).toEqual(CHAIN);
        finals.set(`${r.id}#${iteration}`, [steps.map((s) => s.position)]);
        ledger.retire(r.id, iteration);
      }
      out.push(cur);
      input = cur;
    }
    tokens.set(r.id, out);
  }
  const kvState = new Map<string, number | null>();
  for (const r of requests) for (const [p, b] of CHAIN.entries()) if (HAS_KV.has(b)) kvState.set(`${r.id}/${b}`, kv.tokensAt(r.id, b, `${b}@d${p % 2}`));
  kv.audit();
  return { tokens, kv: kvState, stats: speculate ? ledger.stats() : null, finals };
}

describe('speculation with forced mispredictions (behaviour 23, bookkeeping level)', () => {
  it('rolls back to exactly the non-speculative tokens and KV, keeping accepted early work', () => {
    let rolledBack = 0;
    let accepted = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const plain = runChain(seed, false);
      const spec = runChain(seed, true);
      expect(spec.tokens).toEqual(plain.tokens);
      expect(spec.kv).toEqual(plain.kv);
      rolledBack += spec.stats!.rolledBack;
      accepted += spec.stats!.accepted;
    }
    expect(rolledBack).toBeGreaterThan(0);
    expect(accepted).toBeGreaterThan(0);
  });

  it('is deterministic per seed', () => {
    expect(runChain(21, true)).toEqual(runChain(21, true));
  });
});

/**
 * Synthetic text for the demo and the tests (hmi.md §4.2: synthetic domains as skewed token streams with
 * domain-specific frequent phrases). A general corpus for the root; per domain a corpus mixing everyday filler with
 * the domain's phrases; per tenant a small labelled task whose label is signalled by cue words, as a topic or
 * intent classifier's would be. Seeded: the same arguments give the same texts.
 */
import { mulberry32 } from '@tessera/core';

const FILLER = [
  'the', 'a', 'of', 'and', 'to', 'in', 'is', 'it', 'that', 'was', 'for', 'on', 'with', 'as', 'at', 'by', 'this',
  'from', 'they', 'we', 'one', 'all', 'there', 'their', 'time', 'people', 'day', 'old', 'new', 'good', 'small',
  'long', 'first', 'every', 'water', 'town', 'house', 'road', 'morning', 'work', 'year', 'city', 'market', 'train',
];

export const DEMO_DOMAINS = {
  bio: {
    phrases: ['the cell wall', 'a protein chain', 'the blood test', 'green plant leaves', 'the small seed', 'river water samples', 'the animal body'],
    cues: [
      ['plant', 'garden', 'seed', 'leaves'],
      ['blood', 'body', 'heart', 'doctor'],
      ['river', 'fish', 'sea', 'water'],
    ],
  },
  eco: {
    phrases: ['the market price', 'the bank rate', 'a small business', 'the city budget', 'money and work', 'the trade road', 'the price of bread'],
    cues: [
      ['price', 'market', 'buy', 'sell'],
      ['bank', 'money', 'pay', 'rate'],
      ['work', 'job', 'hours', 'office'],
    ],
  },
} as const;

export type DemoDomain = keyof typeof DEMO_DOMAINS;

export const DEMO_LABELS: Readonly<Record<DemoDomain, readonly string[]>> = {
  bio: ['botany', 'medicine', 'marine'],
  eco: ['trade', 'finance', 'labour'],
};

const pick = <T>(rand: () => number, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

function sentence(rand: () => number, words: number, extra: readonly string[] = []): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(pick(rand, FILLER));
  for (const e of extra) out.splice(Math.floor(rand() * (out.length + 1)), 0, e);
  return out.join(' ');
}

/** The root's general corpus. */
export function generalCorpus(texts = 60, seed = 1): string[] {
  const rand = mulberry32(seed);
  return Array.from({ length: texts }, () => sentence(rand, 6 + Math.floor(rand() * 6)));
}

/** A domain corpus: filler with the domain's phrases, the frequent ones (Zipf-like) far more often. */
export function domainCorpus(domain: DemoDomain, texts = 80, seed = 2): string[] {
  const rand = mulberry32(seed * 7919 + domain.length);
  const { phrases } = DEMO_DOMAINS[domain];
  return Array.from({ length: texts }, () => {
    const n = 1 + Math.floor(rand() * 2);
    // Phrase k drawn with weight 1/(k+1): the first few dominate, as a domain's jargon does.
    const chosen = Array.from({ length: n }, () => {
      let r = rand() * phrases.reduce((s, _, k) => s + 1 / (k + 1), 0);
      for (let k = 0; k < phrases.length; k++) {
        r -= 1 / (k + 1);
        if (r <= 0) return phrases[k]!;
      }
      return phrases[0]!;
    });
    return sentence(rand, 4 + Math.floor(rand() * 5), chosen);
  });
}

/** A tenant's labelled task on a domain: `examples` texts, each with one cue word of its label. */
export function tenantTask(domain: DemoDomain, examples = 24, seed = 3): { labels: string[]; examples: { text: string; label: string }[] } {
  const rand = mulberry32(seed * 104_729 + domain.length);
  const labels = [...DEMO_LABELS[domain]];
  const { cues } = DEMO_DOMAINS[domain];
  return {
    labels,
    examples: Array.from({ length: examples }, (_, i) => {
      const k = i % labels.length;
      return { text: sentence(rand, 3 + Math.floor(rand() * 4), [pick(rand, cues[k]!)]), label: labels[k]! };
    }),
  };
}

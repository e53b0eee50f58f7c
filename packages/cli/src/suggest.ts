/** "Did you mean …?" for a mistyped command or server name: the closest candidate by edit distance, if close. */

/**
 * Edit distance with adjacent transpositions (optimal string alignment): insertions, deletions, substitutions
 * and swaps of two neighbouring letters each cost 1, so "sevre" is one edit from "serve".
 */
export function editDistance(a: string, b: string): number {
  if (a === b) return 0;
  if (a.length === 0) return b.length;
  if (b.length === 0) return a.length;
  let before: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      let d = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2]! + 1);
      row.push(d);
    }
    before = prev;
    prev = row;
  }
  return prev[b.length]!;
}

/**
 * The candidate `input` most likely meant: one it starts (two letters at least: "ben" → "bench"), else the closest
 * by edit distance when at most a third of the longer name's letters away (at least 1; ties go to the earlier
 * candidate). Case is ignored. Null when nothing is close.
 */
export function didYouMean(input: string, candidates: readonly string[]): string | null {
  const typed = input.toLowerCase();
  if (typed.length >= 2) {
    const prefixed = candidates.find((c) => c.toLowerCase().startsWith(typed));
    if (prefixed !== undefined) return prefixed;
  }
  let best: string | null = null;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const c of candidates) {
    const d = editDistance(typed, c.toLowerCase());
    const limit = Math.max(1, Math.floor(Math.max(typed.length, c.length) / 3));
    if (d <= limit && d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * Prefix-cache keys of KV pages (vLLM's automatic prefix caching, with the adapter in the hash as vLLM PR #3263
 * puts it): the key of page i of a sequence is a SHA-256 over the key of page i − 1 and the page's tokens, and
 * page 0 chains from a root that names the adapter's identity (the base model, or an adapter name together with
 * the version of its weights). So two pages share a key only when every token up to the end of the page and the
 * weights that computed their K/V are the same: never across adapters, never across a same-name reload.
 */
import { createHash } from 'node:crypto';

/** Bumped when the key derivation changes, so keys of two derivations never meet. */
const KEY_VERSION = 'tessera-prefix-v1';

/** The root key of an adapter identity (null = the base model). */
export function prefixRootKey(identity: string | null): string {
  const h = createHash('sha256').update(KEY_VERSION);
  if (identity === null) h.update('\0base');
  else h.update('\0adapter\0').update(identity);
  return h.digest('base64');
}

/** The key of a page: its parent's key and its tokens (little-endian int32). */
export function pageKey(parent: string, tokens: ArrayLike<number>): string {
  const bytes = new Int32Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) bytes[i] = tokens[i]!;
  return createHash('sha256').update(parent).update(new Uint8Array(bytes.buffer)).digest('base64');
}

/**
 * The page keys of one sequence, computed as its tokens become known and kept across steps (and across a
 * preemption, while the adapter identity stays the same).
 */
export class PrefixKeyChain {
  readonly root: string;
  private readonly keys: string[] = [];

  constructor(
    readonly identity: string | null,
    private readonly pageSize: number,
  ) {
    this.root = prefixRootKey(identity);
  }

  /** Keys of the first `pages` full pages; `tokenAt(p)` gives the token at position p (p < pages × pageSize). */
  upTo(pages: number, tokenAt: (position: number) => number): readonly string[] {
    const P = this.pageSize;
    const page = new Array<number>(P);
    while (this.keys.length < pages) {
      const i = this.keys.length;
      for (let j = 0; j < P; j++) page[j] = tokenAt(i * P + j);
      this.keys.push(pageKey(i === 0 ? this.root : this.keys[i - 1]!, page));
    }
    return this.keys.length === pages ? this.keys : this.keys.slice(0, pages);
  }
}

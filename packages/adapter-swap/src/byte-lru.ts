/**
 * One tier of the cache: values with byte sizes, in least-recently-used order. A Map keeps insertion order, so
 * "touch" is delete + set and the first key is the least recently used; no clock is needed to order entries,
 * which keeps eviction order exact even when a fake clock returns the same time twice.
 */
export class ByteLru<V> {
  private readonly items = new Map<string, { value: V; bytes: number }>();
  private total = 0;

  /** Sum of the bytes of every value held. */
  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.items.size;
  }

  has(key: string): boolean {
    return this.items.has(key);
  }

  /** The value, without changing its position. */
  peek(key: string): V | undefined {
    return this.items.get(key)?.value;
  }

  bytesOf(key: string): number {
    return this.items.get(key)?.bytes ?? 0;
  }

  /** Marks `key` most recently used. */
  touch(key: string): void {
    const item = this.items.get(key);
    if (!item) return;
    this.items.delete(key);
    this.items.set(key, item);
  }

  /** Inserts (or replaces) `key` as the most recently used. */
  set(key: string, value: V, bytes: number): void {
    this.delete(key);
    this.items.set(key, { value, bytes });
    this.total += bytes;
  }

  delete(key: string): { value: V; bytes: number } | undefined {
    const item = this.items.get(key);
    if (!item) return undefined;
    this.items.delete(key);
    this.total -= item.bytes;
    return item;
  }

  /** Keys, least recently used first. */
  keys(): string[] {
    return [...this.items.keys()];
  }
}

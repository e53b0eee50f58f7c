/**
 * HMI's dispatcher (hmi.md §1.10, A11), grouped by domain version: pure bookkeeping over request handles, no tensor.
 *
 * A11 appends each request to the last batch of the input queue and opens a new batch when that one is full or
 * already taken by the scheduler (sealed). Here there is one such queue per PLOT version (a tenant's domain at the
 * version it was fine-tuned on): the requests of one batch then share the PLOT chain of the lookup and the lower
 * half it stands for, which is what makes one fused lookup per batch possible. Batches still mix tenants freely:
 * that is the point of sharing the upper layers.
 *
 * `take()` seals and returns the oldest open batch over every version (by its first request's arrival), so no
 * version starves and requests leave in arrival order as far as batching allows. A batch is taken when it is full
 * or whenever the runner has a free slot (§7.4: "processes requests in batches whenever the queue is non-empty"),
 * so at low load batches are small and latency stays low.
 */

export interface DispatchBatch<R> {
  /** 0, 1, 2, … in the order batches were opened. */
  readonly id: number;
  /** The PLOT version every request of the batch reads. */
  readonly version: string;
  readonly requests: R[];
  /** Arrival number of the batch's first request. */
  readonly firstArrival: number;
  sealed: boolean;
}

export class Dispatcher<R> {
  readonly maxBatch: number;
  private readonly queues = new Map<string, DispatchBatch<R>[]>();
  private nextBatch = 0;
  private arrivals = 0;
  private waiting = 0;

  constructor(options: { maxBatch: number }) {
    if (!(Number.isInteger(options.maxBatch) && options.maxBatch >= 1)) throw new RangeError(`maxBatch must be an integer >= 1, got ${options.maxBatch}`);
    this.maxBatch = options.maxBatch;
  }

  /** Requests waiting in open batches. */
  get depth(): number {
    return this.waiting;
  }

  /** Open batches, over every version. */
  get batches(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  /** A11's onInfer: append to the version's last batch unless it is full or sealed. Returns the batch. */
  add(version: string, request: R): DispatchBatch<R> {
    const arrival = this.arrivals++;
    let queue = this.queues.get(version);
    if (!queue) {
      queue = [];
      this.queues.set(version, queue);
    }
    let last = queue[queue.length - 1];
    if (last === undefined || last.sealed || last.requests.length >= this.maxBatch) {
      last = { id: this.nextBatch++, version, requests: [], firstArrival: arrival, sealed: false };
      queue.push(last);
    }
    last.requests.push(request);
    this.waiting++;
    return last;
  }

  /** Whether some open batch is full (the runner should take it even without waiting for an idle slot). */
  hasFullBatch(): boolean {
    for (const q of this.queues.values()) if (q[0] !== undefined && q[0].requests.length >= this.maxBatch) return true;
    return false;
  }

  /** The batch `take()` would return next, left open; null when nothing waits (for prefetching its tenants). */
  peek(): DispatchBatch<R> | null {
    let best: DispatchBatch<R> | null = null;
    for (const q of this.queues.values()) {
      const head = q[0];
      if (head !== undefined && (best === null || head.firstArrival < best.firstArrival)) best = head;
    }
    return best;
  }

  /** A11's takeBatch: the oldest head batch over every version, sealed; null when nothing waits. */
  take(): DispatchBatch<R> | null {
    const best = this.peek();
    if (best === null) return null;
    const queue = this.queues.get(best.version)!;
    queue.shift();
    if (queue.length === 0) this.queues.delete(best.version);
    best.sealed = true;
    this.waiting -= best.requests.length;
    return best;
  }

  /** Removes every waiting request `drop` selects (a deleted tenant's), returning them; empty batches go. */
  remove(drop: (request: R) => boolean): R[] {
    const out: R[] = [];
    for (const [version, queue] of this.queues) {
      for (const batch of queue) {
        const keep = batch.requests.filter((r) => !drop(r));
        if (keep.length !== batch.requests.length) {
          out.push(...batch.requests.filter(drop));
          batch.requests.length = 0;
          batch.requests.push(...keep);
        }
      }
      const left = queue.filter((b) => b.requests.length > 0);
      if (left.length === 0) this.queues.delete(version);
      else this.queues.set(version, left);
    }
    this.waiting -= out.length;
    return out;
  }
}

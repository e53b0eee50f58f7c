/**
 * A per-task readers-writer gate. Classify requests are readers (any number of them share a task while their
 * queries wait in the batch window and run); load, unload and delete are writers (alone on the task). Admission is
 * first-come, first-served: a writer waits for the readers ahead of it, and readers that arrive after a waiting
 * writer wait behind it, so an unload is never starved by a stream of classifies, and a classify never runs on a
 * task that an earlier unload is taking away.
 */
export class TaskGate {
  private readers = 0;
  private writer = false;
  private readonly queue: { exclusive: boolean; admit: () => void }[] = [];

  /** True while nothing holds or waits for the gate (the gate can be dropped). */
  get idle(): boolean {
    return this.readers === 0 && !this.writer && this.queue.length === 0;
  }

  /** Runs `fn` alongside other readers, after every writer queued before it. */
  async shared<T>(fn: () => Promise<T> | T): Promise<T> {
    await this.enter(false);
    try {
      return await fn();
    } finally {
      this.readers--;
      this.admit();
    }
  }

  /** Runs `fn` alone, after every reader and writer queued before it. */
  async exclusive<T>(fn: () => Promise<T> | T): Promise<T> {
    await this.enter(true);
    try {
      return await fn();
    } finally {
      this.writer = false;
      this.admit();
    }
  }

  private enter(exclusive: boolean): Promise<void> {
    if (this.queue.length === 0 && !this.writer && (!exclusive || this.readers === 0)) {
      this.take(exclusive);
      return Promise.resolve();
    }
    return new Promise((resolve) => this.queue.push({ exclusive, admit: resolve }));
  }

  private take(exclusive: boolean): void {
    if (exclusive) this.writer = true;
    else this.readers++;
  }

  /** Admits the queue's head: one writer once the gate is free, or every reader up to the next writer. */
  private admit(): void {
    while (this.queue.length > 0 && !this.writer) {
      const next = this.queue[0]!;
      if (next.exclusive && this.readers > 0) return;
      this.queue.shift();
      this.take(next.exclusive);
      next.admit();
      if (next.exclusive) return;
    }
  }
}

/** Gates by task id, created on first use and dropped when idle. */
export class TaskGates {
  private readonly gates = new Map<string, TaskGate>();

  shared<T>(id: string, fn: () => Promise<T> | T): Promise<T> {
    return this.run(id, (gate) => gate.shared(fn));
  }

  exclusive<T>(id: string, fn: () => Promise<T> | T): Promise<T> {
    return this.run(id, (gate) => gate.exclusive(fn));
  }

  private async run<T>(id: string, use: (gate: TaskGate) => Promise<T>): Promise<T> {
    let gate = this.gates.get(id);
    if (!gate) this.gates.set(id, (gate = new TaskGate()));
    try {
      return await use(gate);
    } finally {
      if (gate.idle && this.gates.get(id) === gate) this.gates.delete(id);
    }
  }
}

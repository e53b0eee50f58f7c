/**
 * Punica's scheduler behaviours (punica.md §13, T19–T23) with the real PunicaScheduler, ClientStreams and
 * batchers on simulated GPUs under virtual time. Steps take a constant 10 ms, so every time below is exact.
 */
import type { ClientStream, GenerateRequest } from '@tessera/cluster';
import { describe, expect, it } from 'vitest';
import { type ClientOutcome, LinearLatencyModel, SimCluster, simulatedGeneration, simulatedPrompt } from '../src/index.js';

const every10ms = new LinearLatencyModel({ interceptMs: 10, perDecodeRowMs: 0, perPrefillTokenMs: 0, perKvTokenMs: 0 });

let salt = 0;
const request = (id: string, output: number, promptTokens = 4): GenerateRequest => ({
  id,
  adapter: `lora-${id}`,
  prompt: simulatedPrompt(promptTokens, salt++),
  maxTokens: output,
  sampling: {},
  stop: [],
  ignoreEos: true,
});

function cluster(options: { gpus: number; maxBatch: number; kvTokensPerGpu: number | number[]; idleReleaseMs?: number }) {
  const sim = new SimCluster({ latency: every10ms, lightlyLoadedFraction: 0.5, ...options });
  const placed: { id: string; hostId: string; at: number; migrated: boolean; generated: number; batchBefore: Record<string, number> }[] = [];
  sim.scheduler.on('placed', (p) => {
    // Emitted once the scheduler counted the placement: the target's batch before it is one less.
    const batchBefore = Object.fromEntries(sim.scheduler.snapshot().hosts.map((h) => [h.id, h.batch - (h.id === p.hostId ? 1 : 0)]));
    placed.push({ id: p.id, hostId: p.hostId, at: p.at, migrated: p.migrated, generated: p.generated, batchBefore });
  });
  const outcomes = new Map<string, { stream: ClientStream; outcome: ClientOutcome }>();
  sim.onClientDone = (stream, outcome) => outcomes.set(stream.id, { stream, outcome });
  return { sim, placed, outcomes };
}

describe('T19 placement', () => {
  it('the largest batch below the cap wins, ties to the highest id; a GPU at the cap or short of KV is skipped; then FCFS', () => {
    // gpu-2 has 4 pages of KV: room for the short requests, not for a 56-token prompt.
    const { sim, placed, outcomes } = cluster({ gpus: 3, maxBatch: 2, kvTokensPerGpu: [4096, 4096, 64] });
    const requests = [request('r0', 8), request('big', 30, 56), request('r1', 8), request('r2', 5), request('r3', 30), request('r4', 30), request('r5', 30)];
    for (const r of requests) sim.submit(r);
    expect(placed.map((p) => `${p.id}→${p.hostId}`)).toEqual([
      'r0→gpu-2', // all empty: tie → highest id
      'big→gpu-1', // gpu-2 has the larger batch but not the KV (4 pages for 57 tokens; r0's prefill holds 1)
      'r1→gpu-2', // gpu-2 (1) ties gpu-1 (1): highest id
      'r2→gpu-1', // gpu-2 is at the cap
      'r3→gpu-0',
      'r4→gpu-0',
    ]);
    expect(sim.scheduler.snapshot().queue).toEqual(['r5']);
    sim.queue.run(1);
    // A newcomer never overtakes the queue.
    const r6 = request('r6', 3);
    requests.push(r6);
    sim.submit(r6);
    expect(sim.scheduler.snapshot().queue).toEqual(['r5', 'r6']);
    sim.queue.run();
    // gpu-1: big's prefill 0–10, r2's 10–20, r2's 5th token at 60: its slot goes to the head, r5. Then r0 (8 tokens,
    // 10…80 on gpu-2) finishes and r6 takes that slot.
    expect(placed.slice(6).map((p) => `${p.id}→${p.hostId}@${p.at}`)).toEqual(['r5→gpu-1@60', 'r6→gpu-2@80']);
    for (const r of requests) {
      const done = outcomes.get(r.id)!;
      expect(done.outcome.kind).toBe('finish');
      expect(done.stream.delivered).toEqual(simulatedGeneration(r.prompt, r.maxTokens));
    }
    sim.dispose();
  });
});

describe('T20 consolidation', () => {
  it('on a ramp-down the lightly loaded GPU drains to zero and stays idle; new arrivals go to busy GPUs', () => {
    const { sim, placed, outcomes } = cluster({ gpus: 3, maxBatch: 4, kvTokensPerGpu: 4096 });
    // Twelve requests fill the cluster: long ones on gpu-2, medium on gpu-1, short on gpu-0 (placement order).
    const first = [300, 330, 360, 400, 100, 130, 160, 190, 20, 25, 30, 35].map((out, k) => request(`first${k}`, out));
    for (const r of first) sim.submit(r);
    expect(placed.map((p) => p.hostId)).toEqual([...Array(4).fill('gpu-2'), ...Array(4).fill('gpu-1'), ...Array(4).fill('gpu-0')]);
    // Then a light trickle: one 20-token request every 150 ms until t = 2950.
    const trickle: GenerateRequest[] = [];
    for (let t = 100; t <= 3000; t += 150) {
      const r = request(`t${t}`, 20);
      trickle.push(r);
      sim.queue.schedule(t, () => sim.submit(r));
    }
    sim.queue.run();

    // Every placement: the largest batch below the cap (KV is plentiful), ties to the highest id.
    for (const p of placed) {
      const open = Object.entries(p.batchBefore).filter(([, b]) => b < 4);
      const best = open.reduce((a, c) => (c[1] > a[1] || (c[1] === a[1] && c[0] > a[0]) ? c : a));
      expect(p.hostId, `${p.id} at ${p.at}`).toBe(best[0]);
    }
    // gpu-0 went idle for good long before the trickle ended: every later arrival went to a busy GPU.
    const gpu0 = sim.gpu('gpu-0')!;
    const lastIdle = gpu0.idlePeriods[gpu0.idlePeriods.length - 1]!;
    expect(lastIdle.endMs).toBeNull();
    expect(lastIdle.startMs).toBeLessThan(2000);
    const later = placed.filter((p) => p.at > lastIdle.startMs);
    expect(later.length).toBeGreaterThan(8);
    for (const p of later) {
      expect(p.hostId).not.toBe('gpu-0');
      expect(p.batchBefore[p.hostId]).toBeGreaterThan(0);
    }
    // Every request still got exactly its tokens.
    for (const r of [...first, ...trickle]) expect(outcomes.get(r.id)?.stream.delivered).toEqual(simulatedGeneration(r.prompt, r.maxTokens));
    sim.dispose();
  });
});

describe('T21 migration', () => {
  it('KV exhaustion evicts the newest request, which is placed again elsewhere and continues without a gap or duplicate', () => {
    // gpu-1 has 10 pages; 8 requests of 8 + 60 tokens (5 pages each at the end) cannot all grow there.
    const { sim, placed, outcomes } = cluster({ gpus: 2, maxBatch: 8, kvTokensPerGpu: [4096, 160] });
    const requests = Array.from({ length: 8 }, (_, k) => request(`m${k}`, 60, 8));
    const streams = new Map(requests.map((r) => [r.id, sim.submit(r)]));
    expect(new Set(placed.map((p) => p.hostId))).toEqual(new Set(['gpu-1']));
    const evictions: { id: string; at: number; generated: number; newestRunning: string | undefined }[] = [];
    sim.scheduler.on('evicted', (e) => {
      // What ran on gpu-1 just before the eviction: the victim plus what the scheduler still has there, among the
      // requests that had started (delivered a token there), in placement order.
      const running = placed.filter(
        (p) => p.hostId === 'gpu-1' && (p.id === e.id || sim.scheduler.locate(p.id)?.hostId === 'gpu-1') && streams.get(p.id)!.delivered.length > p.generated,
      );
      evictions.push({ id: e.id, at: e.at, generated: e.generated, newestRunning: running.at(-1)?.id });
      expect(streams.get(e.id)!.delivered.length).toBe(e.generated);
    });
    sim.queue.run();

    expect(evictions.length).toBeGreaterThan(0);
    for (const e of evictions) {
      expect(e.id).toBe(e.newestRunning);
      // Cancel precedes add: the next placement of the evicted request comes after the eviction, on gpu-0, and
      // prefills prompt + every token the client already has.
      const again = placed.find((p) => p.id === e.id && p.migrated && p.at >= e.at)!;
      expect(again.hostId).toBe('gpu-0');
      expect(again.generated).toBe(e.generated);
      expect(e.generated).toBeGreaterThan(0);
    }
    for (const r of requests) {
      const done = outcomes.get(r.id)!;
      expect(done.outcome.kind).toBe('finish');
      expect(done.stream.delivered).toEqual(simulatedGeneration(r.prompt, 60));
      expect(done.outcome.kind === 'finish' && done.outcome.result.tokens).toEqual(simulatedGeneration(r.prompt, 60));
    }
    expect(sim.gpus.map((g) => g.cache.usedPages)).toEqual([0, 0]);
    sim.dispose();
  });
});

describe('T23 autoscale signals', () => {
  it('needHost when no GPU is lightly loaded (or requests queue); releasable once idle for idleReleaseMs', () => {
    const { sim } = cluster({ gpus: 3, maxBatch: 4, kvTokensPerGpu: 4096, idleReleaseMs: 1000 });
    const signal = () => sim.scheduler.autoscale();
    expect(signal()).toEqual({ needHost: false, releasable: [], lightlyLoaded: ['gpu-0', 'gpu-1', 'gpu-2'] });
    sim.queue.run(1000);
    expect(signal().releasable).toEqual(['gpu-2', 'gpu-1', 'gpu-0']);
    let n = 0;
    const submit = (count: number) => {
      for (let i = 0; i < count; i++) sim.submit(request(`a${n++}`, 500));
    };
    submit(6); // gpu-2: 4, gpu-1: 2 (not below 0.5 × 4), gpu-0: 0
    expect(signal()).toEqual({ needHost: false, releasable: ['gpu-0'], lightlyLoaded: ['gpu-0'] });
    submit(3); // gpu-1: 4, gpu-0: 1 (lightly loaded, no longer idle)
    expect(signal()).toEqual({ needHost: false, releasable: [], lightlyLoaded: ['gpu-0'] });
    submit(1); // gpu-0: 2: no GPU is lightly loaded
    expect(signal()).toMatchObject({ needHost: true, lightlyLoaded: [] });
    submit(3); // gpu-0 full and one request queued
    expect(sim.scheduler.queued).toBe(1);
    expect(signal().needHost).toBe(true);
    sim.queue.run();
    // Each GPU turns releasable idleReleaseMs after its own last request finished; the last to finish, at `end`.
    const end = sim.queue.now();
    const idleSince = new Map(sim.scheduler.snapshot().hosts.map((h) => [h.id, h.idleSince!]));
    expect(Math.max(...idleSince.values())).toBe(end);
    const releasableAt = (t: number) => ['gpu-2', 'gpu-1', 'gpu-0'].filter((id) => t - idleSince.get(id)! >= 1000);
    expect(signal().releasable).toEqual(releasableAt(end));
    expect(releasableAt(end).length).toBeLessThan(3);
    sim.queue.run(end + 999);
    expect(signal().releasable).toEqual(releasableAt(end + 999));
    sim.queue.run(end + 1000);
    expect(signal()).toEqual({ needHost: false, releasable: ['gpu-2', 'gpu-1', 'gpu-0'], lightlyLoaded: ['gpu-0', 'gpu-1', 'gpu-2'] });
    sim.dispose();
  });
});

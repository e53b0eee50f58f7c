/**
 * The distributed cluster end to end on a real Redis: the scheduler service and a client in this process, engine
 * hosts as worker processes (test/fixtures/host-process.ts) running a tiny decoder. Every finished request is
 * checked token for token against the model run alone in this process (greedy), and every stream for indices
 * 0, 1, … n-1 (no duplicate, no gap). Hosts are paused (their step loop stopped, jobs still taken) where a test
 * needs placements to happen before any request can finish.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { Queue } from 'bullmq';
import { Redis } from 'ioredis';

import {
  type ClientStream,
  connectClusterClient,
  type GenerateRequest,
  type RedisClusterClient,
  type SchedulerEvents,
  type SchedulerService,
  startSchedulerService,
} from '../src/index.js';
import {
  type Collected,
  collect,
  deleteKeys,
  HostProcess,
  type HostProcessOptions,
  makeTinyModel,
  range,
  REDIS_URL,
  type TinyModel,
  uniquePrefix,
  waitFor,
} from './support/redis-harness.js';

type Placed = SchedulerEvents['placed'][0];

let tiny: TinyModel;
const prefix = uniquePrefix('cluster');
let service: SchedulerService;
let client: RedisClusterClient;
const hosts = new Map<string, HostProcess>();
const placed: Placed[] = [];
const queued: string[] = [];
const evicted: SchedulerEvents['evicted'][0][] = [];
const lost: SchedulerEvents['host-lost'][0][] = [];
const done: SchedulerEvents['done'][0][] = [];
let seed = 1000;

function startHost(hostId: string, options: Pick<HostProcessOptions, 'kvPages' | 'stepDelayMs' | 'reportTtlMs'> = {}): Promise<HostProcess> {
  return HostProcess.start({ modelDir: tiny.dir, hostId, url: REDIS_URL, prefix, maxBatch: 2, stepDelayMs: 6, ...options }).then((h) => {
    hosts.set(hostId, h);
    return h;
  });
}

function request(id: string, maxTokens: number, promptLength = 6): GenerateRequest {
  return tiny.request(id, promptLength, maxTokens, seed++);
}

/** Submits one request and waits until the scheduler placed or queued it, so arrival order is submission order. */
async function submitAndWait(r: GenerateRequest): Promise<ClientStream> {
  const stream = client.submit(r);
  await waitFor(`the scheduler to take ${r.id}`, () => placed.some((p) => p.id === r.id) || queued.includes(r.id));
  return stream;
}

function expectReference(r: GenerateRequest, collected: Collected): void {
  const want = tiny.reference(r);
  expect(collected.tokens).toEqual(want);
  expect(collected.indices).toEqual(range(want.length));
  expect(collected.result.tokens).toEqual(want);
  expect(collected.result.finishReason).toBe('length');
}

const placementsOf = (id: string) => placed.filter((p) => p.id === id);
const pauseAll = () => Promise.all([...hosts.values()].map((h) => h.pause()));
const resumeAll = () => Promise.all([...hosts.values()].map((h) => h.resume()));

beforeAll(async () => {
  tiny = makeTinyModel();
  service = await startSchedulerService({ url: REDIS_URL, prefix, pollMs: 50, maxBatch: 32, hostTtlMs: 1500 });
  const s = service.scheduler;
  s.on('placed', (e) => placed.push(e));
  s.on('queued', (e) => queued.push(e.id));
  s.on('evicted', (e) => evicted.push(e));
  s.on('host-lost', (e) => lost.push(e));
  s.on('done', (e) => done.push(e));
  client = await connectClusterClient({ url: REDIS_URL, prefix });
  await Promise.all(['h1', 'h2', 'h3'].map((id) => startHost(id)));
  await waitFor('the scheduler to see h1, h2, h3', () => s.hostIds().join() === 'h1,h2,h3');
});

// A test that failed half-way must not leave the next one with paused hosts.
beforeEach(() => resumeAll());

afterAll(async () => {
  await Promise.all([...hosts.values()].map((h) => h.stop()));
  await client?.close();
  await service?.close();
  await deleteKeys(REDIS_URL, prefix);
  tiny?.dispose();
});

describe('distributed cluster on Redis (BullMQ queues, request streams, host processes)', () => {
  it('places on the busiest host with room, ties to the highest id: h3, h3, h2, h2, h1, h1', async () => {
    await pauseAll();
    const requests = range(6).map((i) => request(`place-${i}`, 5));
    const streams: ClientStream[] = [];
    for (const r of requests) streams.push(await submitAndWait(r));
    expect(requests.map((r) => placementsOf(r.id).map((p) => p.hostId))).toEqual([['h3'], ['h3'], ['h2'], ['h2'], ['h1'], ['h1']]);
    expect(queued).toEqual([]);
    await resumeAll();
    const results = await Promise.all(streams.map((s) => collect(s)));
    for (let i = 0; i < requests.length; i++) expectReference(requests[i]!, results[i]!);
  });

  it('queues when every host is full and dequeues in submission order (FCFS) as capacity frees', async () => {
    await pauseAll();
    const fill = range(6).map((i) => request(`fcfs-fill-${i}`, 4 + i));
    const waiting = range(3).map((i) => request(`fcfs-wait-${i}`, 4));
    const streams: ClientStream[] = [];
    for (const r of [...fill, ...waiting]) streams.push(await submitAndWait(r));
    expect(queued).toEqual(waiting.map((r) => r.id));
    expect(service.scheduler.snapshot().queue).toEqual(waiting.map((r) => r.id));
    for (const r of waiting) expect(placementsOf(r.id)).toEqual([]);
    await resumeAll();
    const results = await Promise.all(streams.map((s) => collect(s)));
    const order = waiting.map((r) => placed.findIndex((p) => p.id === r.id));
    expect(order.every((at) => at >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    [...fill, ...waiting].forEach((r, i) => expectReference(r, results[i]!));
    queued.length = 0;
  });

  it('cancels a queued request at once and a placed one when its host confirms', async () => {
    await pauseAll();
    const fill = range(6).map((i) => request(`cancel-fill-${i}`, 60));
    const fillStreams: ClientStream[] = [];
    for (const r of fill) fillStreams.push(await submitAndWait(r));
    const waiting = request('cancel-queued', 8);
    const waitingStream = await submitAndWait(waiting);
    expect(queued).toEqual(['cancel-queued']);

    client.cancel(waiting.id);
    const queuedResult = await collect(waitingStream);
    expect(queuedResult.result.finishReason).toBe('cancelled');
    expect(queuedResult.tokens).toEqual([]);
    await waitFor('the scheduler to drop the queued request', () => service.scheduler.snapshot().queue.length === 0);

    // A placed request, mid-generation: cancelled on its host, which reports the tokens it had.
    const target = fill[0]!;
    const targetHost = placementsOf(target.id)[0]!.hostId;
    let streamed = 0;
    const targetResult = collect(fillStreams[0]!, (n) => (streamed = n));
    await resumeAll();
    await waitFor(`${target.id} to stream 3 tokens`, () => streamed >= 3);
    client.cancel(target.id);
    const cancelled = await targetResult;
    expect(cancelled.result.finishReason).toBe('cancelled');
    expect(cancelled.tokens.length).toBeLessThan(target.maxTokens);
    expect(cancelled.tokens).toEqual(tiny.reference(target).slice(0, cancelled.tokens.length));
    expect(cancelled.result.tokens).toEqual(cancelled.tokens);
    expect(done.filter((d) => d.reason === 'cancelled').map((d) => d.id)).toEqual(['cancel-queued', target.id]);
    // The host dropped it: its load report no longer holds the request.
    await waitFor(`${targetHost} to drop ${target.id}`, async () => {
      const load = (await client.hosts()).find((h) => h.hostId === targetHost);
      return !!load && !load.requests.some((p) => p.id === target.id);
    });

    const rest = await Promise.all(fillStreams.slice(1).map((s) => collect(s)));
    fill.slice(1).forEach((r, i) => expectReference(r, rest[i]!));
    queued.length = 0;
  });

  it('runs a request submitted twice (same client, another client, after it finished) once', async () => {
    const r = request('twice', 6);
    const first = client.submit(r);
    expect(client.submit(r)).toBe(first);
    const other = await connectClusterClient({ url: REDIS_URL, prefix });
    try {
      const second = other.submit(r);
      const [a, b] = await Promise.all([collect(first), collect(second)]);
      expectReference(r, a);
      expectReference(r, b);

      // Past BullMQ's job-id window (simulated by removing the finished job): the request's stream still marks it run.
      const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
      const inbox = new Queue('scheduler', { connection, prefix });
      try {
        await inbox.remove('submit.twice');
        const third = other.submit(r);
        await waitFor('the repeated submit to be processed', async () => (await inbox.getJob('submit.twice'))?.finishedOn !== undefined);
        expectReference(r, await collect(third));
      } finally {
        await inbox.close();
        connection.disconnect();
      }
      expect(placementsOf(r.id)).toHaveLength(1);
      expect(done.filter((d) => d.id === r.id)).toHaveLength(1);
    } finally {
      await other.close();
    }
  });

  it('migrates on KV exhaustion: the evicted request continues on another host with exactly the unmigrated tokens', async () => {
    // h4 is the highest id, so it takes both requests, and its 3 pages cannot hold both as they grow.
    await startHost('h4', { kvPages: 3 });
    await waitFor('the scheduler to see h4', () => service.scheduler.hasHost('h4'));
    const requests = [request('migrate-0', 40, 8), request('migrate-1', 40, 8)];
    const streams: ClientStream[] = [];
    for (const r of requests) streams.push(await submitAndWait(r));
    expect(requests.map((r) => placementsOf(r.id)[0]!.hostId)).toEqual(['h4', 'h4']);
    const results = await Promise.all(streams.map((s) => collect(s)));
    for (let i = 0; i < requests.length; i++) expectReference(requests[i]!, results[i]!);

    expect(evicted.length).toBeGreaterThan(0);
    for (const e of evicted) {
      expect(e.hostId).toBe('h4');
      expect(e.generated).toBeGreaterThan(0);
      const next = placementsOf(e.id).find((p) => p.attempt === e.attempt + 1)!;
      expect(next).toMatchObject({ migrated: true, generated: e.generated });
      expect(next.hostId).not.toBe('h4');
    }
    // Stopped cleanly, it deletes its load key: the scheduler drops it at once, with nothing to re-place.
    expect(await hosts.get('h4')!.stop()).toBe(0);
    hosts.delete('h4');
    await waitFor('the scheduler to drop h4', () => !service.scheduler.hasHost('h4'));
    expect(lost).toEqual([expect.objectContaining({ hostId: 'h4', requests: [] })]);
    lost.length = 0;
  });

  it('re-places the requests of a worker killed mid-generation; they finish elsewhere with the right tokens', async () => {
    // 100 tokens at 6 ms a step: h3 is far from done when the client has seen 3, even on a loaded machine (at 40 a
    // slow client could see its third token after h3 had already finished).
    const requests = range(3).map((i) => request(`kill-${i}`, 100));
    const streams: ClientStream[] = [];
    for (const r of requests) streams.push(await submitAndWait(r));
    expect(requests.map((r) => placementsOf(r.id)[0]!.hostId)).toEqual(['h3', 'h3', 'h2']);
    const [moved, cancelled] = [requests[0]!, requests[1]!];
    const counts = new Map<string, number>();
    const results = streams.map((s, i) => collect(s, (n) => counts.set(requests[i]!.id, n)));
    await waitFor('both requests on h3 to stream 3 tokens', () => [moved, cancelled].every((r) => (counts.get(r.id) ?? 0) >= 3));
    // Frozen, h3 cannot confirm a cancel; killed, it never will: the scheduler ends that stream itself.
    const victim = hosts.get('h3')!;
    victim.freeze();
    client.cancel(cancelled.id);
    await waitFor(`the scheduler to cancel ${cancelled.id}`, () => done.some((d) => d.id === cancelled.id));
    await victim.kill();
    hosts.delete('h3');
    expect(counts.get(moved.id)).toBeLessThan(100);

    const [movedResult, cancelledResult, otherResult] = await Promise.all(results);
    expectReference(moved, movedResult!);
    expectReference(requests[2]!, otherResult!);
    expect(cancelledResult!.result.finishReason).toBe('cancelled');
    expect(cancelledResult!.tokens).toEqual(tiny.reference(cancelled).slice(0, cancelledResult!.tokens.length));
    expect(cancelledResult!.result.tokens).toEqual(cancelledResult!.tokens);

    expect(lost).toEqual([expect.objectContaining({ hostId: 'h3', requests: [moved.id] })]);
    const again = placementsOf(moved.id).filter((p) => p.attempt > 0);
    expect(again.length).toBeGreaterThan(0);
    expect(again.every((p) => p.hostId !== 'h3' && p.generated >= 3)).toBe(true);
    expect(service.scheduler.hostIds()).toEqual(['h1', 'h2']);
  });

  it('fences a host given up for lost that was only frozen: its late writes are dropped, its stale placements cancelled', async () => {
    // Its key would live a minute: only the scheduler's hostTtlMs (1.5 s without a new report) notices it stopped.
    const zombie = await startHost('h5', { reportTtlMs: 60_000 });
    await waitFor('the scheduler to see h5', () => service.scheduler.hasHost('h5'));
    const requests = [request('zombie-0', 40), request('zombie-1', 40)];
    const streams: ClientStream[] = [];
    for (const r of requests) streams.push(await submitAndWait(r));
    expect(requests.map((r) => placementsOf(r.id)[0]!.hostId)).toEqual(['h5', 'h5']);
    const counts = new Map<string, number>();
    const results = streams.map((s, i) => collect(s, (n) => counts.set(requests[i]!.id, n)));
    await waitFor('both requests to stream 3 tokens', () => requests.every((r) => (counts.get(r.id) ?? 0) >= 3));
    zombie.freeze();
    await waitFor('the scheduler to give h5 up', () => lost.some((l) => l.hostId === 'h5'), 10_000);
    zombie.thaw();

    const collected = await Promise.all(results);
    for (let i = 0; i < requests.length; i++) expectReference(requests[i]!, collected[i]!);
    // The thawed host went on writing attempt 0 after the fences: the clients dropped it.
    expect(streams.some((s) => s.dropped > 0)).toBe(true);
    for (const r of requests) expect(placementsOf(r.id).filter((p) => p.attempt === 1).map((p) => p.hostId)).not.toContain('h5');
    // Reporting again, it is a host again, and it is made to drop the placements it no longer has.
    await waitFor('h5 back, holding nothing', async () => {
      const load = (await client.hosts()).find((h) => h.hostId === 'h5');
      return service.scheduler.hasHost('h5') && !!load && load.requests.length === 0;
    });
    expect(await zombie.stop()).toBe(0);
    hosts.delete('h5');
  });
});

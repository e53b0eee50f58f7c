/** Helpers for the placement routes and /metrics. */
import type { FastifyInstance } from 'fastify';

import type { PlacementView } from '../../src/devices/device-set.js';
import { postJson } from './fixture.js';

export interface PlacementBody {
  provisioning: string;
  policy: string;
  transport: 'in-process' | 'bullmq';
  devices: { id: string; budgetBytes: number; residentBytes: number; utilisation: number; instances: string[] }[];
  instances: { instance: string; block: string; label: string; device: string; pool: string; bytes: number; routed: number }[];
  chains: { app: string; instances: string[]; devices: string[]; equivalents: { position: number; blocks: string[]; rejoin: number; score: number }[] }[];
  adaptive: boolean;
  speculation: PlacementView['speculation'];
  jobs: { id: string; state: string }[];
}

/**
 * An application's chain (block ids) and the chain with its first equivalent segment in place of the blocks it
 * replaces (the blocks of an adaptively served route), from GET /v1/placement.
 */
export async function substitutedChain(url: string, model: string): Promise<{ plain: string[]; blocks: string[] }> {
  const p = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
  const chain = p.chains.find((c) => c.app === model)!;
  const plain = chain.instances.map((k) => p.instances.find((i) => i.instance === k)!.block);
  const eq = chain.equivalents[0];
  if (!eq) throw new Error(`${model} has no equivalent segment`);
  return { plain, blocks: [...plain.slice(0, eq.position), ...eq.blocks, ...plain.slice(eq.rejoin)] };
}

/**
 * Two sequences of one application, the second submitted once the first has its first token (so the first one's
 * route is taken, and it still runs when the second is routed): the first generates 2 × `maxTokens`, the second
 * `maxTokens`. Returns both token lists.
 */
export async function adaptiveRun(app: FastifyInstance, model: string, prompt: number[], maxTokens: number): Promise<{ held: number[]; second: number[] }> {
  const submit = (id: string, n: number) => app.engine.submit({ request: { id, adapter: model, prompt, maxTokens: n, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] });
  const tag = Math.random().toString(36).slice(2, 8);
  const held = submit(`held-${tag}`, 2 * maxTokens);
  let second: Promise<{ tokens: number[] }> | null = null;
  let heldTokens: number[] = [];
  for await (const ev of held) {
    if (ev.type === 'token' && second === null) second = submit(`second-${tag}`, maxTokens).result();
    else if (ev.type === 'finish') heldTokens = ev.result.tokens;
    else if (ev.type === 'error') throw ev.error;
  }
  return { held: heldTokens, second: (await second!).tokens };
}

export interface JobBody {
  id: string;
  state: 'waiting' | 'active' | 'completed' | 'failed';
  result: unknown;
  error: string | null;
  transport: string;
}

/** Submits a placement job (202) and polls its status until it completed or failed. */
export async function placementJob(url: string, job: unknown, timeoutMs = 20_000): Promise<JobBody> {
  const r = await postJson(`${url}/v1/placement/jobs`, job);
  if (r.status !== 202) throw new Error(`placement job ${JSON.stringify(job)} → ${r.status} ${r.text}`);
  const id = (r.json as JobBody).id;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = (await (await fetch(`${url}/v1/placement/jobs/${id}`)).json()) as JobBody;
    if (s.state === 'completed' || s.state === 'failed') return s;
    if (Date.now() > deadline) throw new Error(`placement job ${id} still ${s.state} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The value of one series in a Prometheus text exposition. */
export function metric(text: string, series: string): number {
  const line = text.split('\n').find((l) => !l.startsWith('#') && l.slice(0, l.lastIndexOf(' ')) === series);
  if (line === undefined) throw new Error(`no series ${series} in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

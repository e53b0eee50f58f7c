/** Helpers for the placement routes and /metrics. */
import { postJson } from './fixture.js';

export interface PlacementBody {
  provisioning: string;
  policy: string;
  transport: 'in-process' | 'bullmq';
  devices: { id: string; budgetBytes: number; residentBytes: number; utilisation: number; instances: string[] }[];
  instances: { instance: string; block: string; label: string; device: string; pool: string; bytes: number; routed: number }[];
  chains: { app: string; instances: string[]; devices: string[] }[];
  jobs: { id: string; state: string }[];
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

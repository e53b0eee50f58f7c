/**
 * The README's "Serving core" example, run. Its ```ts block is, character for character, the
 * `// #region serving-readme-example` block below (the first test checks it); the second checks what it printed
 * against the README.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region serving-readme-example
import { BlockAgent, KvCoordinator, placeChains, type Topology, TrafficCounter } from '@tessera/block-zoo';

// Two servers of two devices; sizes in bytes, bandwidths in bytes per ms.
const gpu = (id: string, server: string) => ({ id, server, memoryBytes: 16e9, memBandwidth: 2e9, loadBandwidth: 25e6 });
const topology: Topology = {
  devices: [gpu('g0', 's0'), gpu('g1', 's0'), gpu('g2', 's1'), gpu('g3', 's1')],
  intraServer: { bandwidth: 250e6, latencyMs: 0.01 },
  interServer: { bandwidth: 12.5e6, latencyMs: 0.03 },
  schedulerServer: 's0',
};

// Two applications whose chains share the embedding and the head: one instance of every block, neighbours together.
const chains = [['embed', 'sql-attn', 'ffn', 'head'], ['embed', 'chat-attn', 'chat-ffn', 'head']];
const traffic = TrafficCounter.fromChains(chains.map((blocks) => ({ blocks })));
const placed = placeChains(topology, chains, new Map(chains.flat().map((b) => [b, 7e9])), traffic);
console.log(placed.map((p) => `${p.block}@${p.device}`).join(' '));

// The shared attention-free head's agent: returning rows before new ones, at most 3 rows a batch.
const clock = { now: () => 0 };
const head = new BlockAgent({ instance: 'head@g0', block: { blockId: 'head', paramBytes: 7e9, kvBytesPerToken: 0, activationBytesPerToken: 4096 }, clock, maxBatch: 3, memoryBytes: 1e9 });
head.arrive([{ requestId: 'a', iteration: 0, position: 3, tokens: 5, contextTokens: 0 }]);
head.complete(head.plan()!.planId, [{ requestId: 'a', finished: false, returnInMs: 40 }]);
head.arrive(['b', 'c', 'd'].map((requestId) => ({ requestId, iteration: 0, position: 3, tokens: 5, contextTokens: 0 })));
head.arrive([{ requestId: 'a', iteration: 1, position: 3, tokens: 1, contextTokens: 5 }]);
console.log(head.plan()!.rows.map((r) => `${r.requestId}:${r.cls}`).join(' '));

// Moving a request's 100 tokens of KV (7 pages) to another device: recompute the front, copy the back.
const kv = new KvCoordinator({ clock });
kv.append('a', 'sql-attn', 'sql-attn@g1', 100);
const plan = kv.planMigration([{ request: 'a', block: 'sql-attn' }], 'sql-attn@g1', 'sql-attn@g2', { copyPagesPerMs: 2, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 2 });
console.log(`recompute tokens [0, ${plan.sequences[0]!.recomputeTokens}), copy pages ${plan.sequences[0]!.copyPages.join(',')}, ${plan.estimatedMs} ms`);
// #endregion serving-readme-example

const readme = () => readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = () => /## Serving core\n([\s\S]*?)\n## /.exec(readme())![1]!;

describe('README: Serving core', () => {
  it('shows exactly the example this file runs', () => {
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region serving-readme-example\n([\s\S]*?)\/\/ #endregion serving-readme-example/.exec(source)![1]!;
    expect(/```ts\n([\s\S]*?)```/.exec(section())![1]).toBe(region);
  });

  it('prints what the README says', () => {
    const out = printed.map((args) => args.join(' ')).join('\n');
    const shown = /It prints\n\n```\n([\s\S]*?)\n```/.exec(section())![1];
    expect(out).toBe(shown);
  });
});

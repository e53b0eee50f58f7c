/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs. The example runs at
 * module load, as a reader's script would; the tests then check what it printed.
 */
import { readFileSync, rmSync } from 'node:fs';
import { allocatorStats } from '@tessera/native';
import { afterAll, describe, expect, it, vi } from 'vitest';

const inUseBefore = allocatorStats().inUse;
const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateLoraAdapter, generateModel, loadLoraAdapterAsync } from '@tessera/engine';
import { Tensor } from '@tessera/native';
import { AdapterCache, type AdapterSource } from '@tessera/adapter-swap';

// A tiny seeded Llama-style model and three PEFT LoRA adapters for it (rank 8 on q_proj and v_proj).
const root = mkdtempSync(join(tmpdir(), 'tessera-swap-'));
const { config } = generateModel(join(root, 'base'), { family: 'decoder', size: 'tiny', seed: 0 });
for (const [i, name] of ['sql', 'chat', 'math'].entries()) {
  generateLoraAdapter(join(root, name), { base: config, rank: 8, seed: i + 1 });
}

// A source says how an adapter is read into host memory and uploaded to the device. This one keeps every LoRA
// matrix as a Float32Array on the host and a native tensor on the device.
type HostMatrices = { shape: number[]; data: Float32Array }[];
const source: AdapterSource<HostMatrices, Tensor[]> = {
  async readHost(name, dir) {
    const adapter = await loadLoraAdapterAsync(dir, { name, base: config }); // validated against the model
    try {
      const matrices = [...adapter.modules.values()].flatMap((m) => [m.a, m.b]);
      return matrices.map((t) => ({ shape: t.shape, data: t.toArray() as Float32Array }));
    } finally {
      adapter.dispose();
    }
  },
  hostBytes: (host) => host.reduce((n, t) => n + t.data.byteLength, 0),
  upload: (host) => host.map((t) => Tensor.from(t.data, t.shape)),
  deviceBytes: (tensors) => tensors.reduce((n, t) => n + t.nbytes, 0),
  disposeDevice: (tensors) => tensors.forEach((t) => t.dispose()),
};

// Device room for two of the three adapters (14,336 bytes each); the host cache is unlimited by default.
const cache = new AdapterCache({ source, deviceBudgetBytes: 2 * 14_336 });
for (const name of ['sql', 'chat', 'math']) cache.register(name, join(root, name));
cache.on('loaded', (e) => console.log(`loaded ${e.name} from ${e.from}`));
cache.on('evicted', (e) => e.reason === 'budget' && console.log(`evicted ${e.name} from the ${e.tier}`));

// A request for 'sql' arrives: load it and pin it for as long as the request runs.
const sql = await cache.ensureResident('sql', { pin: true });
console.log(`sql: ${sql.length} tensors`);
await cache.ensureResident('chat');
await cache.ensureResident('math'); // evicts 'chat': 'sql' is pinned
cache.unpin('sql'); // the request is done ('sql' was used just now)
await cache.ensureResident('chat'); // from the host copy, no disk read; evicts 'math', the least recently used
const { hits, misses, loads, deviceEvictions, residentBytes } = cache.stats();
console.log({ hits, misses, loads, deviceEvictions, residentBytes });
cache.dispose(); // frees every device tensor
// #endregion readme-example

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('README', () => {
  it('shows exactly the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
    const self = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example/.exec(self)![1];
    const layerwise = readFileSync(new URL('./readme-layerwise.test.ts', import.meta.url), 'utf8');
    const layerwiseRegion = /\/\/ #region readme-layerwise\n([\s\S]*?)\/\/ #endregion readme-layerwise/.exec(layerwise)![1];
    expect(blocks).toEqual([region, layerwiseRegion]);
  });

  it('prints what its comments say, and frees everything', () => {
    expect(printed).toEqual([
      ['loaded sql from disk'],
      ['sql: 8 tensors'],
      ['loaded chat from disk'],
      ['evicted chat from the device'],
      ['loaded math from disk'],
      ['evicted math from the device'],
      ['loaded chat from host'],
      [{ hits: 0, misses: 4, loads: 4, deviceEvictions: 2, residentBytes: 2 * 14_336 }],
    ]);
    expect(allocatorStats().inUse).toBe(inUseBefore);
  });
});

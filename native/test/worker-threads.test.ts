/**
 * The addon in several JS environments of one process: the main thread and worker threads (the Punica server runs
 * its engine in a worker). Each environment keeps its own NativeTensor constructor (napi instance data); a
 * process-wide one handed workers a constructor from another environment and corrupted memory.
 */
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { addonDirectory, Tensor } from '../src/index.js';

// Plain JS, so the worker needs no TypeScript loader: it opens the CPU addon directly and makes tensors through
// both paths that use the constructor (a JS `new` and a native-created view).
const workerSource = `
const { createRequire } = require('node:module');
const { parentPort, workerData } = require('node:worker_threads');
const binding = createRequire(workerData.addon)(workerData.addon);
const results = [];
for (let i = 0; i < 200; i++) {
  const t = new binding.NativeTensor('f32', [4, 8]);
  t.write(new Float32Array(32).fill(i));
  const view = t.rowsView(1, 2);
  const out = new Float32Array(16);
  view.read(out);
  results.push(out[15]);
  view.dispose();
  t.dispose();
}
parentPort.postMessage(results[results.length - 1]);
`;

function runWorker(): Promise<number> {
  const addon = join(addonDirectory(), 'tessera_cpu.node');
  return new Promise((resolve, reject) => {
    const w = new Worker(workerSource, { eval: true, workerData: { addon } });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code !== 0 && reject(new Error(`worker exited with ${code}`)));
  });
}

describe('the addon in worker threads', () => {
  it('main thread and workers (concurrent, then sequential after exits) each get working tensors', async () => {
    const main = Tensor.from(new Float32Array([1, 2, 3, 4]), [2, 2]);
    const row = main.rows(1, 1);
    expect([...(row.toArray() as Float32Array)]).toEqual([3, 4]);
    expect(await Promise.all([runWorker(), runWorker()])).toEqual([199, 199]);
    expect(await runWorker()).toBe(199);
    // The main thread's constructor still works after workers came and went.
    const again = main.rows(0, 1);
    expect([...(again.toArray() as Float32Array)]).toEqual([1, 2]);
    for (const t of [again, row, main]) t.dispose();
  });
});

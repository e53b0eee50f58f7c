import { defineConfig } from 'tsup';

// Flat dist/: the runtime worker is its own entry (dist/runtime-worker.js), started from the chunk it was
// bundled into (same folder).
export default defineConfig({
  entry: { index: 'src/index.ts', main: 'src/main.ts', 'runtime-worker': 'src/runtimes/worker.ts' },
  format: ['esm'],
  target: 'node20',
  platform: 'node',
  dts: { entry: { index: 'src/index.ts' } },
  sourcemap: true,
  clean: true,
});

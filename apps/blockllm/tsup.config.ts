import { defineConfig } from 'tsup';

// Flat dist/: the engine worker is its own entry (dist/engine-worker.js), which EngineClient starts from the
// chunk it was bundled into (same folder).
export default defineConfig({
  entry: { index: 'src/index.ts', main: 'src/main.ts', 'engine-worker': 'src/engine/worker.ts', 'device-worker': 'src/devices/device-worker.ts' },
  format: ['esm'],
  target: 'node20',
  platform: 'node',
  dts: { entry: { index: 'src/index.ts' } },
  sourcemap: true,
  clean: true,
});

import { defineConfig } from 'tsup';

// Flat dist/: the engine runs in the server's own thread (HMI's lower layers are a table lookup, its training jobs
// yield between steps), so there is no worker entry.
export default defineConfig({
  entry: { index: 'src/index.ts', engine: 'src/engine/index.ts', main: 'src/main.ts' },
  format: ['esm'],
  target: 'node20',
  platform: 'node',
  dts: { entry: { index: 'src/index.ts', engine: 'src/engine/index.ts' } },
  sourcemap: true,
  clean: true,
});

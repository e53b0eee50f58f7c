import { defineConfig } from 'vitest/config';

// One root run drives every workspace project; 2 workers match the 2-core CI machines.
export default defineConfig({
  test: {
    projects: ['native', 'bench', 'packages/*', 'apps/*', 'tooling/layers', 'tooling/consumer', 'docs'],
    maxWorkers: 2,
  },
});

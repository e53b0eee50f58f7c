import { defineConfig } from 'vitest/config';

/**
 * Settings every package's vitest project shares. The `@tessera/source` condition makes sibling packages
 * resolve to their `src/` (see each package's `exports` map), so tests never run against a stale `dist/`.
 */
export const shared = defineConfig({
  resolve: { conditions: ['@tessera/source'] },
  ssr: { resolve: { conditions: ['@tessera/source'] } },
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    restoreMocks: true,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});

import { type Options, defineConfig } from 'tsup';

/**
 * How every Tessera package builds: ESM for Node 20 with declarations and source maps into a clean dist/.
 * `entry` lists the package's export entries (src/index.ts, plus subpath entries such as src/bench.ts).
 */
export function packageBuild(entry: Options['entry'] = ['src/index.ts'], overrides: Omit<Options, 'entry'> = {}) {
  return defineConfig({
    entry,
    format: ['esm'],
    target: 'node20',
    platform: 'node',
    dts: true,
    sourcemap: true,
    clean: true,
    ...overrides,
  });
}

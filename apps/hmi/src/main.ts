/**
 * The `tessera-hmi` command: parse flags, generate the demo when no model is given, build the server, listen, and
 * (for the demo) create its domains and tenants through the manager's jobs. SIGINT / SIGTERM close it cleanly.
 * `pnpm --filter @tessera/hmi start` runs this file from source.
 */
import { join } from 'node:path';

import { isEntryPoint, parseCommandLine, runMain } from '@tessera/server-kit';

import { parseCli, USAGE } from './config.js';
import { bootstrapDemo, defaultDemoDir, ensureDemo } from './demo.js';
import { buildServer, listen } from './server.js';

export async function main(argv: readonly string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = parseCommandLine(() => parseCli(argv, env), USAGE);
  if (typeof config === 'number') return config;
  const say = (line: string) => process.stdout.write(`[hmi] ${line}\n`);

  const { modelDir: dir, demo: serveDemo, demoDir, demoTenants, host, port, logLevel, redisUrl, redisPrefix, generalCorpus, tenantsDir: tenantsFlag, hostMb, ...serving } = config;
  let tenantsDir = tenantsFlag;
  let modelDir = dir;
  let corpus = generalCorpus;
  const demo = modelDir === undefined || serveDemo;
  if (demo) {
    const d = await ensureDemo(demoDir ?? defaultDemoDir(), say);
    if (!d.generated) say(`using the demo model in ${d.dir}`);
    modelDir = d.modelDir;
    corpus ??= d.generalCorpus;
    // The demo's tenants persist beside its model: a restart serves them without training them again.
    tenantsDir ??= join(d.dir, 'tenants');
  }

  const app = await buildServer({
    ...serving, modelDir: modelDir!, generalCorpus: corpus, logger: { level: logLevel }, tenantsDir,
    ...(hostMb !== undefined ? { hostBudgetBytes: hostMb * 1024 * 1024 } : {}),
    ...(redisUrl !== undefined ? { redis: { url: redisUrl, prefix: redisPrefix } } : {}),
  });
  const address = await listen(app, { host, port });
  const engine = app.engine;
  say(`serving ${modelDir} on ${address}: ${engine.plot.lowerLayers} lower layers as PLOT, ${engine.runner.upperLayers} upper layers with adapters; jobs ${engine.queue.mode}${redisUrl ? ` on ${redisUrl}` : ''}`);
  let example = '<tenant id>';
  if (demo) {
    const { tenants } = await bootstrapDemo(engine, demoTenants, say);
    example = tenants[0] ?? example;
  }
  process.stdout.write(
    [
      '',
      `[hmi] ${engine.manager.domains.size} domain(s), ${engine.tenants.size} tenant(s), ${engine.tenants.bytes} bytes of tenant state (${engine.tenants.tiers().diskBytes} on disk in ${engine.tenants.files.dir})`,
      '[hmi] try:',
      `  curl ${address}/v1/tenants/${example}/classify -H 'content-type: application/json' \\`,
      `    -d '{"texts": ["the blood test at the doctor", "fish in the river water"]}'`,
      `  curl ${address}/v1/domains    curl ${address}/v1/tenants/${example}    curl ${address}/metrics`,
      '[hmi] Ctrl-C stops the server (in-flight requests finish first).',
      '',
    ].join('\n'),
  );
  return 0;
}

if (isEntryPoint(import.meta.url)) void runMain(() => main(), { prefix: '[hmi]' });

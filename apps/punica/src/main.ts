/**
 * The `tessera-punica` command: parse flags, generate the demo when no model is given, then run the role: the
 * single-process server (default), or a cluster scheduler, worker or frontend on Redis (`--role`). `pnpm --filter @tessera/punica start` runs this file from source.
 */
import { isEntryPoint, parseCommandLine, runMain, stopOnSignal } from '@tessera/server-kit';

import { startClusterScheduler, startClusterWorker } from './cluster/roles.js';
import { parseCli, USAGE } from './config.js';
import { defaultDemoDir, ensureDemo } from './demo.js';
import { buildServer, discoverAdapters, listen, MIB } from './server.js';

export async function main(argv: readonly string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = parseCommandLine(() => parseCli(argv, env), USAGE);
  if (typeof config === 'number') return config;

  const redis = { url: config.redisUrl, prefix: config.clusterPrefix };
  // The scheduler needs no model: it places requests by the workers' load reports.
  if (config.role === 'scheduler') {
    const say = (line: string) => process.stdout.write(`[punica scheduler] ${line}\n`);
    const scheduler = await startClusterScheduler({
      redis,
      maxBatch: config.maxBatch,
      lightlyLoadedFraction: config.lightlyLoadedFraction,
      idleReleaseMs: config.idleReleaseSeconds * 1000,
      log: say,
    });
    say(`scheduling on ${config.redisUrl} (prefix ${config.clusterPrefix}); Ctrl-C stops it`);
    stopOnSignal(() => scheduler.close(), { prefix: '[punica]' });
    return 0;
  }

  let { modelDir, adaptersDir, modelName } = config;
  if (modelDir === undefined || config.demo) {
    const say = (line: string) => process.stdout.write(`[punica] ${line}\n`);
    const demo = ensureDemo(config.demoDir ?? defaultDemoDir(), say);
    if (!demo.generated) say(`using the demo in ${demo.dir}`);
    modelDir = demo.modelDir;
    adaptersDir = demo.adaptersDir;
    modelName = demo.modelName;
  }

  if (config.role === 'worker') {
    const say = (line: string) => process.stdout.write(`[punica worker ${config.hostId}] ${line}\n`);
    const worker = await startClusterWorker({
      redis,
      hostId: config.hostId,
      modelDir,
      adapters: adaptersDir ? discoverAdapters(adaptersDir) : [],
      maxBatch: config.maxBatch,
      kvBudgetBytes: config.kvBudgetMiB * MIB,
      adapterBudgetBytes: config.adapterBudgetMiB * MIB,
      hostAdapterBudgetBytes: config.hostAdapterBudgetMiB * MIB,
      threads: config.threads ?? null,
      weights: config.weights,
      prefixCache: config.prefixCache,
      fairness: config.fairness,
      log: say,
    });
    stopOnSignal(() => worker.close(), { prefix: '[punica]' });
    return 0;
  }

  process.stdout.write(`[punica] loading ${modelDir}${adaptersDir ? ` with the adapters in ${adaptersDir}` : ''}\n`);
  const app = await buildServer({
    modelDir,
    modelName,
    adaptersDir,
    maxBatch: config.maxBatch,
    kvBudgetMiB: config.kvBudgetMiB,
    adapterBudgetMiB: config.adapterBudgetMiB,
    hostAdapterBudgetMiB: config.hostAdapterBudgetMiB,
    threads: config.threads,
    weights: config.weights,
    prefixCache: config.prefixCache,
    fairness: config.fairness,
    adapterAdmin: config.adapterAdmin,
    adapterRoot: config.adapterRoot,
    logger: { level: config.logLevel },
    ...(config.role === 'frontend' ? { cluster: { redis } } : {}),
  });
  const address = await listen(app, { host: config.host, port: config.port });
  const adapters = app.models.adapters().map((a) => a.name);
  const example = adapters[0] ?? app.models.base.name;
  process.stdout.write(
    [
      '',
      `[punica] serving ${app.models.base.name} (${config.role === 'frontend' ? `cluster frontend on ${config.redisUrl}` : app.engine.ready.model.device}) with ${adapters.length} adapter(s) on ${address}`,
      ...(adapters.length > 0 ? [`[punica] adapters: ${adapters.join(', ')}`] : []),
      '[punica] try:',
      `  curl ${address}/v1/completions -H 'content-type: application/json' \\`,
      `    -d '{"model": "${example}", "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}'`,
      `  curl -N ${address}/v1/chat/completions -H 'content-type: application/json' \\`,
      `    -d '{"model": "${example}", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 24, "stream": true}'`,
      `  curl ${address}/v1/models    curl ${address}/metrics`,
      '[punica] Ctrl-C stops the server (in-flight requests finish first).',
      '',
    ].join('\n'),
  );
  return 0;
}

// A typed error (Redis down at start-up, a bad model directory) is printed by its message, anything else with its stack.
if (isEntryPoint(import.meta.url)) void runMain(() => main(), { prefix: '[punica]' });

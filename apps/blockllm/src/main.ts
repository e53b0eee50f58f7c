/**
 * The `tessera-blockllm` command: parse flags, generate the demo when no model is given, then serve.
 * `pnpm --filter @tessera/blockllm start` runs this file from source.
 */
import { setFlagsFromString } from 'node:v8';

import { isEntryPoint, parseCommandLine, runMain } from '@tessera/server-kit';

import { parseCli, USAGE } from './config.js';
import { defaultDemoDir, ensureDemo } from './demo.js';
import { buildServer, listen } from './server.js';

export async function main(argv: readonly string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = parseCommandLine(() => parseCli(argv, env), USAGE);
  if (typeof config === 'number') return config;
  const say = (line: string) => process.stdout.write(`[blockllm] ${line}\n`);
  // Read by each isolate as it is made: set before the engine and device workers start (DEFAULT_HEAP_GROWING_PERCENT).
  // A `node --heap-growing-percent` of the user's own wins.
  if (config.heapGrowingPercent > 0 && !process.execArgv.some((a) => a.startsWith('--heap-growing-percent'))) setFlagsFromString(`--heap-growing-percent=${config.heapGrowingPercent}`);

  let { modelDir, modelName, zooDir } = config;
  let demoRoot: string | undefined;
  if (modelDir === undefined || config.demo) {
    const demo = ensureDemo(config.demoDir ?? defaultDemoDir(), say, config.demoSize);
    if (!demo.generated) say(`using the demo in ${demo.dir}`);
    modelDir = demo.modelDir;
    modelName = demo.modelName;
    zooDir = demo.zooDir;
    demoRoot = demo.dir;
  }
  say(`loading the zoo of ${modelDir}`);
  const app = await buildServer({
    modelDir,
    modelName,
    zooDir,
    demoRoot,
    maxBatch: config.maxBatch,
    cohorts: config.cohorts,
    kvPages: config.kvPages,
    threads: config.threads,
    devices: config.devices,
    deviceBytes: config.deviceBytes ?? (config.deviceMb !== undefined ? config.deviceMb * 1024 * 1024 : undefined),
    placementPolicy: config.placementPolicy,
    scaleOutQueue: config.scaleOutQueue,
    adaptive: config.adaptive,
    variantBatching: config.variantBatching,
    cohortHomes: config.cohortHomes,
    maxQueueLen: config.maxQueue,
    kvMigration: config.kvMigration,
    speculation: config.speculate ? { acceptCosine: config.specAcceptCosine, fraction: config.specFraction } : undefined,
    provisioning: config.provisioning,
    redis: config.redis ? { url: config.redisUrl, prefix: config.redisPrefix } : undefined,
    ingestAdmin: config.ingest,
    ingestRoot: config.ingestRoot,
    logger: { level: config.logLevel },
  });
  const address = await listen(app, { host: config.host, port: config.port });
  const apps = [...app.apps.values()];
  const example = apps.find((a) => a.kind !== 'foundation')?.id ?? apps[0]!.id;
  process.stdout.write(
    [
      '',
      `[blockllm] serving ${apps.length} application(s) of ${app.engine.ready.model.foundation} as chains of shared blocks (${app.engine.ready.model.device}) on ${address}`,
      ...apps.map((a) => `[blockllm]   ${a.id.padEnd(20)} ${a.labels.join(' | ')}`),
      ...(config.devices > 1 || config.provisioning === 'per-model'
        ? [`[blockllm] ${config.devices} device(s), ${config.provisioning} provisioning, control plane ${config.redis ? `on BullMQ (${config.redisPrefix})` : 'in-process'}: curl ${address}/v1/placement`]
        : []),
      '[blockllm] try:',
      `  curl ${address}/v1/completions -H 'content-type: application/json' \\`,
      `    -d '{"model": "${example}", "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}'`,
      `  curl -N ${address}/v1/chat/completions -H 'content-type: application/json' \\`,
      `    -d '{"model": "${example}", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 24, "stream": true}'`,
      `  curl ${address}/v1/zoo/blocks    curl ${address}/metrics`,
      '[blockllm] Ctrl-C stops the server (in-flight requests finish first).',
      '',
    ].join('\n'),
  );
  return 0;
}

// A typed error (a bad model directory) is printed by its message, anything else with its stack.
if (isEntryPoint(import.meta.url)) void runMain(() => main(), { prefix: '[blockllm]' });

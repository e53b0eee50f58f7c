/**
 * The `tessera-arlo` command: parse flags, generate the demo when no model is given, then serve (in-process
 * runtime workers), or with --redis run a cluster role: a frontend (HTTP + dispatcher over per-instance queues)
 * or a worker (serves the queues of --instance-ids). `pnpm --filter @tessera/arlo start` runs this file from source.
 */
import { isEntryPoint, parseCommandLine, runMain, stopOnSignal } from '@tessera/server-kit';

import { startClusterWorker } from './cluster/queues.js';
import { parseCli, USAGE } from './config.js';
import { DEMO_LENGTHS, defaultDemoDir, ensureDemo } from './demo.js';
import { buildServer, listen } from './server.js';

export async function main(argv: readonly string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = parseCommandLine(() => parseCli(argv, env), USAGE);
  if (typeof config === 'number') return config;
  const say = (line: string) => process.stdout.write(`[arlo] ${line}\n`);

  let modelDir = config.modelDir;
  let lengths = config.lengths;
  if (modelDir === undefined || config.demo) {
    const demo = ensureDemo(config.demoDir ?? defaultDemoDir(), say);
    if (!demo.generated) say(`using the demo in ${demo.modelDir}`);
    modelDir = demo.modelDir;
    lengths ??= [...DEMO_LENGTHS];
  }
  if (lengths === undefined) {
    say('--lengths is required with --model (e.g. --lengths 64,128,256,512)');
    return 2;
  }

  if (config.role === 'worker') {
    const worker = await startClusterWorker({
      redisUrl: config.redisUrl!,
      prefix: config.clusterPrefix,
      instanceIds: config.instanceIds!,
      kind: config.runtime,
      modelDir,
      length: lengths[lengths.length - 1]!,
      maxBatch: config.maxBatch,
    });
    say(`worker serving instances ${config.instanceIds!.join(', ')} on ${config.redisUrl}; Ctrl-C stops it`);
    stopOnSignal(() => worker.close(), { prefix: '[arlo]' });
    return 0;
  }

  const app = await buildServer({
    modelDir,
    lengths,
    runtime: config.runtime,
    workers: config.workers,
    instances: config.instances,
    maxBatch: config.maxBatch,
    sloMs: config.sloMs,
    periodMs: config.periodMs,
    profileReps: config.profileReps,
    policy: config.policy,
    ...(config.serviceMs ? { serviceMs: config.serviceMs } : {}),
    ...(config.role === 'frontend' ? { cluster: { redisUrl: config.redisUrl!, prefix: config.clusterPrefix, instanceIds: config.instanceIds! } } : {}),
    logger: { level: config.logLevel },
  });
  const address = await listen(app, { host: config.host, port: config.port });
  const a = app.arlo.allocation?.result.instances ?? [];
  say(`serving ${modelDir} on ${address}: runtimes ${lengths.join(', ')} (${config.runtime}), allocation [${a.join(', ')}]`);
  say('try:');
  say(`  curl ${address}/v1/infer -H 'content-type: application/json' -d '{"text": "the quick brown fox"}'`);
  say(`  curl ${address}/v1/allocation    curl -X POST ${address}/v1/allocation/solve    curl ${address}/metrics`);
  return 0;
}

if (isEntryPoint(import.meta.url)) void runMain(() => main(), { prefix: '[arlo]' });

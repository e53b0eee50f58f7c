/**
 * The `tessera-punica` command: parse flags, generate the demo when no model is given, build the server, listen
 * with graceful shutdown. `pnpm --filter @tessera/punica start` runs this file from source.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

import { parseCli, USAGE, UsageError } from './config.js';
import { defaultDemoDir, ensureDemo } from './demo.js';
import { buildServer, listen } from './server.js';

export async function main(argv: readonly string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let config;
  try {
    config = parseCli(argv, env);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n\nRun with --help for the options.\n`);
      return 2;
    }
    throw err;
  }
  if (config === null) {
    process.stdout.write(USAGE);
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
    adapterAdmin: config.adapterAdmin,
    adapterRoot: config.adapterRoot,
    logger: { level: config.logLevel },
  });
  const address = await listen(app, { host: config.host, port: config.port });
  const adapters = app.models.adapters().map((a) => a.name);
  const example = adapters[0] ?? app.models.base.name;
  process.stdout.write(
    [
      '',
      `[punica] serving ${app.models.base.name} (${app.modelInfo.device}) with ${adapters.length} adapter(s) on ${address}`,
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

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(script)).href;
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  main().then(
    (code) => {
      if (code !== 0) process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`[punica] ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}

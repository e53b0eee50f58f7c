/**
 * The `tessera-pets` command: parse flags, generate the demo when no model is given, build the server and listen.
 * SIGINT / SIGTERM close it cleanly (close-with-grace, installed by `listen`). `pnpm --filter @tessera/pets start`
 * runs this file from source.
 */
import { isEntryPoint, parseCommandLine, runMain } from '@tessera/server-kit';

import { parseCli, USAGE } from './config.js';
import { defaultDemoDir, ensureDemo } from './demo.js';
import type { StartupTask } from './engine/protocol.js';
import { buildServer, listen } from './server.js';

export async function main(argv: readonly string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const config = parseCommandLine(() => parseCli(argv, env), USAGE);
  if (typeof config === 'number') return config;
  const say = (line: string) => process.stdout.write(`[pets] ${line}\n`);

  const { modelDir: dir, demo: serveDemo, demoDir, host, port, logLevel, ...serving } = config;
  let modelDir = dir;
  let { tag, paramsRoot } = serving;
  let startupTasks: StartupTask[] = [];
  if (modelDir === undefined || serveDemo) {
    const demo = ensureDemo(demoDir ?? defaultDemoDir(), say);
    if (!demo.generated) say(`using the demo in ${demo.dir}`);
    modelDir = demo.modelDir;
    tag ??= demo.modelName;
    paramsRoot ??= demo.paramsDir;
    startupTasks = demo.tasks;
  }

  say(`loading the shared model ${modelDir}${startupTasks.length > 0 ? ` and ${startupTasks.length} task(s)` : ''}`);
  const app = await buildServer({ ...serving, modelDir, tag, paramsRoot, startupTasks, logger: { level: logLevel }, onProgress: say });
  const address = await listen(app, { host, port });
  const tasks = app.engine.startupTasks;
  const example = tasks[0]?.id ?? '<task id>';
  const cost = app.engine.cost;
  process.stdout.write(
    [
      '',
      `[pets] serving ${app.modelInfo.tag} (${app.modelInfo.device}) with ${tasks.length} task(s) on ${address}`,
      ...(tasks.length > 0 ? [`[pets] tasks: ${tasks.map((t) => `${t.id} (${t.petType})`).join(', ')}`] : []),
      `[pets] batching: ${config.strategy}, window ${config.windowMs} ms / ${config.windowQueries} queries, cost model ${cost.source}${cost.file ? ` (${cost.file})` : ''}`,
      '[pets] try:',
      `  curl ${address}/v1/tasks/${example}/classify -H 'content-type: application/json' \\`,
      `    -d '{"input": ["a wonderful, moving film", "the plot makes no sense"]}'`,
      `  curl ${address}/v1/tasks    curl ${address}/health    curl ${address}/metrics`,
      ...(paramsRoot !== undefined ? [`[pets] parameter files registered by path are read under ${paramsRoot}`] : []),
      '[pets] Ctrl-C stops the server (in-flight requests finish first).',
      '',
    ].join('\n'),
  );
  return 0;
}

// A typed error (a bad model directory, a malformed start-up task) is printed by its message, anything else with its stack.
if (isEntryPoint(import.meta.url)) void runMain(() => main(), { prefix: '[pets]' });

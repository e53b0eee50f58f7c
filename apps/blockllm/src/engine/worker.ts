/**
 * The engine worker thread: everything native runs here, off the HTTP event loop. It holds the zoo (loaded from
 * its DiskTensorStore's snapshot), the DevicePool that keeps each shared tensor resident once, the ChainExecutor
 * and the step loop (step-loop.ts), served over the worker-thread transport of the host protocol with the zoo's
 * admin calls: ingest a directory by path, list applications and blocks, statistics, and a greedy run of one
 * application alone on a fresh executor (the reference the tests compare served tokens with).
 */
import { existsSync, realpathSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { BlockZoo, formatBlock, ZooConflictError } from '@tessera/block-zoo';
import { ChainExecutor } from '@tessera/block-zoo/chain';
import { ingestFoundation, ingestFullFineTune, ingestLora } from '@tessera/block-zoo/ingest';
import { DevicePool, DiskTensorStore } from '@tessera/block-zoo/store';
import { type HostEvent, serveWorkerHost } from '@tessera/cluster';
import { readHfConfig, TextTokenizer } from '@tessera/engine';
import { setThreads } from '@tessera/native';
import { isInside } from '@tessera/server-kit';

import { populateDemoZoo } from '../demo.js';
import { BlockllmRequestError } from '../errors.js';
import type { AppSummary, BlockllmProtocol, EngineStats, IngestArgs, MemorySplit, WorkerInit, ZooListing } from './protocol.js';
import { ChainStepLoop } from './step-loop.js';

type P = BlockllmProtocol;

/** What an application id may be: it is a `model` name in the API and a file name in the store. */
export const APP_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Calibration for scoring full fine-tunes against their base: seeded token sequences (the §8.1 miniature's data). */
function calibration(vocab: number): number[][] {
  let s = 0x2545f491;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
  return Array.from({ length: 4 }, () => Array.from({ length: 16 }, () => next() % (vocab - 2)));
}

serveWorkerHost<P['placement'], HostEvent, never, P['admin'], P['ready']>(async ({ workerData, fatal, progress }) => {
  const init = workerData as WorkerInit;
  if (init.threads !== null) setThreads(init.threads);
  const store = DiskTensorStore.open(init.zooDir);
  const zoo = existsSync(join(init.zooDir, 'zoo.json')) ? store.loadZoo() : new BlockZoo();
  if (!zoo.hasModel(init.foundation)) {
    ingestFoundation(zoo, store, init.foundationDir, { id: init.foundation });
    if (init.demoRoot !== null) populateDemoZoo(zoo, store, init.demoRoot, init.foundation, progress);
  }
  store.saveZoo(zoo);
  const config = readHfConfig(init.foundationDir);
  if (config.family !== 'decoder') throw new BlockllmRequestError('TESSERA_INGEST_INVALID', `${init.foundationDir} holds a ${config.architecture}, not a decoder`);
  const tokenizer = TextTokenizer.fromDir(init.foundationDir);

  const pool = new DevicePool(store);
  const makeExecutor = () => new ChainExecutor(zoo, pool, { kvPages: init.kvPages, maxPositions: config.maxPositions, onBlockRun: (run) => loop.onBlockRun(run) });
  const prefixOf = (app: string): number => {
    const pe = zoo.model(app).pe;
    return pe?.method === 'prefix' ? Number(pe.config['tokens'] ?? 0) : 0;
  };
  const loop: ChainStepLoop = new ChainStepLoop(makeExecutor(), {
    maxBatch: init.maxBatch,
    kvPages: init.kvPages,
    eosTokenIds: config.eosTokenIds,
    decode: (ids) => tokenizer.decode(ids),
    checkApp: (app) => void zoo.model(app),
    prefixOf,
  });

  const summary = (id: string): AppSummary => {
    const info = zoo.model(id);
    const blocks = zoo.chain(id).blocks;
    return {
      id,
      kind: info.kind,
      method: info.pe?.method ?? null,
      base: info.base,
      blocks: blocks.map((b) => b.blockId),
      labels: blocks.map(formatBlock),
      sharedFraction: zoo.sharedFraction(id).fraction,
    };
  };
  const memory = (): MemorySplit => {
    const s = zoo.storage();
    const sharedBlocks = zoo.blocks().filter((b) => b.span !== null && zoo.usersOf(b.blockId).length > 1).length;
    return { uniqueBytes: s.uniqueBytes, logicalBytes: s.logicalBytes, uniqueBlocks: s.uniqueBlocks, sharedBlocks, residentBytes: pool.stats().nativeBytes };
  };
  const listing = (): ZooListing => ({
    apps: zoo.apps().map(summary),
    blocks: zoo
      .blocks()
      .filter((b) => b.span !== null)
      .map((b) => ({ id: b.blockId, label: formatBlock(b), kind: b.kind, bytes: b.paramBytes, users: zoo.usersOf(b.blockId), resident: pool.isResident(b.blockId) })),
    storage: memory(),
  });

  function ingest(args: IngestArgs): AppSummary {
    const bad = (why: string) => new BlockllmRequestError('TESSERA_INGEST_INVALID', why);
    if (typeof args.id !== 'string' || !APP_ID.test(args.id)) throw bad(`id ${JSON.stringify(args.id)} must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit`);
    if (zoo.hasModel(args.id)) throw new ZooConflictError(args.id, `the zoo already holds a model ${JSON.stringify(args.id)}`);
    if (!existsSync(args.path) || !statSync(args.path).isDirectory()) throw bad(`path ${args.path} is not a directory`);
    // Symlinks followed, so a link inside the root cannot reach outside it.
    const path = realpathSync(resolve(args.path));
    if (init.ingestRoot !== null && !isInside(realpathSync(resolve(init.ingestRoot)), path)) throw bad(`path ${args.path} is outside the ingest root ${init.ingestRoot}`);
    const kind = args.kind ?? (existsSync(join(path, 'adapter_config.json')) ? 'lora' : 'full');
    const base = args.base ?? init.foundation;
    if (kind !== 'foundation') zoo.model(base);
    if (kind !== 'lora') {
      if (!existsSync(join(path, 'config.json'))) throw bad(`${args.path} has no config.json (a Hugging Face Llama directory) nor adapter_config.json (a PEFT LoRA)`);
      const vocab = readHfConfig(path).vocabSize;
      if (vocab !== config.vocabSize) throw bad(`${args.path} has a vocabulary of ${vocab}; the served tokenizer's is ${config.vocabSize}`);
    } else if (!existsSync(join(path, 'adapter_config.json'))) throw bad(`${args.path} has no adapter_config.json (a PEFT LoRA directory)`);
    const before = new Map(zoo.apps().map((a) => [a, zoo.chain(a).blocks.map((b) => b.blockId).join()]));
    if (kind === 'lora') ingestLora(zoo, store, path, { id: args.id, base });
    else if (kind === 'full') ingestFullFineTune(zoo, store, path, { id: args.id, base, calibration: calibration(config.vocabSize) });
    else ingestFoundation(zoo, store, path, { id: args.id });
    store.saveZoo(zoo);
    // A cut in a block an existing chain uses re-partitions it: a new executor picks the new chains up.
    if ([...before].some(([app, chain]) => zoo.chain(app).blocks.map((b) => b.blockId).join() !== chain)) loop.requestRebuild(makeExecutor);
    return summary(args.id);
  }

  const abort = new AbortController();
  let stopping = false;
  const running = loop.run(abort.signal).catch((err: unknown) => {
    if (!stopping) fatal(err);
  });

  return {
    engine: loop,
    admin: {
      ingest,
      zoo: listing,
      stats: (): EngineStats => ({ ...loop.sizes, ...loop.counters, memory: memory() }),
      alone: ({ app, prompt, maxTokens }) => {
        const solo = new ChainExecutor(zoo, pool, { kvPages: init.kvPages, maxPositions: config.maxPositions });
        try {
          return solo.generate([{ app, prompt, maxTokens }])[0]!.tokens;
        } finally {
          solo.dispose();
        }
      },
    },
    ready: {
      model: { foundation: init.foundation, dir: init.foundationDir, maxPositions: config.maxPositions, vocabSize: config.vocabSize, device: pool.backend.device },
      apps: zoo.apps().map(summary),
    },
    async shutdown() {
      stopping = true;
      abort.abort();
      await running;
      loop.dispose();
      pool.dispose();
    },
  };
});

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
import { argmax, readHfConfig, TextTokenizer } from '@tessera/engine';
import { setThreads } from '@tessera/native';
import { isInside } from '@tessera/server-kit';

import { populateDemoZoo } from '../demo.js';
import { BullmqControlPlane, type ControlPlane, InProcessControlPlane, type PlacementJob } from '../devices/control-plane.js';
import { DeviceChainExecutor, DeviceSet } from '../devices/device-set.js';
import { BlockllmPlacementConflictError, BlockllmPlacementNotFoundError, BlockllmRequestError } from '../errors.js';
import type { AppSummary, BlockllmProtocol, DeviceMetrics, EngineStats, IngestArgs, MemorySplit, PlacementStatus, WorkerInit, ZooListing } from './protocol.js';
import { ChainStepLoop, type StepExecutor } from './step-loop.js';
import { buildMissingSurrogates } from './surrogates.js';

type P = BlockllmProtocol;

/** What an application id may be: it is a `model` name in the API and a file name in the store. */
export const APP_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Calibration for scoring full fine-tunes against their base: seeded token sequences (the §8.1 miniature's data). */
function calibration(vocab: number, seed = 0x2545f491): number[][] {
  let s = seed;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s);
  return Array.from({ length: 4 }, () => Array.from({ length: 16 }, () => next() % (vocab - 2)));
}

serveWorkerHost<P['placement'], HostEvent, never, P['admin'], P['ready']>(async ({ workerData, fatal, progress }) => {
  const init = workerData as WorkerInit;
  // Speculation's ledger follows one step at a time.
  if (init.speculation !== null && init.cohorts > 1) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `speculation runs one cohort, got cohorts ${init.cohorts}`);
  const multi = init.devices > 1 || init.provisioning === 'per-model';
  // Several devices: one kernel thread each (the process-wide pool serialises parallel kernels of two threads, and
  // is set here once, before any device starts).
  if (multi) setThreads(1);
  else if (init.threads !== null) setThreads(init.threads);
  const store = DiskTensorStore.open(init.zooDir);
  const zoo = existsSync(join(init.zooDir, 'zoo.json')) ? store.loadZoo() : new BlockZoo();
  if (!zoo.hasModel(init.foundation)) {
    ingestFoundation(zoo, store, init.foundationDir, { id: init.foundation });
    if (init.demoRoot !== null) populateDemoZoo(zoo, store, init.demoRoot, init.foundation, progress);
  }
  const config = readHfConfig(init.foundationDir);
  // Speculation runs surrogates of the foundation's blocks (the blocks every application's chain shares most).
  if (init.speculation !== null && init.devices > 1) {
    buildMissingSurrogates(zoo, store, init.foundation, { calibration: calibration(config.vocabSize), evaluation: calibration(config.vocabSize, 0x9e3779b9) }, progress);
  }
  store.saveZoo(zoo);
  if (config.family !== 'decoder') throw new BlockllmRequestError('TESSERA_INGEST_INVALID', `${init.foundationDir} holds a ${config.architecture}, not a decoder`);
  const tokenizer = TextTokenizer.fromDir(init.foundationDir);

  const pool = new DevicePool(store);
  let devices: DeviceSet | null = null;
  if (multi) {
    // The served blocks' bytes by the registry's count (a fused block counts the base weights it holds).
    const blocks = new Map(zoo.apps().flatMap((a) => zoo.chain(a).blocks.map((b) => [b.blockId, b.paramBytes] as const)));
    const total = [...blocks.values()].reduce((a, b) => a + b, 0);
    const deviceBytes = init.deviceBytes ?? Math.ceil((1.5 * total) / init.devices);
    devices = await DeviceSet.start(zoo, {
      devices: init.devices,
      deviceBytes,
      zooDir: init.zooDir,
      kvPages: init.kvPages,
      maxPositions: config.maxPositions,
      provisioning: init.provisioning,
      policy: init.placementPolicy,
      scaleOutQueue: init.scaleOutQueue ?? init.maxBatch,
      adaptive: init.adaptive,
      variantBatching: init.variantBatching,
      cohortHomes: init.cohortHomes,
      ...(init.maxQueueLen !== null ? { maxQueueLen: init.maxQueueLen } : {}),
      ...(init.speculation !== null ? { speculation: init.speculation } : {}),
      kvMigration: { mode: init.kvMigration.mode, ...(init.kvMigration.rates ? { rates: init.kvMigration.rates } : {}) },
    });
    progress(`${init.devices} device(s) of ${deviceBytes} bytes each (${init.provisioning} provisioning)`);
    if (init.provisioning === 'blocks') {
      try {
        await devices.place(zoo.apps());
      } catch (err) {
        await devices.close();
        throw err;
      }
    }
  }
  const makeExecutor = (): StepExecutor =>
    devices
      ? new DeviceChainExecutor(devices, (run) => loop.onBlockRun(run))
      : oneDevice(new ChainExecutor(zoo, pool, { kvPages: init.kvPages, maxPositions: config.maxPositions, onBlockRun: (run) => loop.onBlockRun({ rows: run.rows, apps: run.apps.length, copiedRows: run.copiedRows }) }));
  const prefixOf = (app: string): number => {
    const pe = zoo.model(app).pe;
    return pe?.method === 'prefix' ? Number(pe.config['tokens'] ?? 0) : 0;
  };
  const loop: ChainStepLoop = new ChainStepLoop(makeExecutor(), {
    maxBatch: init.maxBatch,
    // One device steps synchronously: a second cohort would only wait for the first.
    cohorts: devices ? init.cohorts : 1,
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
  // Resident: in this worker's pool on one device; on several, what the devices hold (this worker's pool then only
  // serves the one-device reference runs).
  const memory = async (): Promise<MemorySplit> => {
    const s = zoo.storage();
    const sharedBlocks = zoo.blocks().filter((b) => b.span !== null && zoo.usersOf(b.blockId).length > 1).length;
    const residentBytes = devices ? (await devices.deviceStats()).reduce((n, d) => n + d.residentBytes, 0) : pool.stats().nativeBytes;
    return { uniqueBytes: s.uniqueBytes, logicalBytes: s.logicalBytes, uniqueBlocks: s.uniqueBlocks, sharedBlocks, residentBytes };
  };
  const listing = async (): Promise<ZooListing> => ({
    apps: zoo.apps().map(summary),
    blocks: zoo
      .blocks()
      .filter((b) => b.span !== null)
      .map((b) => ({
        id: b.blockId,
        label: formatBlock(b),
        kind: b.kind,
        bytes: b.paramBytes,
        users: zoo.usersOf(b.blockId),
        resident: devices ? devices.placed().some((i) => i.block === b.blockId) : pool.isResident(b.blockId),
      })),
    storage: await memory(),
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

  /**
   * A placement job checked against the placement now: what it names exists and fits; an eviction or re-placement
   * also that the running sequences holding KV in what it removes have another instance of the block to move to.
   */
  function checkJob(job: PlacementJob): void {
    if (!devices) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', 'placement jobs need several devices (start the server with --devices 2 or more)');
    if (devices.provisioning !== 'blocks') throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', 'per-model provisioning places whole models on demand; placement jobs apply to BlockLLM provisioning');
    const device = (id: string) => {
      if (!devices!.deviceIds.includes(id)) throw new BlockllmPlacementNotFoundError(`no device ${JSON.stringify(id)}; the devices are ${devices!.deviceIds.join(', ')}`);
    };
    const chainBlock = (id: string) => {
      if (!zoo.blocks().some((b) => b.blockId === id)) throw new BlockllmPlacementNotFoundError(`the zoo has no block ${JSON.stringify(id)}`);
      const b = zoo.block(id);
      if (b.span === null || b.kind === 'surrogate') throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `block ${id} is a ${b.kind}, not a chain block`);
      return b;
    };
    const free = (d: string) => devices!.options.deviceBytes - devices!.placed().filter((p) => p.device === d).reduce((n, p) => n + p.bytes, 0);
    switch (job.kind) {
      case 'deploy': {
        const b = chainBlock(job.block);
        device(job.device);
        // Another instance of a deployed block is a replica (its own KV; new sequences route to it by load).
        const here = devices.instancesOf(job.block).find((i) => i.device === job.device);
        if (here) throw new BlockllmPlacementConflictError(`block ${job.block} is already deployed on ${job.device} (instance ${here.instance})`);
        const adds = devices.marginal(b, job.device);
        if (free(job.device) < adds) throw new BlockllmPlacementConflictError(`block ${job.block} (${adds} bytes more) does not fit ${job.device}: ${free(job.device)} bytes are free`);
        return;
      }
      case 'evict': {
        if (!devices.instance(job.block)) throw new BlockllmPlacementNotFoundError(`no instance of block ${JSON.stringify(job.block)} is deployed`);
        // Its running sequences move to another instance of the block with their KV (DeviceSet.evictMoving).
        devices.moveTargets(job.block);
        return;
      }
      case 'migrate': {
        const at = devices.instance(job.block);
        if (!at) throw new BlockllmPlacementNotFoundError(`no instance of block ${JSON.stringify(job.block)} is deployed`);
        device(job.device);
        if (at.device === job.device) throw new BlockllmPlacementConflictError(`block ${job.block} is already on ${job.device}`);
        const adds = devices.marginal(zoo.block(at.block), job.device);
        if (free(job.device) < adds) throw new BlockllmPlacementConflictError(`block ${job.block} (${adds} bytes more) does not fit ${job.device}: ${free(job.device)} bytes are free`);
        // An instance in use moves with its sequences' KV (DeviceSet.migrate).
        return;
      }
      case 'place': {
        if (devices.routes.size > 0) devices.placeMoves(zoo.apps(), job.policy ?? devices.policy);
        return;
      }
      default:
        throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `unknown placement job ${JSON.stringify((job as { kind: unknown }).kind)}`);
    }
  }

  /** Whether the KV of the running sequences an evict or place job would move fits the instances they would move to (null: it does). */
  async function roomProblem(job: PlacementJob): Promise<string | null> {
    if (!devices || devices.routes.size === 0) return null;
    if (job.kind === 'evict') return devices.moveRoomProblem(job.block);
    if (job.kind !== 'place') return null;
    const { removals, leaving } = devices.placeMoves(zoo.apps(), job.policy ?? devices.policy);
    for (const i of removals) {
      const problem = await devices.moveRoomProblem(i.instance, leaving);
      if (problem !== null) return problem;
    }
    return null;
  }

  /** Runs a job between steps (alone at the device set's gate), checked again against the placement it meets. */
  const runJob = (job: PlacementJob): Promise<unknown> =>
    devices!.gate.alone(async () => {
      checkJob(job);
      const set = devices!;
      switch (job.kind) {
        case 'deploy':
          return { deployed: [(await set.deploy(set.keyFor(job.block, job.device), zoo.block(job.block), job.device, 'shared')).instance], evicted: [] };
        case 'evict': {
          const moved = await set.evictMoving(job.block);
          return { deployed: [], evicted: [job.block], movedTo: moved.to, movedSequences: moved.sequences, kvPages: moved.pages };
        }
        case 'migrate': {
          const moved = await set.migrate(job.block, job.device);
          return { deployed: [`${job.block}@${job.device}`], evicted: [`${job.block}@${moved.from}`], movedSequences: moved.sequences, kvPages: moved.pages, recomputedPages: moved.recomputedPages, copiedPages: moved.copiedPages };
        }
        case 'place':
          return set.place(zoo.apps(), job.policy ?? set.policy);
      }
    });

  let control: ControlPlane | null = null;
  if (devices) {
    try {
      control = init.redis ? await BullmqControlPlane.start(init.redis, runJob) : new InProcessControlPlane(runJob);
    } catch (err) {
      await devices.close();
      throw err;
    }
  }

  async function deviceMetrics(): Promise<DeviceMetrics | null> {
    if (!devices) return null;
    const per = await devices.deviceStats();
    return {
      ...devices.counters,
      perDevice: per.map((d) => ({ id: d.device, budgetBytes: d.budgetBytes, residentBytes: d.residentBytes, busyMs: d.busyMs, upMs: d.upMs, instances: d.instances.length })),
    };
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
      aloneLogits: ({ app, prompt, maxTokens }) => {
        const solo = new ChainExecutor(zoo, pool, { kvPages: init.kvPages, maxPositions: config.maxPositions });
        const out: Float32Array[] = [];
        try {
          let next = [...prompt];
          for (let i = 0; i < maxTokens; i++) {
            const [row] = solo.step([{ app, id: 'alone', tokens: next }]);
            out.push(row!);
            next = [argmax(row!)];
          }
          return out;
        } finally {
          solo.dispose();
        }
      },
      stats: async (): Promise<EngineStats> => ({ ...loop.sizes, ...loop.counters, memory: await memory(), devices: await deviceMetrics() }),
      placement: async (): Promise<PlacementStatus> => {
        if (!devices || !control) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', 'one device: every block runs in the engine worker (start the server with --devices 2 or more for a placement)');
        return { ...(await devices.view(zoo.apps())), transport: control.transport, jobs: await control.list(20) };
      },
      placementSubmit: async (job) => {
        checkJob(job);
        // The KV that would move must fit somewhere now (checked again, all or nothing, when the job runs).
        const problem = await roomProblem(job);
        if (problem !== null) throw new BlockllmPlacementConflictError(problem);
        return control!.submit(job);
      },
      placementJob: async ({ id }) => {
        if (!control) throw new BlockllmPlacementNotFoundError(`no placement job ${id}: one device has no control plane`);
        const s = await control.get(id);
        if (!s) throw new BlockllmPlacementNotFoundError(`no placement job ${JSON.stringify(id)}`);
        return s;
      },
      alone: ({ app, prompt, maxTokens, blocks }) => {
        // A substituted chain: the executor reads chains from the zoo, so it gets a view of the zoo whose chain of
        // `app` is `blocks` (checked by the executor like any chain: no gap, embedding to head).
        const chains = blocks === undefined ? zoo : (Object.create(zoo, { chain: { value: (a: string) => (a === app ? { ...zoo.chain(a), blocks: blocks.map((b) => zoo.block(b)) } : zoo.chain(a)) } }) as BlockZoo);
        const solo = new ChainExecutor(chains, pool, { kvPages: init.kvPages, maxPositions: config.maxPositions });
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
      await control?.close();
      await devices?.close();
      pool.dispose();
    },
  };
});

/** block-zoo's one-device ChainExecutor as the loop's executor (one cohort: its step takes no cohort). */
function oneDevice(chain: ChainExecutor): StepExecutor {
  return {
    load: (app) => chain.load(app),
    step: (sequences) => chain.step(sequences),
    release: (id) => chain.release(id),
    dispose: () => chain.dispose(),
  };
}

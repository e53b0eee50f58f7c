// Runs a TypeScript worker from source (dev server, tests). Node 20 does not apply `--import` loader hooks to a
// worker's entry module, so this plain-JS entry registers tsx in the worker thread first and then imports the
// real worker (workerData.entry, a file URL). tsx is resolved from that entry, i.e. from the app that runs from
// source (its devDependency): server-kit itself does not depend on it. Started with `--conditions=@tessera/source`
// (see workerEntry), so @tessera/* resolve to their src/. A built server starts its dist/ worker directly instead.
import { createRequire } from 'node:module';
import { workerData } from 'node:worker_threads';

const { register } = createRequire(workerData.entry)('tsx/esm/api');
register();
await import(workerData.entry);

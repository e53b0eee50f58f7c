// Runs a TypeScript worker from source (dev server, tests). Node 20 does not apply `--import` loader hooks to a
// worker's entry module, so this plain-JS entry registers tsx in the worker thread first and then imports the
// real worker (workerData.entry, a file URL). Started with `--conditions=@tessera/source` (see workerEntry), so
// @tessera/* resolve to their src/. A built server starts its dist/ worker directly instead.
//
// tsx is found from that entry, i.e. in the app that runs from source (its devDependency): server-kit does not
// depend on it. Node 20 has no ESM resolve from another module's location (import.meta.resolve's parent argument
// is flagged), and tsx's CommonJS build of `tsx/esm/api` cannot load its ESM half, so this finds tsx's
// package.json with require.resolve and imports the ESM file its exports map names for `tsx/esm/api`.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { workerData } from 'node:worker_threads';

const require = createRequire(workerData.entry);
const manifestPath = require.resolve('tsx/package.json');
const esmApi = require(manifestPath).exports['./esm/api'].import.default;
const { register } = await import(new URL(esmApi, pathToFileURL(manifestPath)).href);
register();
await import(workerData.entry);

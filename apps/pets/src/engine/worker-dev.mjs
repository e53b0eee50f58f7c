// Runs the TypeScript engine worker from source (dev server, tests). Node 20 does not apply `--import` loader
// hooks to a worker's entry module, so this plain-JS entry registers tsx in the worker thread first and then
// imports the real worker (workerData.entry). Started with `--conditions=@tessera/source`, so @tessera/*
// resolve to their src/. The built server (dist/) starts dist/engine-worker.js directly instead.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.entry);

// worker-dev.mjs is a worker entry (it runs on import, from workerData); it exports nothing.
export {};

export * from './corpus.js';
export * from './perplexity.js';
export * from './recipe.js';
export { DEMO_OUT_DIR, DEMO_PACKAGE_DIR, DEMO_REPORT, DEMO_WORK_DIR, main, parseCli, USAGE, UsageError, type ParsedCli } from './cli.js';

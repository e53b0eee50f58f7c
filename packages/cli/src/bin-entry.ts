/** The source-mode entry of bin/tessera.mjs (run through tsx when dist/ is absent): main() on the process. */
import { main } from './cli.js';

process.exitCode = await main(process.argv.slice(2));

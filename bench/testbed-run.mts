import { runTestbed } from '/work/main/bench/src/arlo/testbed.ts';
import { writeFileSync } from 'node:fs';
const sizes = JSON.parse(process.argv[2] ?? '{}');
const full = { model: 'mini', lengths: [32, 64, 128], ratePerSec: 10, durationMs: 30_000, repeats: 3, profileReps: 20, sloFactor: 30, seed: 616, ...sizes };
const out = await runTestbed(full as never, { quick: false, threads: 2, log: (m: string) => console.error(m), roofline: async () => { throw new Error('no'); } });
for (const r of out.rows) console.log(JSON.stringify(r));
console.log(JSON.stringify(out.ratios));
for (const n of out.tables[0]!.notes ?? []) console.log(n);
writeFileSync('/tmp/testbed-out.json', JSON.stringify(out.params, null, 1));

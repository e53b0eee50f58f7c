#!/usr/bin/env node
// publint over every publishable workspace package (not private), on the built package as `pnpm pack` would ship
// it: run after `turbo run build`. Strict: a warning fails too. Exit 1 with every message when any package fails.
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dirs = ['native', ...readdirSync(join(root, 'packages')).map((d) => join('packages', d))];
let failed = 0;
for (const dir of dirs) {
  const file = join(root, dir, 'package.json');
  if (!existsSync(file)) continue;
  const pkg = JSON.parse(readFileSync(file, 'utf8'));
  if (pkg.private) continue;
  const { messages } = await publint({ pkgDir: join(root, dir), strict: true, level: 'suggestion', pack: 'pnpm' });
  if (messages.length === 0) {
    console.log(`publint ${pkg.name}: ok`);
    continue;
  }
  failed++;
  for (const m of messages) console.error(`publint ${pkg.name}: ${m.type}: ${formatMessage(m, pkg) ?? m.code}`);
}
if (failed > 0) {
  console.error(`publint: ${failed} package(s) with findings`);
  process.exit(1);
}

// Puts the built CPU addon where the published package carries it, prebuildify's layout:
// prebuilds/<platform>-<arch>/tessera_cpu.node (`prepack`), and removes it again after packing (`--clean`,
// `postpack`), so a stale copy never lingers beside a fresh local build. The CUDA addon is not shipped: it stays a
// build from source (`pnpm build:native` where nvcc exists).
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const prebuilds = join(root, 'prebuilds');
if (process.argv.includes('--clean')) {
  rmSync(prebuilds, { recursive: true, force: true });
} else {
  const built = join(root, 'build', 'Release', 'tessera_cpu.node');
  if (!existsSync(built)) {
    console.error(`[native] ${built} is not built: run \`pnpm build:native\` before packing`);
    process.exit(1);
  }
  const target = join(prebuilds, `${process.platform}-${process.arch}`, 'tessera_cpu.node');
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(built, target);
  console.error(`[native] packing ${target}`);
}

#!/usr/bin/env node
// Builds tessera_cpu.node (always) and tessera_cuda.node (when nvcc is found) with cmake-js.
//   TESSERA_CUDA=OFF       skip the CUDA addon even when nvcc exists
//   TESSERA_BUILD_JOBS=N   parallel compile jobs (default: CPU count)
// `configure` runs only when the build directory is new or the CUDA switch changed, because
// `cmake-js compile` would ignore changed -D flags on an existing build directory.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const cmakeJs = join(dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
const cuda = (process.env.TESSERA_CUDA ?? 'ON').toUpperCase() === 'OFF' ? 'OFF' : 'ON';
const jobs = String(process.env.TESSERA_BUILD_JOBS ?? availableParallelism());
const stamp = join(root, 'build', '.tessera-configure');
const wanted = `cuda=${cuda}`;

const run = (args) => execFileSync(process.execPath, [cmakeJs, ...args], { cwd: root, stdio: 'inherit' });

const configured = existsSync(stamp) && readFileSync(stamp, 'utf8') === wanted && existsSync(join(root, 'build', 'CMakeCache.txt'));
if (!configured) {
  console.log(`[tessera/native] configuring (TESSERA_CUDA=${cuda})`);
  run(['configure', '--CDTESSERA_CUDA=' + cuda]);
  writeFileSync(stamp, wanted);
}
run(['build', '--parallel', jobs]);

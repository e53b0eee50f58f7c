import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, describe, expect, it } from 'vitest';

import { generateLoraAdapter, generateModel } from '@tessera/engine';
import { type CliIo, main } from '@tessera/engine/cli';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tessera-cli-'));
  dirs.push(d);
  return d;
}

function capture(): CliIo & { out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, stdout: (t) => out.push(t), stderr: (t) => err.push(t) };
}

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const io = capture();
  const code = await main(args, io);
  return { code, stdout: io.out.join('\n'), stderr: io.err.join('\n') };
}

function sameFiles(a: string, b: string, files: string[]): void {
  for (const f of files) expect({ f, same: readFileSync(join(a, f)).equals(readFileSync(join(b, f))) }).toEqual({ f, same: true });
}

/**
 * `tessera gen`: @tessera/engine's CLI module (`@tessera/engine/cli`, which the `tessera` bin delegates to) called
 * in-process, and the bin run as a real process.
 */
describe('tessera gen (@tessera/engine/cli)', () => {
  it('--help and gen --help print usage and exit 0; no command exits 2', async () => {
    const top = await run(['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toContain('gen model <dir>');
    const gen = await run(['gen', '--help']);
    expect(gen.code).toBe(0);
    expect(gen.stdout).toContain('--family');
    expect(gen.stdout).toContain('--targets');
    expect((await run(['gen', 'model', '--help'])).code).toBe(0);
    const none = await run([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('usage: tessera');
  });

  it('unknown commands, flags and bad values exit 2 with a message naming them', async () => {
    const dir = join(tempDir(), 'm');
    const cases: Array<[string[], RegExp]> = [
      [['frobnicate'], /unknown command "frobnicate"/],
      [['gen', 'tokenizer', dir], /unknown gen target "tokenizer"/],
      [['gen', 'model', dir, '--family', 'decoder', '--bogus'], /Unknown option '--bogus'/],
      [['gen', 'model', dir], /--family is required/],
      [['gen', 'model', dir, '--family', 'gpt'], /--family must be encoder or decoder, got "gpt"/],
      [['gen', 'model', dir, '--family', 'decoder', '--size', 'huge'], /--size must be tiny or mini/],
      [['gen', 'model', dir, '--family', 'decoder', '--dtype', 'f64'], /--dtype must be f32 or f16 or bf16/],
      [['gen', 'model', dir, '--family', 'decoder', '--seed=-1'], /--seed must be an integer/],
      [['gen', 'model', dir, '--family', 'decoder', '--seed', '1.5'], /--seed must be an integer/],
      [['gen', 'model', dir, '--family', 'decoder', '--seed', '4294967296'], /--seed must be an integer in \[0, 4294967295\]/],
      [['gen', 'model', dir, '--family', 'decoder', '--sharpen', '0'], /--sharpen must be a finite number > 0/],
      [['gen', 'model', dir, '--family', 'decoder', '--sharpen', 'x'], /--sharpen must be a finite number > 0/],
      [['gen', 'model', '--family', 'decoder'], /name the output directory/],
      [['gen', 'adapter', dir], /--base <modelDir> is required/],
      [['gen', 'adapter', dir, '--base', join(dir, 'missing')], /--base: cannot read .*config\.json/],
    ];
    for (const [args, message] of cases) {
      const r = await run(args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr).toMatch(message);
    }
    expect(existsSync(dir)).toBe(false);
  });

  it('gen model writes the same files as the API; gen adapter reads the base config and writes a PEFT adapter', async () => {
    const dir = tempDir();
    const r = await run(['gen', 'model', join(dir, 'cli'), '--family', 'decoder', '--seed', '7', '--sharpen', '3', '--dtype', 'bf16']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('decoder tiny LlamaForCausalLM');
    expect(r.stderr).toBe('');
    const api = generateModel(join(dir, 'api'), { family: 'decoder', seed: 7, sharpen: 3, dtype: 'bf16' });
    sameFiles(join(dir, 'cli'), api.dir, api.files);

    const a = await run(['gen', 'adapter', join(dir, 'adapter'), '--base', join(dir, 'cli'), '--rank', '4', '--alpha', '8', '--targets', 'q_proj,o_proj', '--seed', '2']);
    expect(a.code).toBe(0);
    expect(a.stdout).toContain('on 4 modules');
    const config = JSON.parse(readFileSync(join(dir, 'adapter', 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({ r: 4, lora_alpha: 8, target_modules: ['q_proj', 'o_proj'], base_model_name_or_path: join(dir, 'cli') });
    const viaApi = generateLoraAdapter(join(dir, 'adapter-api'), { base: api.config, rank: 4, alpha: 8, targets: ['q_proj', 'o_proj'], seed: 2 });
    sameFiles(join(dir, 'adapter'), viaApi.dir, ['adapter_model.safetensors']);

    const enc = await run(['gen', 'model', join(dir, 'enc'), '--family', 'encoder']);
    expect(enc.code).toBe(0);
    const wrongTargets = await run(['gen', 'adapter', join(dir, 'bad'), '--base', join(dir, 'enc'), '--targets', 'q_proj']);
    expect(wrongTargets.code).toBe(2);
    expect(wrongTargets.stderr).toMatch(/q_proj match no encoder Linear/);
    writeFileSync(join(dir, 'enc', 'config.json'), JSON.stringify({ model_type: 't5' }));
    const unsupported = await run(['gen', 'adapter', join(dir, 'bad'), '--base', join(dir, 'enc')]);
    expect(unsupported.code).toBe(2);
    expect(unsupported.stderr).toMatch(/--base: .*config.json: architectures must be a non-empty list.*supported: BertModel/);
  });

  it('bin/tessera.mjs runs gen: --help exits 0, a bad flag exits 2', async () => {
    const bin = fileURLToPath(new URL('../bin/tessera.mjs', import.meta.url));
    const exec = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(process.execPath, [bin, ...args], { cwd: tmpdir(), timeout: 60_000 }, (err, stdout, stderr) =>
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
      });
    const help = await exec(['gen', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('tessera gen model <dir>');
    const bad = await exec(['gen', 'model', join(tempDir(), 'x'), '--family', 'decoder', '--nope']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("Unknown option '--nope'");
  });
});

/**
 * The `tessera` command as users meet it: `--help` lists every command, each command's --help, usage errors with a
 * did-you-mean (exit 2), the flags every server shares, colours (FORCE_COLOR on, NO_COLOR and non-TTY off), and
 * `tessera gen model` writing a model directory through the bin.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { COMMANDS, SERVERS, SHARED_SERVER_FLAGS, usage } from '../src/index.js';
import { runInProcess, tessera } from './support.js';

const ESC = '\x1b';
const scratch = mkdtempSync(join(tmpdir(), 'tessera-cli-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('tessera --help', () => {
  it('lists every command, one line each, and exits 0 (the bin, as a process)', async () => {
    const r = await tessera(['--help']);
    expect(r.code).toBe(0);
    expect(COMMANDS.map((c) => c.name)).toEqual(['serve', 'gen', 'train', 'bench', 'help']);
    const lines = r.stdout.split('\n');
    for (const c of COMMANDS) {
      const line = lines.filter((l) => l.startsWith(`  ${c.name} `));
      expect({ command: c.name, lines: line.length }).toEqual({ command: c.name, lines: 1 });
      expect(line[0]).toContain(c.summary);
    }
    expect(r.stdout).toContain('serve <server>');
    expect(r.stdout).toContain('punica, pets');
    expect((await runInProcess(['-h'])).stdout).toBe(r.stdout);
    expect((await runInProcess(['help'])).stdout).toBe(r.stdout);
  });

  it('--version prints the package version', async () => {
    const r = await runInProcess(['--version']);
    expect(r.code).toBe(0);
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(r.stdout.trim()).toBe(manifest.version);
  });
});

describe('each command\'s --help (exit 0, on stdout; main() in-process)', () => {
  const cases: Array<[string[], string[]]> = [
    [['serve', '--help'], ['usage: tessera serve <server>', 'punica', 'pets', '--port <n>', '<PREFIX>_PORT', 'PUNICA_PORT', 'TESSERA_DEVICE']],
    [['serve', 'punica', '--help'], ['tessera serve punica takes the flags and PUNICA_* variables', '--adapters', 'PUNICA_MODEL', '--max-batch', '--role']],
    [['serve', 'pets', '--help'], ['tessera serve pets takes the flags and PETS_* variables', '--strategy', 'PETS_MODEL', '--window-ms']],
    [['gen', '--help'], ['tessera gen model <dir>', '--family', '--targets']],
    [['train', '--help'], ['tessera train lora|adapter|full|classifier', '--model', '--data', '--steps']],
    [['help', 'serve'], ['usage: tessera serve <server>']],
    [['help', 'gen'], ['tessera gen model <dir>']],
  ];
  for (const [args, expected] of cases) {
    it(args.join(' '), async () => {
      const r = await runInProcess(args);
      expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
      for (const text of expected) expect(r.stdout).toContain(text);
    });
  }
});

describe('usage errors: exit 2, a message on stderr, the usage, a did-you-mean when close (main() in-process)', () => {
  const cases: Array<[string[], RegExp]> = [
    [[], /tessera: name a command/],
    [['sevre'], /unknown command "sevre"; did you mean "serve"\?/],
    [['trian', 'lora'], /unknown command "trian"; did you mean "train"\?/],
    [['bnech'], /did you mean "bench"\?/],
    [['frobnicate'], /unknown command "frobnicate"\n/],
    [['--port', '8000'], /unknown option "--port" \(options follow the command\)/],
    [['serve'], /serve: name a server \(punica, pets, arlo, blockllm, hmi\)/],
    [['serve', 'punca'], /unknown server "punca"; did you mean "punica"\?/],
    [['serve', 'pet'], /unknown server "pet"; did you mean "pets"\?/],
    [['serve', 'vllm'], /unknown server "vllm"\n/],
    [['help', 'sreve'], /help: unknown command "sreve"; did you mean "serve"\?/],
    [['serve', 'punica', '--nope'], /Unknown option '--nope'/],
    [['serve', 'punica', '--port', 'abc'], /--port must be an integer/],
    [['gen', 'model', join(scratch, 'x'), '--family', 'gpt'], /--family must be encoder or decoder, got "gpt"/],
    [['train', 'prefix'], /unknown train kind "prefix"/],
  ];
  for (const [args, message] of cases) {
    it(args.length === 0 ? '(no command)' : args.join(' '), async () => {
      const r = await runInProcess(args);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(message);
    });
  }

  it('the bin exits 2 too; PUNICA_* variables are read as the server reads them', async () => {
    const r = await tessera(['serve', 'punica'], { env: { PUNICA_PORT: '99999' } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--port must be an integer in \[0, 65535\], got "99999"/);
  });
});

describe('flags and variables shared by every server', () => {
  for (const server of SERVERS) {
    it(`${server.name}: its own usage has every shared flag with its ${server.envPrefix}_* variable`, async () => {
      const r = await runInProcess(['serve', server.name, '--help']);
      expect(r.code).toBe(0);
      for (const f of SHARED_SERVER_FLAGS) {
        if (server.without?.[f.flag]) {
          expect(r.stdout).not.toContain(`--${f.flag} `);
          continue;
        }
        expect(r.stdout).toContain(`--${f.flag}${f.arg ? ` ${f.arg}` : ''}`);
        expect(r.stdout).toContain(`${server.envPrefix}_${f.env}`);
      }
    });
  }
});

describe('colours', () => {
  it('none on a pipe (non-TTY), none under NO_COLOR; FORCE_COLOR turns them on', async () => {
    const [plain, noColor, forced, err, errNoColor, errForced] = await Promise.all([
      tessera(['--help']),
      tessera(['--help'], { env: { NO_COLOR: '1' } }),
      tessera(['--help'], { env: { FORCE_COLOR: '1' } }),
      tessera(['sevre']),
      tessera(['sevre'], { env: { NO_COLOR: '1' } }),
      tessera(['sevre'], { env: { FORCE_COLOR: '1' } }),
    ]);
    expect(plain.stdout).not.toContain(ESC);
    expect(noColor.stdout).not.toContain(ESC);
    expect(forced.stdout).toContain(`${ESC}[1m`);
    expect(forced.stdout.replace(/\x1b\[\d+m/g, '')).toBe(plain.stdout);

    expect(err.stderr).not.toContain(ESC);
    expect(errNoColor.stderr).not.toContain(ESC);
    expect(errForced.stderr).toContain(ESC);
  });

  it('the usage text itself: no escape codes from the plain palette', () => {
    expect(usage()).not.toContain(ESC);
  });
});

describe('tessera gen model (the bin)', () => {
  it('writes a model directory', async () => {
    const dir = join(scratch, 'model');
    const r = await tessera(['gen', 'model', dir, '--family', 'encoder', '--seed', '3']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^wrote .*model: encoder tiny BertForSequenceClassification, [\d,]+ parameters, f32/);
    for (const f of ['config.json', 'model.safetensors', 'tokenizer.json']) expect(existsSync(join(dir, f))).toBe(true);
    expect(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')).architectures).toEqual(['BertForSequenceClassification']);
  });
});

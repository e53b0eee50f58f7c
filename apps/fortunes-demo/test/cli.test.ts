import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { DEMO_OUT_DIR, DEMO_REPORT, main, parseCli, UsageError } from '../src/cli.js';
import { DEFAULT_LORA_CATEGORIES, DEFAULT_RECIPE } from '../src/recipe.js';

function capture(argv: string[]): { code: number; out: string; err: string } {
  let out = '';
  let err = '';
  const code = main(argv, (s) => (out += s), (s) => (err += s));
  return { code, out, err };
}

describe('parseCli', () => {
  it('fills the recipe defaults', () => {
    const { command, recipe } = parseCli(['build']);
    expect(command).toBe('build');
    expect(recipe.out).toBe(DEMO_OUT_DIR);
    expect(recipe.report).toBe(DEMO_REPORT);
    expect(recipe.seed).toBe(DEFAULT_RECIPE.seed);
    expect(recipe.pretrainSteps).toBe(DEFAULT_RECIPE.pretrainSteps);
    expect(recipe.loraCategories).toEqual(DEFAULT_LORA_CATEGORIES);
  });

  it('reads every option', () => {
    const { recipe } = parseCli(['build', '--seed', '5', '--pretrain-steps', '3', '--lora-max-steps', '2', '--categories', 'science, work',
      '--out', '/tmp/o', '--work', '/tmp/w', '--fortunes-dir', '/tmp/f', '--report', 'none']);
    expect(recipe).toMatchObject({ seed: 5, pretrainSteps: 3, loraMaxSteps: 2, loraMinSteps: 2, loraCategories: ['science', 'work'], out: '/tmp/o', work: '/tmp/w', fortunesDir: '/tmp/f', report: null });
  });

  it.each([
    [[], /missing command/],
    [['train'], /unknown command "train"/],
    [['build', 'extra'], /unexpected argument "extra"/],
    [['build', '--bogus'], /Unknown option '--bogus'/],
    [['build', '--seed=-1'], /--seed must be an integer >= 0/],
    [['build', '--seed', '1.5'], /--seed must be an integer/],
    [['build', '--seed', '4294967296'], /--seed must fit in 32 bits/],
    [['build', '--pretrain-steps', '0'], /--pretrain-steps must be an integer >= 1/],
    [['build', '--pretrain-steps'], /argument missing|requires|--pretrain-steps/],
    [['build', '--categories', 'Science'], /--categories must be a comma-separated list/],
    [['build', '--categories', 'work,work'], /names a category twice/],
    [['perplexity', '--report', 'none'], /--report none/],
  ])('refuses %j', (argv, message) => {
    expect(() => parseCli(argv)).toThrow(UsageError);
    expect(() => parseCli(argv)).toThrow(message);
  });

  it('answers --help with the usage and exit 0', () => {
    const r = capture(['--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^usage: fortunes-demo <command>/);
  });

  it('exits 2 with the usage on a bad flag', () => {
    const r = capture(['build', '--pretrain-steps', 'many']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--pretrain-steps must be an integer >= 1, got "many"[\s\S]*usage:/);
  });
});

describe('a missing corpus', () => {
  it('fails the build with exit 1 and the apt-get command, before anything is written', () => {
    const root = mkdtempSync(join(tmpdir(), 'fortunes-cli-'));
    for (const command of ['build', 'perplexity', 'corpus']) {
      const r = capture([command, '--fortunes-dir', join(root, 'absent'), '--out', join(root, 'out'), '--work', join(root, 'work')]);
      expect(r.code).toBe(1);
      expect(r.err).toMatch(/the fortunes corpus is missing: .*absent does not exist \(install it with `apt-get install fortunes fortunes-min`/);
    }
    expect(existsSync(join(root, 'out'))).toBe(false);
    expect(existsSync(join(root, 'work'))).toBe(false);
  });

  it('does the same through the one-command recipe script', () => {
    const script = join(__dirname, '..', '..', '..', 'scripts', 'build-fortunes-demo.mjs');
    const root = mkdtempSync(join(tmpdir(), 'fortunes-script-'));
    const r = spawnSync(process.execPath, [script, '--fortunes-dir', join(root, 'absent'), '--out', join(root, 'out')], { encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/apt-get install fortunes fortunes-min/);
    expect(existsSync(join(root, 'out'))).toBe(false);
  });
});

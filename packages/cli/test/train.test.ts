/**
 * `tessera train …` run as a real process (node packages/cli/bin/tessera.mjs) on tiny generated models and tiny JSONL files:
 * usage errors (exit 2), bad data named by file and line before any step (exit 1), a LoRA that learns a small
 * key → value set and writes a PEFT adapter directory, the encoder kinds, and the progress reporter's two styles.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { generateModel, readLoraAdapterConfig } from '@tessera/engine';
import { type CliIo, type ProgressBar, TrainProgressReporter } from '@tessera/engine/cli';

const bin = fileURLToPath(new URL('../bin/tessera.mjs', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'tessera-cli-train-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const WORDS = ['river', 'stone', 'cloud', 'maple', 'tiger', 'ocean', 'ember', 'frost'];
const decoder = join(root, 'decoder');
const encoder = join(root, 'encoder');
const recall = join(root, 'recall.jsonl');
const labeled = join(root, 'labeled.jsonl');

beforeAll(() => {
  generateModel(decoder, { family: 'decoder', seed: 1, sharpen: 10 });
  generateModel(encoder, { family: 'encoder', seed: 2 });
  writeFileSync(recall, `${WORDS.map((w, i) => JSON.stringify({ prompt: `key ${i} ->`, completion: ` ${w}` })).join('\n')}\n`);
  const labels = ['negative', 'neutral', 'positive'];
  writeFileSync(labeled, `${Array.from({ length: 6 }, (_, i) => JSON.stringify({ text: `review number ${i}`, label: i % 2 ? labels[i % 3] : i % 3 })).join('\n')}\n`);
});

function tessera(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [bin, ...args], { cwd: root, timeout: 60_000, env: { ...process.env, ...env } }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('tessera train (a real process)', () => {
  it('--help exits 0; a missing --model, an unknown kind, LoRA flags on a full run and a decoder adapter exit 2', async () => {
    const help = await tessera(['train', '--help']);
    expect(help.code).toBe(0);
    for (const flag of ['--model', '--data', '--out', '--steps', '--lr', '--batch', '--seq-len', '--rank', '--alpha', '--targets', '--seed', '--eval-every', '--warmup']) {
      expect(help.stdout).toContain(flag);
    }
    expect((await tessera(['train', 'lora', '--help'])).code).toBe(0);
    const cases: Array<[string[], RegExp]> = [
      [['train', 'lora', '--data', recall], /--model <dir> is required/],
      [['train', 'prefix', '--model', decoder], /unknown train kind "prefix"/],
      [['train', 'full', '--model', decoder, '--data', recall, '--rank', '4'], /--rank is a LoRA option/],
      [['train', 'adapter', '--model', decoder, '--data', recall], /is a decoder .*adapters and classifiers train an encoder/],
      [['train', 'lora', '--model', decoder, '--data', recall, '--seq-len', '100000'], /--seq-len must be an integer in \[2, 256\]/],
      [['train', 'lora', '--model', decoder, '--data', recall, '--steps', '2', '--targets', 'query'], /target_modules \["query"\] match none/],
    ];
    const results = await Promise.all(cases.map(([args]) => tessera(args)));
    results.forEach((r, i) => {
      expect({ args: cases[i]![0], code: r.code }).toEqual({ args: cases[i]![0], code: 2 });
      expect(r.stderr).toMatch(cases[i]![1]);
    });
  }, 30_000);

  it('bad data exits 1 naming the file and line before any step, and writes nothing', async () => {
    const malformed = join(root, 'malformed.jsonl');
    writeFileSync(malformed, '{"prompt": "a", "completion": " b"}\n\n{"prompt": "c", completion: " d"}\n');
    const badLabel = join(root, 'bad-label.jsonl');
    writeFileSync(badLabel, '{"text": "fine", "label": "positive"}\n{"text": "not fine", "label": 3}\n');
    const out = join(root, 'never');
    const cases: Array<[string[], RegExp]> = [
      [['train', 'lora', '--model', decoder, '--data', malformed], /malformed\.jsonl:3: not valid JSON/],
      [['train', 'classifier', '--model', encoder, '--data', badLabel], /bad-label\.jsonl:2: label 3 is not one of the model's labels/],
      [['train', 'lora', '--model', decoder, '--data', recall, '--seq-len', '6'], /recall\.jsonl:1: prompt \+ completion is \d+ tokens, more than the maximum length 6/],
    ];
    const results = await Promise.all(cases.map(([args]) => tessera([...args, '--out', out])));
    results.forEach((r, i) => {
      expect({ args: cases[i]![0], code: r.code }).toEqual({ args: cases[i]![0], code: 1 });
      expect(r.stderr).toMatch(cases[i]![1]);
      expect(r.stderr).not.toMatch(/step \d/);
      expect(r.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
    });
    expect(existsSync(out)).toBe(false);
  }, 30_000);

  it('train lora learns the key → value set: plain progress lines, a final eval line, a PEFT adapter directory', async () => {
    const out = join(root, 'recall-lora');
    const r = await tessera(
      ['train', 'lora', '--model', decoder, '--data', recall, '--eval-data', recall, '--out', out, '--steps', '60', '--lr', '1e-2',
        '--warmup', '6', '--batch', '8', '--seed', '3', '--rank', '4', '--alpha', '8', '--eval-every', '30', '--log-every', '20'],
      { NO_COLOR: '1' },
    );
    expect(r.stderr).not.toContain('\r');
    expect(r.stderr).not.toContain('\x1b');
    expect(r.code).toBe(0);
    const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('step'));
    expect(lines.map((l) => Number(/^step\s+(\d+)\//.exec(l)![1]))).toEqual([1, 20, 30, 40, 60]);
    for (const l of lines) expect(l).toMatch(/^step\s+\d+\/60 {2}loss \d+\.\d{4} {2}lr \S+ {2}[\d,]+ tokens\/s {2}ETA \d+s/);
    expect(lines[2]).toMatch(/eval \d+\.\d{4}$/);
    const evalLine = r.stdout.split('\n').find((l) => l.startsWith('eval:'))!;
    const evalLoss = Number(/loss (\S+) per token/.exec(evalLine)![1]);
    expect(evalLoss).toBeLessThan(0.1);
    expect(r.stdout).toMatch(/^trained lora, causal-lm on the decoder .*: 60 steps, [\d,]+ trainable parameters, .* tokens\/s\); loss \d+\.\d+ -> \d+\.\d+$/m);
    expect(r.stdout).toContain(`wrote ${out}: adapter_config.json, adapter_model.safetensors`);
    expect(readLoraAdapterConfig(out)).toMatchObject({ r: 4, loraAlpha: 8, taskType: 'CAUSAL_LM', baseModelNameOrPath: decoder });
    expect(JSON.parse(readFileSync(join(out, 'adapter_config.json'), 'utf8')).peft_type).toBe('LORA');
  }, 30_000);

  it('the encoder kinds: classifier (head), adapter (pet.safetensors), full masked LM; --json', async () => {
    const text = join(root, 'text.jsonl');
    writeFileSync(text, '{"text": "the quick brown fox jumps over the lazy dog"}\n{"text": "a second line of plain text"}\n');
    const common = ['--steps', '3', '--batch', '2', '--json'];
    const [head, adapter, mlm] = await Promise.all([
      tessera(['train', 'classifier', '--trainable', 'head', '--model', encoder, '--data', labeled, '--eval-data', labeled, ...common]),
      tessera(['train', 'adapter', '--model', encoder, '--data', labeled, '--bottleneck', '4', '--out', join(root, 'pet'), ...common]),
      tessera(['train', 'full', '--model', encoder, '--data', text, ...common]),
    ]);
    for (const r of [head, adapter, mlm]) expect({ code: r.code, stderr: r.code === 0 ? '' : r.stderr }).toEqual({ code: 0, stderr: '' });
    const h = JSON.parse(head.stdout);
    expect(h).toMatchObject({ kind: 'classifier', trainable: 'head', task: 'classification', family: 'encoder', steps: 3, out: null });
    expect(Number.isFinite(h.evalLoss)).toBe(true);
    expect(h.tokensPerSecond).toBeGreaterThan(0);
    expect(JSON.parse(adapter.stdout)).toMatchObject({ kind: 'adapter', task: 'classification', files: ['pet.safetensors'] });
    expect(existsSync(join(root, 'pet', 'pet.safetensors'))).toBe(true);
    expect(JSON.parse(mlm.stdout)).toMatchObject({ kind: 'full', trainable: 'full', task: 'masked-lm', evalLoss: null });
  }, 30_000);
});

describe('TrainProgressReporter', () => {
  const step = (n: number, extra: { evalLoss?: number } = {}) => ({ step: n, steps: 4, loss: 1 / n, lr: 1e-3, inputTokens: 100, elapsedMs: 500 * n, ...extra });

  it('with a progress bar: one bar for the run, moved each step with the line as its detail, stopped once', () => {
    const calls: string[] = [];
    const err: string[] = [];
    const io: CliIo = {
      stdout: () => {},
      stderr: (t) => err.push(t),
      progressBar: (total, label): ProgressBar => {
        calls.push(`start ${total} ${label}`);
        return { update: (done, detail) => calls.push(`${done} ${detail}`), stop: () => calls.push('stop') };
      },
    };
    const r = new TrainProgressReporter(io, 1);
    for (let i = 1; i <= 4; i++) r.update(step(i, i === 2 ? { evalLoss: 0.5 } : {}));
    r.finish(); // idempotent
    expect(err).toEqual([]);
    expect(calls).toEqual([
      'start 4 training',
      '1 step 1/4  loss 1.0000  lr 1.00e-3  200 tokens/s  ETA 2s',
      '2 step 2/4  loss 0.5000  lr 1.00e-3  200 tokens/s  ETA 1s  eval 0.5000',
      '3 step 3/4  loss 0.3333  lr 1.00e-3  200 tokens/s  ETA 1s  eval 0.5000',
      '4 step 4/4  loss 0.2500  lr 1.00e-3  200 tokens/s  ETA 0s  eval 0.5000',
      'stop',
    ]);
  });

  it('otherwise prints a line on the first step, every N steps, on evaluations and on the last step', () => {
    const err: string[] = [];
    const r = new TrainProgressReporter({ stdout: () => {}, stderr: (t) => err.push(t) }, 3);
    for (let i = 1; i <= 4; i++) r.update(step(i, i === 2 ? { evalLoss: 0.7 } : {}));
    r.finish();
    expect(err.map((l) => l.split('  ')[0])).toEqual(['step 1/4', 'step 2/4', 'step 3/4', 'step 4/4']);
    expect(err[1]).toMatch(/eval 0\.7000$/);
    expect(err[2]).not.toMatch(/eval/);
    expect(r.totalTokens).toBe(400);
  });
});

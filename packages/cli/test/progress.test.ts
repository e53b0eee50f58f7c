/**
 * Progress bars and colours: when each is on (TTY, NO_COLOR, FORCE_COLOR, TERM=dumb), cli-progress drawing on a
 * terminal double, and `tessera train` / `tessera gen model` driving a bar through @tessera/engine/cli.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateModel } from '@tessera/engine';
import { afterAll, describe, expect, it } from 'vitest';

import { barsEnabled, type BarStream, colorEnabled, createProgressBar, main, palette } from '../src/index.js';
import { captureIo } from './support.js';

const ESC = '\x1b';
const scratch = mkdtempSync(join(tmpdir(), 'tessera-cli-progress-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A terminal double: isTTY, 80 columns, everything written kept. */
function terminal(): BarStream & { written: string[] } {
  const written: string[] = [];
  return { isTTY: true, columns: 80, written, write: (chunk: string) => (written.push(chunk), true) };
}

describe('when colours and bars are on', () => {
  it('colours: FORCE_COLOR forces them, NO_COLOR turns them off, otherwise a TTY that is not TERM=dumb', () => {
    const tty = { isTTY: true };
    const pipe = { isTTY: false };
    const cases: Array<[{ isTTY?: boolean }, NodeJS.ProcessEnv, boolean]> = [
      [tty, {}, true],
      [tty, { TERM: 'xterm-256color' }, true],
      [tty, { TERM: 'dumb' }, false],
      [tty, { NO_COLOR: '1' }, false],
      [tty, { NO_COLOR: '' }, true], // an empty NO_COLOR is unset (no-color.org)
      [pipe, {}, false],
      [pipe, { FORCE_COLOR: '1' }, true],
      [pipe, { FORCE_COLOR: '0' }, false],
      [tty, { FORCE_COLOR: 'false' }, true],
      [pipe, { FORCE_COLOR: '1', NO_COLOR: '1' }, true],
      [{}, {}, false],
    ];
    for (const [stream, env, on] of cases) expect({ stream, env, on: colorEnabled(stream, env) }).toEqual({ stream, env, on });
  });

  it('bars: only on a TTY, not TERM=dumb, not under NO_COLOR; FORCE_COLOR does not put one on a pipe', () => {
    const out = { write: () => true };
    expect(barsEnabled({ ...out, isTTY: true }, {})).toBe(true);
    expect(barsEnabled({ ...out, isTTY: true }, { NO_COLOR: '1' })).toBe(false);
    expect(barsEnabled({ ...out, isTTY: true }, { TERM: 'dumb' })).toBe(false);
    expect(barsEnabled({ ...out, isTTY: false }, { FORCE_COLOR: '1' })).toBe(false);
    expect(barsEnabled(out, {})).toBe(false);
  });

  it('the plain palette adds no escape codes; the real one does', () => {
    expect(palette(false).red('x')).toBe('x');
    expect(palette(true).red('x')).toBe(`${ESC}[31mx${ESC}[39m`);
  });
});

describe('createProgressBar (cli-progress on a terminal)', () => {
  it('draws label, bar and detail, redraws in place, cuts at the width and ends with a newline', () => {
    const term = terminal();
    const bar = createProgressBar(term, palette(false))(4, 'training');
    bar.update(2, 'step 2/4  loss 0.5000');
    bar.update(4, 'step 4/4  loss 0.2500');
    bar.stop();
    bar.stop(); // idempotent
    bar.update(3, 'after stop: ignored');
    const text = term.written.join('');
    const frames = term.written.filter((w) => w.startsWith('training '));
    expect(frames[0]).toBe(`training ${'░'.repeat(24)} `);
    expect(frames.at(-1)).toBe(`training ${'█'.repeat(24)} step 4/4  loss 0.2500`);
    expect(frames.every((f) => f.length <= 80)).toBe(true);
    expect(text).toContain(`${ESC}[`); // cursor movement: a redraw in place, not new lines
    expect(text.endsWith('\n')).toBe(true);
    expect(text).not.toContain('after stop');
    expect(text.split('\n')).toHaveLength(2);
  });

  it('coloured when its palette is', () => {
    const term = terminal();
    const bar = createProgressBar(term, palette(true))(2, 'tensors');
    bar.update(1, '1/2 embed');
    bar.stop();
    expect(term.written.join('')).toContain(`${ESC}[36mtensors${ESC}[39m`);
  });
});

describe('tessera train and gen with a progress bar', () => {
  it('train lora draws one bar to its last step and prints the results on stdout, no plain progress lines', async () => {
    const model = join(scratch, 'dec');
    generateModel(model, { family: 'decoder', seed: 1 });
    const data = join(scratch, 'data.jsonl');
    writeFileSync(data, `${['a', 'b', 'c'].map((w, i) => JSON.stringify({ prompt: `key ${i} ->`, completion: ` ${w}` })).join('\n')}\n`);
    const term = terminal();
    const io = captureIo({ progressBar: createProgressBar(term, palette(false)) });
    const code = await main(['train', 'lora', '--model', model, '--data', data, '--steps', '3', '--batch', '2', '--rank', '2'], io);
    expect({ code, err: io.err.filter((l) => !l.startsWith('training lora')) }).toEqual({ code: 0, err: [] });
    const frames = term.written.filter((w) => w.startsWith('training '));
    expect(frames.at(-1)).toMatch(new RegExp(`^training ${'█'.repeat(24)} step 3/3  loss \\d+\\.\\d{4}`));
    expect(term.written.join('').endsWith('\n')).toBe(true);
    expect(io.out.join('\n')).toMatch(/^trained lora, causal-lm on the decoder .*: 3 steps/m);
  });
});

/**
 * Progress bars for long work (training steps, a mini model's tensors) through cli-progress, on stderr. Only on a
 * terminal: a bar is redrawn in place with cursor movements, which a log file or a pipe would keep as noise, so
 * there (and under NO_COLOR or TERM=dumb) the engine prints plain progress lines instead. FORCE_COLOR does not
 * force a bar onto a non-terminal: it is about colours.
 */
import cliProgress from 'cli-progress';
import type { ProgressBar } from '@tessera/engine/cli';

import type { Colors } from './color.js';

/** What a bar draws on: a TTY write stream (process.stderr, or a test double with the same members). */
export interface BarStream {
  isTTY?: boolean;
  columns?: number;
  write(chunk: string): boolean;
}

/** Whether progress is drawn as a bar on `stream`: a TTY, not TERM=dumb, NO_COLOR unset or empty. */
export function barsEnabled(stream: BarStream, env: NodeJS.ProcessEnv): boolean {
  return stream.isTTY === true && env.TERM !== 'dumb' && (env.NO_COLOR === undefined || env.NO_COLOR === '');
}

/**
 * The engine CLI's `progressBar` for `stream`: one cli-progress bar per call, `{label} [bar] {detail}` where the
 * engine's detail carries the step, loss, rate and ETA. Lines are cut at the terminal's width (linewrap) rather
 * than switching wrapping off, and the cursor stays visible, so an interrupted run leaves the terminal as it was.
 */
export function createProgressBar(stream: BarStream, colors: Colors): (total: number, label: string) => ProgressBar {
  return (total, label) => {
    const bar = new cliProgress.SingleBar(
      {
        stream: stream as unknown as NodeJS.WritableStream,
        format: `${colors.cyan('{label}')} ${colors.green('{bar}')} {detail}`,
        barsize: 24,
        hideCursor: false,
        linewrap: true,
        fps: 10,
        gracefulExit: false,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0, { label, detail: '' });
    let stopped = false;
    return {
      update(done, detail) {
        if (!stopped) bar.update(done, { detail });
      },
      stop() {
        if (stopped) return;
        stopped = true;
        bar.stop();
      },
    };
  };
}

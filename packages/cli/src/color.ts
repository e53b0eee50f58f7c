/**
 * Colours through picocolors, decided per stream: FORCE_COLOR (anything but "0" or "false") forces them, NO_COLOR
 * (any non-empty value, https://no-color.org) turns them off, otherwise only a TTY that is not TERM=dumb gets them.
 * picocolors' own default looks at stdout and argv only; the CLI decides for stdout and stderr separately, so
 * `tessera … 2>log` keeps colours on the terminal and none in the file.
 */
import picocolors from 'picocolors';

export type Colors = ReturnType<typeof picocolors.createColors>;

/** The parts of a stream the decision reads (process.stdout / process.stderr, or a test double). */
export interface StreamLike {
  isTTY?: boolean;
}

export function colorEnabled(stream: StreamLike, env: NodeJS.ProcessEnv): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined && force !== '' && force !== '0' && force !== 'false') return true;
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  return stream.isTTY === true && env.TERM !== 'dumb';
}

/** A picocolors palette: real colours when `enabled`, identity functions (no escape codes at all) otherwise. */
export function palette(enabled: boolean): Colors {
  return picocolors.createColors(enabled);
}

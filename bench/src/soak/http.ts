/** HTTP helpers of the soak bench's clients: JSON calls, an incremental SSE reader, Prometheus text. */

/** An error a client observed: what it asked, and what went wrong (kept verbatim for the report). */
export class SoakClientError extends Error {}

export async function postJson(url: string, body: unknown, signal?: AbortSignal): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: kept as text for the error report
  }
  return { status: res.status, body: parsed };
}

export async function getJson(url: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url);
  const text = await res.text();
  try {
    return { status: res.status, body: JSON.parse(text) };
  } catch {
    return { status: res.status, body: text };
  }
}

/**
 * Reads a server-sent-event body frame by frame: yields each `data:` payload (parsed JSON, or '[DONE]'). A frame
 * that is not JSON is yielded as `{ unparsable: text }` so the caller can count it as an error.
 */
export async function* sseFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<unknown> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!frame.startsWith('data: ')) continue;
      const data = frame.slice('data: '.length);
      if (data === '[DONE]') {
        yield data;
        continue;
      }
      try {
        yield JSON.parse(data);
      } catch {
        yield { unparsable: data };
      }
    }
  }
  if (buffer.trim()) yield { unparsable: buffer };
}

/** The sum of every series of a Prometheus metric (any labels), or null when the text has none. */
export function metricSum(text: string, name: string): number | null {
  let sum: number | null = null;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!(rest.startsWith('{') || rest.startsWith(' '))) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) sum = (sum ?? 0) + value;
  }
  return sum;
}

export async function metrics(address: string): Promise<string> {
  const res = await fetch(`${address}/metrics`);
  return res.text();
}

export function isAbort(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || (err.cause instanceof Error && err.cause.name === 'AbortError'));
}

export function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? ` (${err.cause.message})` : '';
  return `${err.message}${cause}`;
}

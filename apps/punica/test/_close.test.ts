import { it } from 'vitest';
import { makeFixture, serve } from './support/fixture.js';
it('close timing', async () => {
  const f = makeFixture();
  for (const mode of ['none', 'health', 'gen', 'stream']) {
    const app = await serve(f);
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    if (mode === 'health') await (await fetch(`${address}/health`)).text();
    if (mode === 'gen') await (await fetch(`${address}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'alpha', prompt: 'x', max_tokens: 3 }) })).text();
    if (mode === 'stream') await (await fetch(`${address}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'alpha', prompt: 'x', max_tokens: 3, stream: true }) })).text();
    const t = performance.now();
    await app.close();
    console.log(mode, performance.now() - t);
  }
  f.cleanup();
});

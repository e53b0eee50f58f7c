/**
 * The docs browser check itself: on a small site with one of each defect (a link to a missing page, a link to a
 * missing anchor, a broken image, a script error), every defect is reported and the sound links are not. Needs
 * Debian's chromium (skipped with a message where it is absent; .ci/run installs it, so CI always runs it).
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ESM script without types
import { checkSite, chromiumPath, fileFor } from './browser.mjs';

const root = mkdtempSync(join(tmpdir(), 'tessera-docs-check-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function site(): string {
  const dist = join(root, 'dist');
  mkdirSync(join(dist, 'guide'), { recursive: true });
  const page = (body: string) => `<!doctype html><html><head><link rel="icon" href="data:,"></head><body>${body}</body></html>`;
  writeFileSync(join(dist, 'index.html'), page('<h1 id="top">Home</h1><a href="/guide/start#install">ok</a> <a href="/guide/missing">gone</a> <a href="/guide/start#nowhere">no anchor</a>'));
  writeFileSync(join(dist, 'guide', 'start.html'), page('<h2 id="install">Install</h2><img src="/missing.png" alt="x"><script>throw new Error("boom")</script><a href="/#top">home</a>'));
  return dist;
}

describe('docs browser check', () => {
  it('maps clean URLs to files', () => {
    const dist = site();
    expect(fileFor(dist, '/')).toBe(join(dist, 'index.html'));
    expect(fileFor(dist, '/guide/start')).toBe(join(dist, 'guide', 'start.html'));
    expect(fileFor(dist, '/guide/missing')).toBeNull();
    expect(fileFor(dist, '/../../etc/passwd')).toBeNull();
  });

  it.skipIf(!existsSync(chromiumPath()))('reports every broken link, anchor, image and script error, and nothing else', async () => {
    const report = await checkSite({ dist: site(), outDir: join(root, 'out'), search: false, sections: { home: '/' } });
    expect(report.pages).toBe(2);
    const problems = report.problems.join('\n');
    expect(problems).toMatch(/link to a missing page \/guide\/missing/);
    expect(problems).toMatch(/link to a missing anchor \/guide\/start#nowhere/);
    expect(problems).toMatch(/broken image .*missing\.png/);
    expect(problems).toMatch(/uncaught boom/);
    expect(problems).not.toMatch(/#install|#top/);
    expect(existsSync(join(root, 'out', 'home.png'))).toBe(true);
  }, 60_000);
});

// The docs site in a real browser: Debian's chromium driven by playwright-core opens every page of the built site
// (docs/.vitepress/dist, served here on localhost with VitePress's clean URLs) and fails on what a reader would hit:
// a console error or uncaught exception, a same-origin request answered 4xx/5xx, a broken image, an internal link to
// a page that does not exist or to an anchor the page does not have. It also asks the local search a question and
// expects answers, and saves one screenshot per sidebar section under docs/.test-output/ (a CI artifact).
//
// Usage: node docs/test/browser.mjs [--chromium <path>]   (after `pnpm --filter @tessera/docs build`)
// Chromium: --chromium, else $CHROMIUM_PATH, else /usr/bin/chromium (Debian's package `chromium`; .ci/run installs it).
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, extname, join, normalize, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const docsDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(docsDir, '.vitepress', 'dist');
const outDir = join(docsDir, '.test-output');

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml',
  '.png': 'image/png', '.json': 'application/json', '.woff2': 'font/woff2', '.ico': 'image/x-icon', '.txt': 'text/plain',
};

function argValue(flag) {
  const i = process.argv.indexOf(flag);
  return i === -1 ? undefined : process.argv[i + 1];
}

/** The file a URL path maps to under a clean-URL VitePress build, or null. */
export function fileFor(root, urlPath) {
  const path = normalize(decodeURIComponent(urlPath)).replace(/^(\.\.[/\\])+/, '');
  const candidates = path.endsWith('/') ? [join(path, 'index.html')] : [path, `${path}.html`, join(path, 'index.html')];
  for (const c of candidates) {
    const file = join(root, c);
    if (!file.startsWith(root)) continue;
    if (existsSync(file) && statSync(file).isFile()) return file;
  }
  return null;
}

function serve(root) {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const file = fileFor(root, url.pathname);
    if (!file) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
  });
  return new Promise((resolveListen) => server.listen(0, '127.0.0.1', () => resolveListen(server)));
}

/** The page a link names, without hash or query, as the server resolves it ('' = the home page). */
function pageKey(url) {
  const u = new URL(url);
  return u.pathname.replace(/\.html$/, '').replace(/\/index$/, '/');
}

/** Where chromium is: --chromium, $CHROMIUM_PATH, else Debian's /usr/bin/chromium. */
export function chromiumPath() {
  return argValue('--chromium') ?? process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
}

/**
 * Opens every page of the built site under `dist` reachable from '/', and returns { pages, searchAnswers, problems }.
 * `search`: ask the VitePress local search (the real site); `sections`: name → path, one screenshot each into `outDir`.
 */
export async function checkSite({ dist, outDir, executablePath = chromiumPath(), search = true, sections = {} }) {
  if (!existsSync(join(dist, 'index.html'))) throw new Error(`no built site at ${dist}: run \`pnpm --filter @tessera/docs build\` first`);
  if (!existsSync(executablePath)) {
    throw new Error(`chromium not found at ${executablePath}: install Debian's package (apt-get install chromium) or pass --chromium <path> / CHROMIUM_PATH`);
  }
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });

  const server = await serve(dist);
  const origin = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-gpu'] });
  const problems = [];
  const pages = new Map(); // page key → { ids, links: [{ href, from }] }
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const queue = ['/'];
    const seen = new Set(['/']);
    while (queue.length > 0) {
      const path = queue.shift();
      const page = await context.newPage();
      const where = `page ${path}`;
      page.on('console', (m) => m.type() === 'error' && problems.push(`${where}: console error: ${m.text()}${m.location().url ? ` (${m.location().url})` : ''}`));
      page.on('pageerror', (e) => problems.push(`${where}: uncaught ${e.message}`));
      page.on('response', (r) => r.url().startsWith(origin) && r.status() >= 400 && problems.push(`${where}: ${r.status()} for ${r.url()}`));
      const response = await page.goto(origin + path, { waitUntil: 'networkidle' });
      if (!response || response.status() !== 200) {
        problems.push(`${where}: answered ${response?.status() ?? 'nothing'}`);
        await page.close();
        continue;
      }
      await settled(page);
      const found = await page.evaluate(() => ({
        ids: [...document.querySelectorAll('[id]')].map((e) => e.id),
        links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
        brokenImages: [...document.querySelectorAll('img')].filter((i) => !i.complete || i.naturalWidth === 0).map((i) => i.src),
      }));
      for (const src of found.brokenImages) problems.push(`${where}: broken image ${src}`);
      pages.set(pageKey(origin + path), { ids: new Set(found.ids), links: found.links.filter((h) => h.startsWith(origin)) });
      for (const href of found.links) {
        if (!href.startsWith(origin)) continue;
        const u = new URL(href);
        const target = u.pathname;
        if (extname(target) && extname(target) !== '.html') continue; // assets: checked by the responses above
        if (!seen.has(target)) {
          seen.add(target);
          queue.push(target);
        }
      }
      await page.close();
    }

    // Every internal link resolves to a visited page, and its anchor exists there.
    for (const [from, { links }] of pages) {
      for (const href of links) {
        const u = new URL(href);
        if (extname(u.pathname) && extname(u.pathname) !== '.html') {
          if (!fileFor(dist, u.pathname)) problems.push(`page ${from}: link to a missing file ${u.pathname}`);
          continue;
        }
        const target = pages.get(pageKey(href));
        if (!target) {
          problems.push(`page ${from}: link to a missing page ${u.pathname}`);
          continue;
        }
        const anchor = decodeURIComponent(u.hash.slice(1));
        if (anchor && !target.ids.has(anchor)) problems.push(`page ${from}: link to a missing anchor ${u.pathname}#${anchor}`);
      }
    }

    const answers = search ? await askSearch(context, origin, outDir, problems) : 0;

    // One screenshot per section.
    for (const [name, path] of Object.entries(sections)) {
      const shot = await context.newPage();
      await shot.goto(origin + path, { waitUntil: 'networkidle' });
      await shot.screenshot({ path: join(outDir, `${name}.png`) });
      await shot.close();
    }

    const report = { pages: pages.size, searchAnswers: answers, problems };
    writeFileSync(join(outDir, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
    return report;
  } finally {
    await browser.close();
    server.close();
  }
}

/**
 * Waits until the page's DOM stops changing. `networkidle` comes before the client has finished hydrating a large
 * page (the API pages run to 0.9 MB), and a count taken then misses half the headings' ids: the CI run on a slower
 * host reported 131 anchors of /api/@tessera/pet-ops as missing that the settled page has.
 */
async function settled(page, { intervalMs = 250, stableFor = 3, timeoutMs = 20_000 } = {}) {
  // Vue sets __vue_app__ on the container once the app has mounted (hydration done).
  const size = () => page.evaluate(() => `${document.readyState}${document.querySelector('#app')?.__vue_app__ ? '' : ' hydrating'} ${document.querySelectorAll('[id]').length} ${document.querySelectorAll('a[href]').length}`);
  const deadline = Date.now() + timeoutMs;
  let last = await size();
  let same = 0;
  while (same < stableFor && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, intervalMs));
    const now = await size();
    same = now === last && /^complete \d/.test(now) ? same + 1 : 0;
    last = now;
  }
}

/** Opens the VitePress local search on the home page and asks it a question; returns how many answers it listed. */
async function askSearch(context, origin, outDir, problems) {
  const page = await context.newPage();
  await page.goto(`${origin}/`, { waitUntil: 'networkidle' });
  await page.locator('#local-search button').click();
  const input = page.locator('.VPLocalSearchBox input');
  await input.waitFor({ timeout: 10_000 });
  await input.fill('prefix cache');
  const results = page.locator('.VPLocalSearchBox .results li');
  try {
    await results.first().waitFor({ timeout: 10_000 });
  } catch {
    problems.push('search: "prefix cache" found nothing');
  }
  const answers = await results.count();
  await page.screenshot({ path: join(outDir, 'search.png') });
  await page.close();
  return answers;
}

async function main() {
  const sections = { guide: '/guide/getting-started', architecture: '/architecture', servers: '/servers/punica', packages: '/packages/core' };
  const { pages, searchAnswers, problems } = await checkSite({ dist, outDir, sections });
  console.log(`[docs browser test] ${pages} pages opened in chromium; search "prefix cache": ${searchAnswers} answer(s); screenshots in ${outDir}`);
  if (problems.length > 0) {
    console.error(`[docs browser test] ${problems.length} problem(s):\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    process.exitCode = 1;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(`[docs browser test] ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  });
}

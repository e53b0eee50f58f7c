import { existsSync, readFileSync } from 'node:fs';
import { defineConfig } from 'vitepress';

// The API reference is generated from the TypeScript sources by typedoc (`pnpm --filter @tessera/docs api`, part
// of `build` and `dev`) into docs/api/, with its own sidebar; before that first run the section is simply absent.
const apiSidebarFile = new URL('../api/typedoc-sidebar.json', import.meta.url);
const apiSidebar: { text: string; link: string }[] = existsSync(apiSidebarFile) ? JSON.parse(readFileSync(apiSidebarFile, 'utf8')) : [];

export default defineConfig({
  title: 'Tessera',
  description: 'Serve many tenants\' fine-tuned variants of one base model on one accelerator, from Node.',
  cleanUrls: true,
  // A favicon link, so browsers do not ask for a /favicon.ico that is not there (the browser test fails on 404s).
  head: [['link', { rel: 'icon', type: 'image/svg+xml', href: '/favicon.svg' }]],
  lastUpdated: false,
  themeConfig: {
    nav: [
      { text: 'Guide', link: '/guide/getting-started' },
      { text: 'Architecture', link: '/architecture' },
      { text: 'Packages', link: '/packages/native' },
      ...(apiSidebar.length > 0 ? [{ text: 'API', link: '/api/' }] : []),
    ],
    sidebar: [
      {
        text: 'Guide',
        items: [
          { text: 'Getting started', link: '/guide/getting-started' },
          { text: 'The fortunes demo (a model that speaks)', link: '/guide/fortunes-demo' },
          { text: 'Benchmarks', link: '/guide/benchmarks' },
          { text: 'Benchmark results', link: '/guide/results' },
          { text: 'Contributing', link: '/guide/contributing' },
        ],
      },
      { text: 'Architecture', items: [{ text: 'Layers and decisions', link: '/architecture' }] },
      {
        text: 'Servers',
        items: [
          { text: 'Punica (multi-LoRA, OpenAI API)', link: '/servers/punica' },
          { text: 'PetS (many PET tasks, one encoder)', link: '/servers/pets' },
          { text: 'Arlo (static-shape runtimes per length)', link: '/servers/arlo' },
          { text: 'BlockLLM (fine-tunes as chains of shared blocks)', link: '/servers/blockllm' },
          { text: 'HMI (many tenants, hierarchical knowledge)', link: '/servers/hmi' },
        ],
      },
      {
        text: 'Packages',
        items: [
          { text: '@tessera/core', link: '/packages/core' },
          { text: '@tessera/native', link: '/packages/native' },
          { text: '@tessera/engine', link: '/packages/engine' },
          { text: '@tessera/sgmv-kernel', link: '/packages/sgmv-kernel' },
          { text: '@tessera/pet-ops', link: '/packages/pet-ops' },
          { text: '@tessera/batcher', link: '/packages/batcher' },
          { text: 'Coordinated batching (PetS)', link: '/packages/batcher-coordinated' },
          { text: '@tessera/adapter-swap', link: '/packages/adapter-swap' },
          { text: '@tessera/length-scheduler', link: '/packages/length-scheduler' },
          { text: '@tessera/plot-store', link: '/packages/plot-store' },
          { text: '@tessera/block-zoo', link: '/packages/block-zoo' },
          { text: '@tessera/cluster', link: '/packages/cluster' },
          { text: '@tessera/sim', link: '/packages/sim' },
          { text: '@tessera/server-kit', link: '/packages/server-kit' },
          { text: '@tessera/cli (the tessera command)', link: '/packages/cli' },
          { text: '@tessera/bench', link: '/packages/bench' },
        ],
      },
      ...(apiSidebar.length > 0 ? [{ text: 'API reference', collapsed: true, items: apiSidebar }] : []),
    ],
    search: { provider: 'local' },
  },
});

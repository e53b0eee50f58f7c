import { defineConfig } from 'vitepress';

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
    ],
    sidebar: [
      {
        text: 'Guide',
        items: [
          { text: 'Getting started', link: '/guide/getting-started' },
          { text: 'Benchmarks', link: '/guide/benchmarks' },
          { text: 'Contributing', link: '/guide/contributing' },
        ],
      },
      { text: 'Architecture', items: [{ text: 'Layers and decisions', link: '/architecture' }] },
      {
        text: 'Servers',
        items: [
          { text: 'Punica (multi-LoRA, OpenAI API)', link: '/servers/punica' },
          { text: 'PetS (many PET tasks, one encoder)', link: '/servers/pets' },
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
          { text: '@tessera/cluster', link: '/packages/cluster' },
          { text: '@tessera/sim', link: '/packages/sim' },
          { text: '@tessera/server-kit', link: '/packages/server-kit' },
          { text: '@tessera/cli (the tessera command)', link: '/packages/cli' },
          { text: '@tessera/bench', link: '/packages/bench' },
        ],
      },
    ],
    search: { provider: 'local' },
  },
});

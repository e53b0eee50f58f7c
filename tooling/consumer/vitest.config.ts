import { defineProject, mergeConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.ts';

// No source condition here: the point is to run what a user installs.
export default mergeConfig(shared, defineProject({ resolve: { conditions: [] }, ssr: { resolve: { conditions: [] } }, test: { name: '@tessera/consumer-check' } }));

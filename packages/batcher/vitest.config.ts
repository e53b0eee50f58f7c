import { defineProject, mergeConfig } from 'vitest/config';
import { shared } from '../../vitest.shared.ts';

// One kernel thread: the tiny test models gain nothing from more, and two test files running side by side on
// the 2-core CI machine would otherwise oversubscribe it (the results do not depend on the thread count).
export default mergeConfig(shared, defineProject({ test: { name: '@tessera/batcher', env: { TESSERA_THREADS: '1' } } }));

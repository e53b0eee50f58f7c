/**
 * From the version tree to the fused call: {@link nativeChain} copies the tables of a version's lookup chain
 * (itself, its parent, …, the root) into {@link NativePlotIndex}es, child first, ready for lookupAggregate. A
 * version's own table never changes after it is made (updates and edits make new versions, A7), so the copy stays
 * exact for as long as the version is not collected (pin it while the copy is in use: collection frees its rows).
 */
import type { PlotVersionTree, VersionId } from '../policy/version-tree.js';
import { NativePlotIndex } from './native-plot-index.js';

/** The chain of `version` as native tables, child first (the caller disposes them). */
export function nativeChain(tree: PlotVersionTree, version: VersionId): NativePlotIndex[] {
  const out: NativePlotIndex[] = [];
  try {
    for (const v of tree.chain(version)) {
      const entries = tree.tableEntries(v);
      const index = new NativePlotIndex({ expectedKeys: entries.length });
      out.push(index);
      for (const [key, row] of entries) index.set(key, row);
    }
  } catch (err) {
    for (const index of out) index.dispose();
    throw err;
  }
  return out;
}

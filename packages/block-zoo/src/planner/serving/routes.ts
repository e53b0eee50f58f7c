/**
 * The candidates of a hop for adaptive serving (design note §4.3, algorithm 5.5): the chain's own block, and the
 * equivalent segments the zoo records (§3.3) that start at the same place. An equivalence is between segments, so a
 * route may stand for several chain blocks (Fig. 12: [FF-L1] ≡ [embed, attn(0), ffn(0)]): the request runs the
 * route's blocks and rejoins its chain after the segment it replaced. Only blocks without a fused fine-tune are
 * replaced: an equivalent of the base would drop the application's own delta.
 */
import type { BlockId } from '../ids.js';
import type { BlockZoo } from '../zoo.js';
import { ServingInvalidError } from './errors.js';

export interface HopRoute {
  /** The blocks to run, in order. */
  blocks: BlockId[];
  /** The family the route's blocks live in (a different one needs stitches in and back). */
  family: string;
  /** The chain's own block (true) or an equivalent segment. */
  designated: boolean;
  requiresStitch: boolean;
  /** The chain position the request continues at after the route (the chain's length when it ends the chain). */
  rejoin: number;
  /** The equivalence score of the edge (null for the designated block). */
  score: number | null;
}

/** The routes for the hop to chain position `position` of `app`: the designated block first, then equivalents by score. */
export function hopRoutes(zoo: BlockZoo, app: string, position: number): HopRoute[] {
  const chain = zoo.chain(app);
  const block = chain.blocks[position];
  if (!Number.isInteger(position) || !block) throw new ServingInvalidError(`position ${position} is outside the chain of ${app} (${chain.blocks.length} blocks)`);
  const routes: HopRoute[] = [{ blocks: [block.blockId], family: chain.family, designated: true, requiresStitch: false, rejoin: position + 1, score: null }];
  if (block.pe !== null || block.span === null) return routes;
  const info = zoo.model(app);
  const weightSet = info.kind === 'pe' ? info.base! : app;
  const seen = new Set<string>();
  for (const { edge, other } of zoo.equivalentsOf(weightSet, block.blockId)) {
    const mine = edge.a.model === weightSet && edge.a.span.start <= block.span.start && block.span.end <= edge.a.span.end ? edge.a : edge.b;
    if (mine.span.start !== block.span.start) continue;
    const rejoin = mine.span.end === chain.blocks.at(-1)!.span!.end ? chain.blocks.length : chain.blocks.findIndex((b) => b.span!.start === mine.span.end);
    if (rejoin < 0) continue;
    if (chain.blocks.slice(position, rejoin).some((b) => b.pe !== null)) continue;
    const blocks = zoo.realize(other).map((b) => b.blockId);
    const own = chain.blocks.slice(position, rejoin).map((b) => b.blockId);
    const key = blocks.join(',');
    if (key === own.join(',') || seen.has(key)) continue;
    seen.add(key);
    routes.push({ blocks, family: zoo.model(other.model).family, designated: false, requiresStitch: edge.requiresStitch, rejoin, score: edge.score });
  }
  const [designated, ...rest] = routes;
  return [designated!, ...rest.sort((a, b) => b.score! - a.score! || (a.blocks.join() < b.blocks.join() ? -1 : 1))];
}

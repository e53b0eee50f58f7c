/**
 * A device worker (protocol.ts): its block instances (BlockRuntimes, each with its own KV cache) over DevicePools
 * under the device's byte budget, and the step programs the coordinator sends. A program's groups run like the
 * ChainExecutor's walk: each group's input is the hidden state its sequences left — the tensor itself or a view
 * when the group is a contiguous run of one tensor's rows, else a gather — so consecutive blocks on this device
 * hand the hidden state on in place. The step's KV appends stay uncommitted until the coordinator ends the step,
 * so a step that fails on any device is rolled back on all of them. A surrogate's group (speculation) runs on a copy
 * of its rows and leaves its prediction under other ids; a repair program of the same step re-runs tentative groups
 * on the real rows, writing their K/V over the tentative ones at the same (uncommitted) positions.
 */
import type { BlockManifest } from '@tessera/block-zoo';
import { blockKvCache, BlockRuntime, variantSignature } from '@tessera/block-zoo/chain';
import { DevicePool, DiskTensorStore } from '@tessera/block-zoo/store';
import { type HostEvent, type Placement, type ProtocolEngine, serveWorkerHost } from '@tessera/cluster';
import { type DecoderStepContext, KvCacheExhaustedError, type PagedKvCache } from '@tessera/engine';
import { cast, Tensor } from '@tessera/native';

import { BlockllmPlacementConflictError, BlockllmPlacementNotFoundError, BlockllmRequestError } from '../errors.js';
import { type DeviceInit, type DeviceProgram, type DeviceProtocol, type DeviceStats, predictionId, type ProgramGroup, type ProgramResult, type RowBlock } from './protocol.js';

type P = DeviceProtocol;

interface Base {
  tensor: Tensor;
  refs: number;
}

interface Rows {
  base: Base;
  row: number;
  rows: number;
}

interface Instance {
  runtime: BlockRuntime;
  pool: string;
  /** Its variant group here (instances of one base block that run as one batch and share a KV cache), or null. */
  group: VariantGroup | null;
  /** Sequences it ran (their K/V in its cache, which its variant group shares). */
  sequences: Set<string>;
  /**
   * Per sequence, the inputs the instance ran it on, position by position (the rows entering the block; the token
   * ids of a block that starts at the embedding): what an overlapped migration recomputes the front of its K/V
   * from. Positions past the cache's committed length are tentative (a failed or repaired step writes them again).
   * `whole`: the log starts at position 0 (a sequence that arrived by a KV move has none).
   */
  inputs: Map<string, InputLog>;
}

interface InputLog {
  width: number;
  rows: Float32Array;
  tokens: number[];
  whole: boolean;
}

/** Instances of one base block on this device that run together: one KV cache, a share of it per variant. */
interface VariantGroup {
  signature: string;
  cache: PagedKvCache | null;
  members: Set<string>;
  /** Variants it was sized for (its cache has slots × kvPages pages). */
  slots: number;
}

/** One step's state on this device. */
interface StepState {
  step: number;
  rowsOf: Map<string, Rows>;
  bases: Set<Base>;
  contexts: DecoderStepContext[];
  prefixed: { rt: BlockRuntime; id: string }[];
}

/** Writes positions [start, start + n) of a sequence's input log (growing it). */
function writeInputs(log: InputLog, start: number, rows: Float32Array | null, tokens: ArrayLike<number>): void {
  const n = tokens.length;
  if (rows && log.width > 0) {
    const need = (start + n) * log.width;
    if (log.rows.length < need) {
      const grown = new Float32Array(Math.max(need, 2 * log.rows.length));
      grown.set(log.rows.subarray(0, start * log.width));
      log.rows = grown;
    }
    log.rows.set(rows, start * log.width);
  }
  log.tokens.length = start;
  for (let i = 0; i < n; i++) log.tokens.push(tokens[i]!);
}

/** A device takes no generation requests: its work comes as admin calls. */
const noRequests: ProtocolEngine<Placement, HostEvent> = {
  submit: () => {
    throw new BlockllmRequestError('TESSERA_UNSUPPORTED', 'a device worker runs step programs, not requests');
  },
  cancel: () => false,
};

serveWorkerHost<Placement, HostEvent, never, P['admin'], P['ready']>(async ({ workerData }) => {
  const init = workerData as DeviceInit;
  const store = DiskTensorStore.open(init.zooDir);
  const pools = new Map<string, DevicePool>();
  const instances = new Map<string, Instance>();
  const started = performance.now();
  let busyMs = 0;

  const residentBytes = () => [...pools.values()].reduce((n, p) => n + p.stats().residentBytes, 0);
  const poolOf = (key: string) => {
    let pool = pools.get(key);
    if (!pool) pools.set(key, (pool = new DevicePool(store, { budgetBytes: init.budgetBytes })));
    return pool;
  };
  const instance = (key: string) => {
    const i = instances.get(key);
    if (!i) throw new BlockllmPlacementNotFoundError(`${init.device} holds no instance ${key}`);
    return i;
  };

  /**
   * The steps in flight here, by step number (several when the coordinator pipelines cohorts of sequences: their
   * sequences are disjoint): each step's hidden rows per sequence, its prepared contexts and the prefixes it wrote,
   * kept until the coordinator ends it (commit or abort).
   */
  const steps = new Map<number, StepState>();
  const stepState = (step: number): StepState => {
    let s = steps.get(step);
    if (!s) steps.set(step, (s = { step, rowsOf: new Map(), bases: new Set(), contexts: [], prefixed: [] }));
    return s;
  };

  const drop = (s: StepState, r: Rows | undefined) => {
    if (r && --r.base.refs === 0) {
      r.base.tensor.dispose();
      s.bases.delete(r.base);
    }
  };
  const newBase = (s: StepState, tensor: Tensor): Base => {
    const b = { tensor, refs: 0 };
    s.bases.add(b);
    return b;
  };
  const endStep = (s: StepState, commit: boolean) => {
    steps.delete(s.step);
    try {
      if (commit) for (const c of s.contexts) c.commit();
    } finally {
      // Newest first: a speculation's repair re-prepares sequences a tentative group reserved pages for, and an
      // abort must undo the later reservation before the earlier one.
      for (const c of [...s.contexts].reverse()) c.dispose();
      for (const b of s.bases) b.tensor.dispose();
      if (!commit) for (const { rt, id } of s.prefixed) rt.release(id);
    }
  };
  const release = (ids: readonly string[]) => {
    for (const id of ids) {
      for (const i of instances.values()) {
        i.runtime.release(id);
        i.inputs.delete(id);
        i.sequences.delete(id);
      }
    }
  };
  const variantGroups: VariantGroup[] = [];
  /** The variant group a new instance joins (one with a free slot), or a new one; null when it runs alone. */
  const joinGroup = (manifest: BlockManifest, pool: string, variants: number): VariantGroup | null => {
    const signature = variantSignature(manifest);
    if (!init.variantBatching || pool !== 'shared' || signature === null) return null;
    let g = variantGroups.find((x) => x.signature === signature && x.members.size < x.slots);
    if (!g) {
      const slots = Math.max(1, variants);
      g = { signature, cache: blockKvCache(manifest, init.kvPages * slots, poolOf(pool).backend), members: new Set(), slots };
      variantGroups.push(g);
    }
    return g;
  };
  const dropIfEmpty = (g: VariantGroup) => {
    if (g.members.size > 0 || !variantGroups.includes(g)) return;
    g.cache?.dispose();
    variantGroups.splice(variantGroups.indexOf(g), 1);
  };
  const leaveGroup = (key: string, i: Instance) => {
    const g = i.group;
    if (!g) return;
    // Its sequences' K/V go with it (the cache stays with the group's other variants).
    for (const id of i.sequences) i.runtime.release(id);
    g.members.delete(key);
    dropIfEmpty(g);
  };

  /** The group's input: one base's rows in order → that tensor or a view; else a gather into a new base. */
  function gather(st: StepState, ids: readonly string[]): { input: Tensor; view: Tensor | null; copied: number } {
    const parts = ids.map((id) => {
      const r = st.rowsOf.get(id);
      if (!r) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `${init.device}: sequence ${id} has no hidden state here (step ${st.step})`);
      return r;
    });
    const first = parts[0]!.base;
    const total = parts.reduce((n, r) => n + r.rows, 0);
    let next = parts[0]!.row;
    const contiguous = parts.every((r) => {
      const ok = r.base === first && r.row === next;
      next += r.rows;
      return ok;
    });
    if (contiguous) {
      if (parts[0]!.row === 0 && total === first.tensor.shape[0]) return { input: first.tensor, view: null, copied: 0 };
      const view = first.tensor.rows(parts[0]!.row, total);
      return { input: view, view, copied: 0 };
    }
    const base = newBase(st, Tensor.empty([total, first.tensor.shape[1]!], 'f32', first.tensor.backend));
    let row = 0;
    ids.forEach((id, k) => {
      const r = parts[k]!;
      const src = r.base.tensor.rows(r.row, r.rows);
      const dst = base.tensor.rows(row, r.rows);
      try {
        cast(src, 'f32', { out: dst });
      } finally {
        src.dispose();
        dst.dispose();
      }
      drop(st, r);
      base.refs++;
      st.rowsOf.set(id, { base, row, rows: r.rows });
      row += r.rows;
    });
    return { input: base.tensor, view: null, copied: total };
  }

  /**
   * Runs program groups as one batch: one group, or several variants of one base block (their instances in one
   * variant group, sharing a KV cache), each row keyed to its own instance's delta, so the base weights pass once.
   */
  function runGroups(st: StepState, groups: readonly ProgramGroup[], result: ProgramResult): void {
    const { rowsOf } = st;
    const g0 = performance.now();
    const parts = groups.map((group) => ({ group, inst: instance(group.instance) }));
    const rt = parts[0]!.inst.runtime;
    for (const { group, inst } of parts) {
      for (const s of group.seqs) {
        if (inst.runtime.admitPrefix(s.id)) st.prefixed.push({ rt: inst.runtime, id: s.id });
        inst.sequences.add(s.id);
      }
    }
    const ctx = BlockRuntime.prepareTogether(parts.map(({ group, inst }) => ({ runtime: inst.runtime, sequences: group.seqs })));
    st.contexts.push(ctx);
    const seqs = parts.flatMap(({ group }) => group.seqs);
    const ids = seqs.map((s) => s.id);
    const predict = parts.length === 1 && parts[0]!.group.predict === true;
    // A surrogate's group writes its prediction under other ids, on a copy: the real block reads the rows after it.
    const outIds = predict ? ids.map(predictionId) : ids;
    let { input, view, copied } = rt.startsAtTokens ? { input: null, view: null, copied: 0 } : gather(st, ids);
    if (predict && input !== null) {
      const base = newBase(st, Tensor.empty([input.shape[0]!, input.shape[1]!], 'f32', input.backend));
      cast(input, 'f32', { out: base.tensor });
      view?.dispose();
      let row = 0;
      outIds.forEach((id, k) => {
        const rows = rowsOf.get(ids[k]!)!.rows;
        drop(st, rowsOf.get(id));
        base.refs++;
        rowsOf.set(id, { base, row, rows });
        row += rows;
      });
      copied += row;
      input = base.tensor;
      view = null;
    }
    result.copiedRows += copied;
    const cache = rt.cache;
    if (init.inputLog && cache && !predict) {
      // The block's inputs, before it runs on them in place (a recompute of its K/V starts from them).
      const width = input ? input.shape[1]! : 0;
      const host = input ? (input.toArray() as Float32Array) : null;
      let row = 0;
      for (const { group, inst } of parts) {
        for (const s of group.seqs) {
          if (!inst.runtime.prefix) {
            const start = cache.length(s.id);
            let log = inst.inputs.get(s.id);
            if (!log) inst.inputs.set(s.id, (log = { width, rows: new Float32Array(0), tokens: [], whole: start === 0 }));
            writeInputs(log, start, host && host.subarray(row * width, (row + s.tokens.length) * width), s.tokens);
          }
          row += s.tokens.length;
        }
      }
    }
    try {
      const out = rt.run(input, ctx, 'last');
      if (out.logits) {
        const vocab = out.logits.shape[1]!;
        const host = out.logits.toArray() as Float32Array;
        out.logits.dispose();
        ids.forEach((id, r) => result.logits.push({ id, data: host.slice(r * vocab, (r + 1) * vocab) }));
      }
      if (rt.startsAtTokens) {
        const base = newBase(st, out.hidden!);
        let row = 0;
        seqs.forEach((s, k) => {
          drop(st, rowsOf.get(outIds[k]!));
          base.refs++;
          rowsOf.set(outIds[k]!, { base, row, rows: s.tokens.length });
          row += s.tokens.length;
        });
      }
    } finally {
      view?.dispose();
    }
    if (rt.endsAtLogits) for (const id of ids) drop(st, rowsOf.get(id)), rowsOf.delete(id);
    // Each instance's share of the batch's time, by its rows (the route's profile is per instance).
    const ms = performance.now() - g0;
    if (parts.length > 1) result.variantBatches++;
    for (const { group } of parts) {
      const rows = group.seqs.reduce((n, s) => n + s.tokens.length, 0);
      result.runs.push({ instance: group.instance, rows, apps: new Set(group.seqs.map((s) => s.app)).size, ms: (ms * rows) / Math.max(1, ctx.rows) });
    }
  }

  function run(program: DeviceProgram): ProgramResult {
    // Each step is ended by the coordinator (commit or abort); several may be open here at once.
    release(program.release);
    const st = stepState(program.step);
    const { rowsOf } = st;
    const t0 = performance.now();
    const result: ProgramResult = { logits: [], exports: null, computeMs: 0, copiedRows: 0, variantBatches: 0, runs: [] };
    if (program.imports) {
      const { ids, rows, width, data } = program.imports;
      // A sequence's rows arrive once: a second copy would drop the first's reference and could free its tensor.
      if (new Set(ids).size !== ids.length) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `${init.device}: step ${program.step} imports some sequence's rows twice (${ids.join(', ')})`);
      const base = newBase(st, Tensor.from(data, [data.length / width, width]));
      let row = 0;
      ids.forEach((id, k) => {
        drop(st, rowsOf.get(id));
        base.refs++;
        rowsOf.set(id, { base, row, rows: rows[k]! });
        row += rows[k]!;
      });
    }
    // Consecutive groups of variants of one base block (one variant group here: a shared KV cache) run as one batch.
    const groups = program.groups;
    for (let g = 0; g < groups.length; ) {
      let end = g + 1;
      const group0 = instance(groups[g]!.instance).group;
      if (group0 !== null && !groups[g]!.predict) while (end < groups.length && !groups[end]!.predict && instance(groups[end]!.instance).group === group0) end++;
      runGroups(st, groups.slice(g, end), result);
      g = end;
    }
    if (program.exports.length > 0) {
      const parts = program.exports.map((id) => {
        const r = rowsOf.get(id);
        if (!r) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `${init.device}: sequence ${id} has no hidden state to hand on (step ${st.step})`);
        return r;
      });
      const width = parts[0]!.base.tensor.shape[1]!;
      const total = parts.reduce((n, r) => n + r.rows, 0);
      const data = new Float32Array(total * width);
      let at = 0;
      parts.forEach((r, k) => {
        const view = r.base.tensor.rows(r.row, r.rows);
        try {
          data.set(view.toArray() as Float32Array, at);
        } finally {
          view.dispose();
        }
        at += r.rows * width;
        drop(st, r);
        rowsOf.delete(program.exports[k]!);
      });
      result.exports = { ids: [...program.exports], rows: parts.map((r) => r.rows), width, data } satisfies RowBlock;
    }
    result.computeMs = performance.now() - t0;
    busyMs += result.computeMs;
    return result;
  }

  return {
    engine: noRequests,
    admin: {
      deploy: ({ instance: key, manifest, pool, variants }) => {
        if (instances.has(key)) throw new BlockllmPlacementConflictError(`${init.device} already holds ${key}`);
        const devicePool = poolOf(pool);
        const group = joinGroup(manifest, pool, variants ?? 1);
        // The device's budget covers all its pools together (per-model provisioning keeps one pool per model).
        const before = residentBytes();
        let runtime: BlockRuntime;
        try {
          runtime = new BlockRuntime(manifest, devicePool, { kvPages: init.kvPages, lora: 'delta', maxPositions: init.maxPositions, ...(group?.cache ? { cache: group.cache } : {}) });
        } catch (err) {
          if (group) dropIfEmpty(group);
          throw err;
        }
        const after = residentBytes();
        if (after > init.budgetBytes) {
          runtime.dispose();
          if (group) dropIfEmpty(group);
          throw new BlockllmPlacementConflictError(
            `${key} (${after - before} more bytes) does not fit ${init.device}: ${before} of its ${init.budgetBytes} bytes are in use`,
          );
        }
        group?.members.add(key);
        instances.set(key, { runtime, pool, group, sequences: new Set(), inputs: new Map() });
        return { residentBytes: after };
      },
      evict: ({ instance: key }) => {
        const i = instance(key);
        leaveGroup(key, i);
        i.runtime.dispose();
        instances.delete(key);
        return { residentBytes: residentBytes() };
      },
      run: (program) => {
        const t0 = performance.now();
        try {
          return run(program);
        } catch (err) {
          busyMs += performance.now() - t0;
          throw err;
        }
      },
      end: ({ step, commit, release: ids }) => {
        const st = steps.get(step);
        if (st) endStep(st, commit);
        release(ids);
        return null;
      },
      exportKv: ({ instance: key, ids, from }) => {
        const cache = instance(key).runtime.cache;
        if (!cache) return { sequences: [] };
        return { sequences: ids.filter((id) => cache.hasSequence(id)).map((id) => ({ id, snapshot: cache.exportSequence(id, from?.[id] ?? 0) })) };
      },
      exportInputs: ({ instance: key, ids }) => {
        const i = instance(key);
        const cache = i.runtime.cache;
        if (!cache) return { sequences: [] };
        return {
          sequences: ids.flatMap((id) => {
            const log = i.inputs.get(id);
            if (!log?.whole || !cache.hasSequence(id)) return [];
            const length = cache.length(id);
            return [{ id, length, width: log.width, rows: log.rows.slice(0, length * log.width), tokens: log.tokens.slice(0, length) }];
          }),
        };
      },
      recomputeKv: ({ instance: key, chunk, sequences }) => {
        const i = instance(key);
        const rt = i.runtime;
        if (!rt.cache) throw new BlockllmPlacementConflictError(`${key} on ${init.device} holds no KV cache to recompute into`);
        if (rt.prefix) throw new BlockllmPlacementConflictError(`${key} on ${init.device} is prefix-tuned: its prefix positions have no inputs to recompute from`);
        if (!(Number.isSafeInteger(chunk) && chunk > 0)) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `recompute chunk must be a positive integer, got ${chunk}`);
        const t0 = performance.now();
        let tokens = 0;
        for (const s of sequences) {
          if (rt.cache.hasSequence(s.id)) throw new BlockllmPlacementConflictError(`${key} on ${init.device} already holds sequence ${s.id}`);
          // Chunked prefill of the front, front to back (each position's K/V depends on the earlier ones').
          for (let a = 0; a < s.upTo; a += chunk) {
            const b = Math.min(s.upTo, a + chunk);
            const ctx = rt.prepare([{ id: s.id, tokens: s.tokens.slice(a, b) }]);
            const input = rt.startsAtTokens ? null : Tensor.from(s.rows.slice(a * s.width, b * s.width), [b - a, s.width]);
            try {
              const out = rt.run(input, ctx, 'last');
              out.logits?.dispose();
              if (rt.startsAtTokens) out.hidden?.dispose();
              ctx.commit();
            } finally {
              ctx.dispose();
              input?.dispose();
            }
            tokens += b - a;
          }
          i.inputs.set(s.id, { width: s.width, rows: s.rows, tokens: [...s.tokens], whole: true });
          i.sequences.add(s.id);
        }
        busyMs += performance.now() - t0;
        return { tokens };
      },
      importKv: ({ instance: key, sequences }) => {
        const cache = instance(key).runtime.cache;
        if (!cache) {
          if (sequences.length > 0) throw new BlockllmPlacementConflictError(`${key} on ${init.device} holds no KV cache: ${sequences.length} sequence(s) cannot move into it`);
          return { pages: 0 };
        }
        // All or nothing: a sequence that does not fit undoes the ones imported before it.
        const done: string[] = [];
        try {
          for (const s of sequences) {
            cache.importSequence(s.id, s.snapshot);
            done.push(s.id);
          }
          for (const id of done) instance(key).sequences.add(id);
        } catch (err) {
          for (const id of done) cache.release(id);
          if (err instanceof KvCacheExhaustedError) throw new BlockllmPlacementConflictError(`the KV cache of ${key} on ${init.device} cannot take the ${sequences.length} sequence(s) that move: ${err.message}`);
          throw err;
        }
        return { pages: done.reduce((n, id) => n + cache.pages(id).length, 0) };
      },
      kvPages: ({ instance: key, ids }) => {
        const cache = instance(key).runtime.cache;
        if (!cache) return { cache: false, pages: 0, free: 0 };
        return { cache: true, pages: ids.filter((id) => cache.hasSequence(id)).reduce((n, id) => n + cache.pages(id).length, 0), free: cache.freePages };
      },
      rename: ({ from, to }) => {
        const i = instance(from);
        if (instances.has(to)) throw new BlockllmPlacementConflictError(`${init.device} already holds ${to}`);
        instances.delete(from);
        instances.set(to, i);
        if (i.group?.members.delete(from)) i.group.members.add(to);
        return null;
      },
      stats: (): DeviceStats => ({
        device: init.device,
        budgetBytes: init.budgetBytes,
        residentBytes: residentBytes(),
        instances: [...instances].map(([key, i]) => ({
          instance: key,
          block: i.runtime.manifest.blockId,
          pool: i.pool,
          bytes: i.runtime.manifest.paramBytes,
          sequences: i.runtime.cache ? [...i.sequences].filter((id) => i.runtime.cache!.hasSequence(id)).length : 0,
        })),
        busyMs,
        upMs: performance.now() - started,
      }),
    },
    ready: { device: init.device, backend: poolOf('shared').backend.device },
    async shutdown() {
      for (const st of [...steps.values()]) endStep(st, false);
      for (const [key, i] of instances) {
        leaveGroup(key, i);
        i.runtime.dispose();
      }
      instances.clear();
      for (const p of pools.values()) p.dispose();
    },
  };
});

/**
 * The whole-model reference, run in a child process of its own (the test process never loads the native addon;
 * its engine worker is the one engine it may start): the engine's own DecoderModel over the checkpoint read from
 * disk — the foundation, the foundation with a PEFT LoRA as a LoraDelta, a full fine-tune's checkpoint — greedy,
 * EOS not special. argv[2]: JSON { jobs: { name, modelDir, loraDir? }[], prompt, maxTokens }; prints { name: tokens }.
 */
import { generateBatch, loadDecoder, loadLoraAdapter, LoraDelta, PagedKvCache } from '@tessera/engine';

const { jobs, prompt, maxTokens } = JSON.parse(process.argv[2]!) as { jobs: { name: string; modelDir: string; loraDir?: string }[]; prompt: number[]; maxTokens: number };
const out: Record<string, number[]> = {};
for (const job of jobs) {
  const model = loadDecoder(job.modelDir);
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: 16 }, model.backend);
  const adapter = job.loraDir ? loadLoraAdapter(job.loraDir, { base: model.config }) : null;
  const deltas = adapter ? [new LoraDelta(new Map([[job.name, adapter]]))] : [];
  const [result] = generateBatch(model, [{ prompt, maxTokens, ignoreEos: true, key: adapter ? job.name : null }], { cache, deltas });
  out[job.name] = result!.tokens;
  adapter?.dispose();
  cache.dispose();
  model.dispose();
}
process.stdout.write(`${JSON.stringify(out)}\n`);

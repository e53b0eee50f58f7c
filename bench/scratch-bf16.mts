import { gemm, Tensor, getCpuBackend, deviceInfo, cast } from '@tessera/native';
console.log(deviceInfo(getCpuBackend()).features);
const rnd = (n: number) => { const a = new Float32Array(n); for (let i = 0; i < n; i++) a[i] = Math.random() - 0.5; return a; };
for (const [n, k] of [[4096, 4096], [11008, 4096], [4096, 11008]] as const) {
  const w32 = Tensor.from(rnd(n * k), [n, k]);
  const wb = cast(w32, 'bf16');
  for (const m of [1, 8, 32, 128, 512]) {
    const a = Tensor.from(rnd(m * k), [m, k]);
    const out = Tensor.zeros([m, n]);
    const time = (f: () => void) => { f(); const reps = m <= 8 ? 20 : m <= 128 ? 6 : 3; const ts: number[] = []; for (let r = 0; r < reps; r++) { const t0 = performance.now(); f(); ts.push(performance.now() - t0); } ts.sort((x, y) => x - y); return ts[reps >> 1]!; };
    const tf = time(() => gemm(a, w32, { transB: true, out }));
    const tbw = time(() => gemm(a, wb, { transB: true, out }));
    const tbc = time(() => gemm(a, wb, { transB: true, out, compute: 'bf16' }));
    const gf = (t: number) => (2 * m * n * k / t / 1e6).toFixed(0);
    console.log(`n=${n} k=${k} m=${m}: f32 ${tf.toFixed(2)}ms (${gf(tf)} GF) bf16w ${tbw.toFixed(2)}ms bf16c ${tbc.toFixed(2)}ms (${gf(tbc)} GF) ratio f32/bf16c ${(tf / tbc).toFixed(2)}`);
    a.dispose(); out.dispose();
  }
  w32.dispose(); wb.dispose();
}

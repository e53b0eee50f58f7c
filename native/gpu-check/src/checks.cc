// Every kernel family against the CPU's scalar references (cpu/kernels.h `_ref`, accumulating in double), on random,
// ragged (odd sizes, tails, unaligned starts, uneven segments) and empty shapes. The shapes and tolerances are the
// ones native/test/*.test.ts use for the same kernels through the addons; each tolerance is stated beside its check
// and printed with any failure.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "../../cpp/core/dtype.h"
#include "../../cpp/core/error.h"
#include "../../cpp/cpu/kernels.h"
#include "compare.h"
#include "report.h"
#include "target.h"

namespace tessera::gpucheck {

namespace {

std::string g_current;
std::function<void(const std::string&)> g_on_begin;
std::function<void(const CheckResult&)> g_on_result;

class Ctx {
 public:
  Ctx(Target& t, Report& r, std::string family, std::string prefix) : t(t), r_(r), family_(std::move(family)), prefix_(std::move(prefix)) {}

  // Runs one comparison and records it. A target failure (a CUDA error) is recorded as this check's failure; if the
  // target cannot even synchronise afterwards (a sticky fault), the family stops here with that error.
  void check(const std::string& name, const std::function<Cmp()>& fn) {
    g_current = family_ + ": " + prefix_ + name;
    if (g_on_begin) g_on_begin(g_current);
    CheckResult res;
    res.part = t.part();
    res.family = family_;
    res.name = prefix_ + name;
    bool target_failed = false;
    try {
      Cmp c = fn();
      res.pass = c.ok;
      res.ratio = c.ratio;
      res.detail = c.detail;
    } catch (const std::exception& e) {
      res.pass = false;
      res.ratio = INFINITY;
      res.detail = std::string("threw: ") + e.what();
      target_failed = true;
    }
    if (g_on_result) g_on_result(res);
    r_.add(res);
    if (target_failed) t.sync();  // throws if the device is lost: the caller records the rest of the family as not run
  }

  Target& t;

 private:
  Report& r_;
  std::string family_, prefix_;
};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  bool first = true;
  for (int64_t v : d) {
    s += (first ? "" : "x") + std::to_string(v);
    first = false;
  }
  return s + "]";
}

constexpr double kU = 1.0 / 16777216.0;  // f32 unit roundoff 2^-24

// ---------------------------------------------------------------- GEMM

struct GemmCase {
  int64_t m, n, k;
  int64_t batch = 0;  // 0: a plain gemm; >= 1 (or the empty batch below): gemm_batched
  bool batched = false, shared_b = false, ta = false, tb = false;
  float alpha = 1, beta = 0;
  bool bias = false;
};

// B data in dtype (raw bits for f16 / bf16) and the f32 values it encodes (exact in that dtype).
void random_b(size_t n, uint64_t seed, DType dt, std::vector<uint8_t>& raw, std::vector<float>& values) {
  Rng r(seed);
  values.resize(n);
  raw.resize(n * dtype_size(dt));
  for (size_t i = 0; i < n; ++i) {
    float v = r.uniform(-1.f, 1.f);
    if (dt == DType::BF16) {
      const bf16_t h = f32_to_bf16(v);
      std::memcpy(raw.data() + 2 * i, &h, 2);
      v = bf16_to_f32(h);
    } else if (dt == DType::F16) {
      v = std::round(v * 1024.f) / 1024.f;  // j / 1024: exact in f16
      const f16_t h = f32_to_f16(v);
      std::memcpy(raw.data() + 2 * i, &h, 2);
      v = f16_to_f32(h);
    } else {
      std::memcpy(raw.data() + 4 * i, &v, 4);
    }
    values[i] = v;
  }
}

void gemm_family(Ctx& c) {
  std::vector<GemmCase> cases = {
      {1, 33, 70, 0, false, false, false, true, 1, 0, true},        // decode row (CUDA skinny, one chunk)
      {3, 130, 1500, 0, false, false, false, true, 0.5f, 0, false},  // two k chunks, k odd
      {8, 77, 1032, 0, false, false, false, true, 1, 0.75f, true},   // 16-byte loads, beta and bias
      {5, 40, 1100, 0, false, false, false, false, 1, 0, false},     // [k, n] B
      {6, 19, 9, 0, false, false, true, false, 1, 0, false},         // transA
      {9, 15, 7, 0, false, false, false, false, 1, 0, false},        // small: SIMT
      {12, 100, 33, 0, false, false, true, true, 1, -1, false},
      {16, 16, 16, 0, false, false, false, false, 1, 0, false},      // one tensor-core tile
      {40, 50, 60, 0, false, false, false, false, 1, 0, true},
      {130, 129, 77, 0, false, false, false, true, -2, 0.5f, false},  // ragged tiles on every side
      {77, 200, 300, 0, false, false, true, false, 1, 0, false},
      {33, 47, 0, 0, false, false, false, false, 1, 1, true},         // k = 0: C = beta C + bias
      {0, 5, 3, 0, false, false, false, false, 1, 0, false},          // empty
      {4, 0, 3, 0, false, false, false, false, 1, 0, false},          // empty
      {3, 20, 24, 40, true, false, false, true, 1, 0.5f, true},       // batched
      {4, 5, 31, 17, true, true, false, false, 1, 0, false},          // batched, shared B
      {2, 70, 33, 19, true, true, true, true, 1, 0, false},
      {0, 4, 4, 4, true, false, false, false, 1, 0, false},           // empty batch
      {3, 300, 260, 24, true, false, false, true, 1, 0, true},
  };
  // Enough output tiles that CUDA's auto path uses its 128x128 tensor-core tiles (the CPU has no such switch, and
  // the double reference of this size would dominate the CPU part's time at every ISA).
  // The same for the Linear-layout (A [m,k], B [n,k]) kernel, which auto picks once its 128x128 tiles fill half the
  // SMs: ragged tiles on every side and a partial last k tile (72 = 2 x 32 + 8 for half B, 4 x 16 + 8 for TF32).
  if (c.t.part() == "cuda") {
    cases.push_back({3, 900, 900, 24, true, false, false, true, 1, 0, true});
    cases.push_back({1030, 1100, 72, 0, false, false, false, true, 1, 0.5f, true});
    cases.push_back({2, 600, 1000, 40, true, false, false, true, -1, 0, false});
  }
  // The CPU's bf16-compute tile kernels (bf16 weights, tB, m > 8): whole 32 x 32 tile blocks, 48-row panels with a
  // 16-row rest, weight rows short of a tile, odd k, and two k blocks (k > 16,384).
  if (c.t.part() == "cpu") {
    cases.push_back({64, 96, 1024, 0, false, false, false, true, 1, 0, true});
    cases.push_back({50, 70, 515, 0, false, false, false, true, 0.5f, 0.25f, true});
    cases.push_back({17, 20, 16419, 0, false, false, false, true, 1, 0, false});
  }
  // Batched cases list batch first in the table above; unpack them.
  for (GemmCase& g : cases) {
    if (g.batched) {
      const int64_t b = g.m;
      g.m = g.n;
      g.n = g.k;
      g.k = g.batch;
      g.batch = b;
    }
  }
  uint64_t seed = 100;
  for (const GemmCase& gc : cases) {
    const int64_t batch = gc.batched ? gc.batch : 1;
    for (DType bt : {DType::F32, DType::F16, DType::BF16}) {
      const int64_t m = gc.m, n = gc.n, k = gc.k;
      const std::vector<float> a = random_floats(static_cast<size_t>(batch * m * k), seed++);
      std::vector<uint8_t> braw;
      std::vector<float> bv;
      const int64_t b_entries = gc.shared_b ? 1 : batch;
      random_b(static_cast<size_t>(b_entries * k * n), seed++, bt, braw, bv);
      const std::vector<float> c0 = random_floats(static_cast<size_t>(batch * m * n), seed++);
      const std::vector<float> bias = gc.bias ? random_floats(static_cast<size_t>(n), seed++) : std::vector<float>();
      GemmArgs args;
      args.m = m;
      args.n = n;
      args.k = k;
      args.trans_a = gc.ta;
      args.lda = gc.ta ? m : k;
      args.trans_b = gc.tb;
      args.ldb = gc.tb ? k : n;
      args.b_dtype = bt;
      args.ldc = n;
      args.alpha = gc.alpha;
      args.beta = gc.beta;
      const int64_t sa = gc.batched ? m * k : 0, sb = gc.batched && !gc.shared_b ? k * n : 0, sc = gc.batched ? m * n : 0;
      // The CPU reference (double accumulation, rounded once), and the scales of every rounding error in double.
      // With bf16 compute the reference runs on the bf16-rounded operands (computed when a variant asks for it).
      const std::vector<GemmVariant> variants = c.t.gemm_variants(m, n, k);
      std::vector<float> want = c0, want_bf16;
      for (bool bf16_compute : {false, true}) {
        if (bf16_compute && std::none_of(variants.begin(), variants.end(), [](const GemmVariant& v) { return v.bf16_compute; })) break;
        std::vector<float>& dst = bf16_compute ? want_bf16 : want;
        dst = c0;
        GemmArgs h = args;
        h.a = a.data();
        h.b = braw.data();
        h.c = dst.data();
        h.bias = gc.bias ? bias.data() : nullptr;
        h.bf16_compute = bf16_compute;
        if (gc.batched) cpu::gemm_batched_ref(h, batch, sa, sb, sc);
        else cpu::gemm_ref(h);
      }
      const std::vector<float>& want_f32 = want;
      std::vector<double> abs_sum(want.size()), l2(want.size());
      for (int64_t bi = 0; bi < batch; ++bi) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double sa_ = 0, sq = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double av = gc.ta ? a[bi * sa + p * m + i] : a[bi * sa + i * k + p];
              const double bvv = gc.tb ? bv[bi * sb + j * k + p] : bv[bi * sb + p * n + j];
              sa_ += std::fabs(av * bvv);
              sq += av * bvv * av * bvv;
            }
            const size_t o = static_cast<size_t>(bi * m * n + i * n + j);
            abs_sum[o] = std::fabs(gc.alpha) * sa_ + (gc.beta == 0 ? 0 : std::fabs(gc.beta * c0[o])) + (gc.bias ? std::fabs(bias[j]) : 0);
            l2[o] = std::fabs(gc.alpha) * std::sqrt(sq);
          }
        }
      }
      const std::string shape = (gc.batched ? "batch " + std::to_string(batch) + " " : "") + dims({m, n, k}) +
                                (gc.ta ? " tA" : "") + (gc.tb ? " tB" : "") + (gc.shared_b ? " sharedB" : "") + (gc.bias ? " bias" : "") +
                                (gc.beta != 0 ? " beta" : "") + " B " + dtype_name(bt);
      for (const GemmVariant& v : variants) {
        c.check("gemm " + v.name + " " + shape, [&]() {
          const std::vector<float>& want = v.bf16_compute ? want_bf16 : want_f32;
          Target& t = c.t;
          Buf da = put(t, a), db = put(t, braw), dc = put(t, c0), dbias = put(t, bias);
          GemmArgs d = args;
          d.a = da.as<float>();
          d.b = db.raw();
          d.c = dc.as<float>();
          d.bias = gc.bias ? dbias.as<float>() : nullptr;
          t.gemm(d, gc.batched ? batch : 1, sa, sb, sc, v);
          const std::vector<float> got = get<float>(t, dc, c0.size());
          // Tolerances (u = 2^-24), as native/test/cuda.test.ts states them:
          //   reference (double accumulation, rounded once) vs the CPU reference: 4u |want|;
          //   f32 FMA paths: (k + 2) u sum|alpha a b| (+ |beta c| + |bias|), plus the reference's rounding;
          //   tensor cores: inputs rounded to TF32 (2^-10 for A and B together), f16 (2^-11) or bf16 (2^-9, A only):
          //   8 e ||a b||_2 on top (about 14 standard deviations of the random-sign rounding).
          const double e = bt == DType::F32 ? std::ldexp(1.0, -10) : bt == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -9);
          std::vector<double> tol(want.size());
          for (size_t i = 0; i < tol.size(); ++i) {
            if (v.reference) tol[i] = 4 * kU * std::fabs(want[i]) + 1e-30;
            // bf16 compute: the f32 bound on the rounded operands, whose |a b| exceed the unrounded ones' by < 2^-7.
            else tol[i] = (double(k) + 2) * kU * abs_sum[i] * (v.bf16_compute ? 1.01 : 1.0) + 2 * kU * std::fabs(want[i]) +
                          (v.tensor ? 8 * e * l2[i] : 0) + 1e-30;
          }
          return compare_tol(got, want, tol, v.reference ? "4u|want|" : v.tensor ? "tensor-core bound" : "(k+2)u sum|ab|");
        });
      }
    }
  }
}

// ---------------------------------------------------------------- elementwise

void elementwise_family(Ctx& c) {
  Target& t = c.t;
  const int64_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 33, 1000, 40003};
  for (int64_t n : sizes) {
    const std::vector<float> a = random_floats(static_cast<size_t>(n) + 1, n + 1), b = random_floats(static_cast<size_t>(n) + 1, n + 2);
    const std::vector<float> x = random_floats(static_cast<size_t>(n) + 1, 10 + n, -8, 8), u = random_floats(static_cast<size_t>(n) + 1, 20 + n);
    // offset 1: a start that is not 16-byte aligned (the scalar / unaligned paths)
    for (int64_t off : {0, 1}) {
      const int64_t len = n - off < 0 ? 0 : n - off;
      if (off && n == 0) continue;
      const std::string sz = "n=" + std::to_string(len) + (off ? " unaligned" : "");
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul}) {
        std::vector<float> want(static_cast<size_t>(len));
        cpu::binary_ref(op, a.data() + off, len, b.data() + off, len, want.data());
        for (const Variant& v : t.variants()) {
          c.check(std::string(op == BinaryOp::Add ? "add " : "mul ") + v.name + " " + sz, [&]() {
            Buf da = put(t, a), db = put(t, b), dout(t, static_cast<size_t>(n + 1) * 4);
            t.binary(op, da.as<float>() + off, len, db.as<float>() + off, len, dout.as<float>() + off, v.reference);
            std::vector<float> got = get<float>(t, dout, static_cast<size_t>(n + 1));
            got.erase(got.begin(), got.begin() + off);
            got.resize(static_cast<size_t>(len));
            return compare_bitwise(got, want);  // one rounding of an exact sum / product: bitwise
          });
        }
      }
      {
        std::vector<float> want(static_cast<size_t>(len));
        cpu::scale_ref(a.data() + off, len, -1.7f, want.data());
        for (const Variant& v : t.variants()) {
          c.check("scale " + v.name + " " + sz, [&]() {
            Buf da = put(t, a);
            t.scale(da.as<float>() + off, len, -1.7f, da.as<float>() + off, v.reference);  // in place
            std::vector<float> got = get<float>(t, da, static_cast<size_t>(n + 1));
            got.erase(got.begin(), got.begin() + off);
            got.resize(static_cast<size_t>(len));
            return compare_bitwise(got, want);
          });
        }
      }
    }
    const char* act_names[] = {"gelu_erf", "gelu_tanh", "silu"};
    for (Activation act : {Activation::GeluErf, Activation::GeluTanh, Activation::Silu}) {
      std::vector<float> want(static_cast<size_t>(n));
      cpu::activation_ref(act, x.data(), n, want.data());
      for (const Variant& v : t.variants()) {
        c.check(std::string(act_names[static_cast<int>(act)]) + " " + v.name + " n=" + std::to_string(n), [&]() {
          Buf dx = put(t, x), dout(t, static_cast<size_t>(n) * 4);
          t.activation(act, dx.as<float>(), n, dout.as<float>(), v.reference);
          // erf/exp/tanh within 2 ulp, the reference double rounded once: rtol 2e-6, atol 1e-6 (GELU near 0);
          // a double reference on the target agrees to one f32 ulp.
          return v.reference ? compare_close(get<float>(t, dout, static_cast<size_t>(n)), want, 3e-7, 1e-12)
                             : compare_close(get<float>(t, dout, static_cast<size_t>(n)), want, 2e-6, 1e-6);
        });
      }
    }
    std::vector<float> want(static_cast<size_t>(n));
    cpu::silu_mul_ref(x.data(), u.data(), n, want.data());
    for (const Variant& v : t.variants()) {
      c.check("silu_mul " + v.name + " n=" + std::to_string(n), [&]() {
        Buf dx = put(t, x), du = put(t, u), dout(t, static_cast<size_t>(n) * 4);
        t.silu_mul(dx.as<float>(), du.as<float>(), n, dout.as<float>(), v.reference);
        return v.reference ? compare_close(get<float>(t, dout, static_cast<size_t>(n)), want, 3e-7, 1e-12)
                           : compare_close(get<float>(t, dout, static_cast<size_t>(n)), want, 2e-6, 1e-6);
      });
    }
  }
  // A row broadcast over rows.
  const int64_t shapes[][2] = {{3, 5}, {1, 17}, {0, 4}, {9, 33}, {64, 128}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    const std::vector<float> a = random_floats(static_cast<size_t>(rows * cols), 3), row = random_floats(static_cast<size_t>(cols), 4);
    std::vector<float> want(a.size());
    cpu::binary_ref(BinaryOp::Add, a.data(), rows * cols, row.data(), cols, want.data());
    for (const Variant& v : t.variants()) {
      c.check("add broadcast " + v.name + " " + dims({rows, cols}), [&]() {
        Buf da = put(t, a), dr = put(t, row), dout(t, a.size() * 4);
        t.binary(BinaryOp::Add, da.as<float>(), rows * cols, dr.as<float>(), cols, dout.as<float>(), v.reference);
        return compare_bitwise(get<float>(t, dout, a.size()), want);
      });
    }
  }
}

// ---------------------------------------------------------------- layer norm, RMS norm, softmax

void norm_family(Ctx& c) {
  Target& t = c.t;
  const int64_t shapes[][2] = {{0, 8}, {1, 1}, {3, 7}, {5, 33}, {17, 1000}, {4, 3000}, {6, 65}};
  uint64_t seed = 300;
  for (const auto& s : shapes) {
    const int64_t rows = s[0], dim = s[1];
    const size_t n = static_cast<size_t>(rows * dim);
    const std::vector<float> x = random_floats(n, seed++, -3, 5), gamma = random_floats(static_cast<size_t>(dim), seed++, 0.5f, 1.5f),
                             beta = random_floats(static_cast<size_t>(dim), seed++);
    const std::string sh = dims({rows, dim});
    // f32 block reductions against the double reference: rtol 1e-5, atol 1e-5 (outputs O(1)); a double reference on
    // the target: 1e-6.
    for (bool params : {false, true}) {
      std::vector<float> want_ln(n), want_rms(n);
      cpu::layer_norm_ref(x.data(), rows, dim, params ? gamma.data() : nullptr, params ? beta.data() : nullptr, 1e-5f, want_ln.data());
      cpu::rms_norm_ref(x.data(), rows, dim, params ? gamma.data() : nullptr, 1e-6f, want_rms.data());
      for (const Variant& v : t.variants()) {
        const double tol = v.reference ? 1e-6 : 1e-5;
        const std::string tag = v.name + " " + sh + (params ? " gamma,beta" : "");
        c.check("layer_norm " + tag, [&]() {
          Buf dx = put(t, x), dg = put(t, gamma), db = put(t, beta), dout(t, n * 4);
          t.layer_norm(dx.as<float>(), rows, dim, params ? dg.as<float>() : nullptr, params ? db.as<float>() : nullptr, 1e-5f,
                       dout.as<float>(), v.reference);
          return compare_close(get<float>(t, dout, n), want_ln, tol, tol);
        });
        c.check("rms_norm " + tag, [&]() {
          Buf dx = put(t, x), dg = put(t, gamma), dout(t, n * 4);
          t.rms_norm(dx.as<float>(), rows, dim, params ? dg.as<float>() : nullptr, 1e-6f, dout.as<float>(), v.reference);
          return compare_close(get<float>(t, dout, n), want_rms, tol, tol);
        });
      }
    }
    for (float sc : {1.f, 0.125f, -2.f}) {
      std::vector<float> want(n);
      cpu::softmax_ref(x.data(), rows, dim, sc, want.data());
      for (const Variant& v : t.variants()) {
        c.check("softmax " + v.name + " " + sh + " scale " + num(sc), [&]() {
          Buf dx = put(t, x), dout(t, n * 4);
          t.softmax(dx.as<float>(), rows, dim, sc, dout.as<float>(), v.reference);
          return compare_close(get<float>(t, dout, n), want, v.reference ? 1e-6 : 1e-5, 1e-7);
        });
      }
    }
  }
  // In place (out aliases x) gives the same bits as out of place.
  const std::vector<float> x = random_floats(6 * 50, 7);
  c.check("rms_norm in place == out of place [6x50]", [&]() {
    Buf dx = put(t, x), dout(t, x.size() * 4);
    t.rms_norm(dx.as<float>(), 6, 50, nullptr, 1e-6f, dout.as<float>(), false);
    t.rms_norm(dx.as<float>(), 6, 50, nullptr, 1e-6f, dx.as<float>(), false);
    return compare_bitwise(get<float>(t, dx, x.size()), get<float>(t, dout, x.size()));
  });
}

// ---------------------------------------------------------------- gathers, scatters, conversion (exact: bitwise)

void gather_family(Ctx& c) {
  Target& t = c.t;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const int64_t cases[][3] = {{50, 17, 9}, {7, 64, 0}, {300, 256, 33}};
    for (const auto& cs : cases) {
      const int64_t vocab = cs[0], dim = cs[1], n = cs[2];
      std::vector<uint8_t> table;
      std::vector<float> values;
      random_b(static_cast<size_t>(vocab * dim), static_cast<uint64_t>(vocab), dt, table, values);
      const std::vector<int32_t> ids = random_ints(static_cast<size_t>(n), static_cast<uint64_t>(dim), 0, static_cast<int32_t>(vocab));
      std::vector<float> want(static_cast<size_t>(n * dim));
      cpu::embedding_ref(table.data(), dt, dim, ids.data(), n, want.data());
      for (const Variant& v : t.variants()) {
        c.check(std::string("embedding ") + v.name + " " + dtype_name(dt) + " " + dims({vocab, dim}) + " n=" + std::to_string(n), [&]() {
          Buf dtab = put(t, table), did = put(t, ids), dout(t, want.size() * 4);
          t.embedding(dtab.raw(), dt, dim, did.as<int32_t>(), n, dout.as<float>(), v.reference);
          return compare_bitwise(get<float>(t, dout, want.size()), want);
        });
      }
    }
  }
  // Rows of 3 f32 (4-byte words), 5 u8 (bytes) and 8 bf16 (16-byte words); the reference is the plain row copy.
  for (int64_t row_bytes : {12, 5, 16}) {
    const int64_t rows = 40, n = 25;
    std::vector<uint8_t> src(static_cast<size_t>(rows * row_bytes));
    Rng r(static_cast<uint64_t>(row_bytes));
    for (uint8_t& b : src) b = static_cast<uint8_t>(r.next());
    const std::vector<int32_t> idx = random_ints(static_cast<size_t>(n), 4, 0, static_cast<int32_t>(rows));
    std::vector<uint8_t> want(static_cast<size_t>(n * row_bytes));
    for (int64_t i = 0; i < n; ++i) std::memcpy(&want[i * row_bytes], &src[idx[i] * row_bytes], static_cast<size_t>(row_bytes));
    c.check("gather_rows " + std::to_string(row_bytes) + "-byte rows n=" + std::to_string(n), [&]() {
      Buf ds = put(t, src), di = put(t, idx), dout(t, want.size());
      t.gather_rows(ds.raw(), row_bytes, di.as<int32_t>(), n, dout.raw());
      return compare_bitwise(get<uint8_t>(t, dout, want.size()), want);
    });
    // scatter to unique destinations: a permutation's first n rows
    std::vector<int32_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = rows - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(r.below(static_cast<int32_t>(i + 1)))]);
    perm.resize(static_cast<size_t>(n));
    std::vector<uint8_t> want_s(static_cast<size_t>(rows * row_bytes), 0);
    for (int64_t i = 0; i < n; ++i) std::memcpy(&want_s[perm[i] * row_bytes], &want[i * row_bytes], static_cast<size_t>(row_bytes));
    c.check("scatter_rows " + std::to_string(row_bytes) + "-byte rows n=" + std::to_string(n), [&]() {
      Buf ds = put(t, want), di = put(t, perm), dout = put(t, std::vector<uint8_t>(want_s.size(), 0));
      t.scatter_rows(ds.raw(), row_bytes, di.as<int32_t>(), n, dout.raw(), perm);
      return compare_bitwise(get<uint8_t>(t, dout, want_s.size()), want_s);
    });
    // Repeated destinations (idx has repeats): the last source row wins, as a sequential loop leaves it.
    std::vector<uint8_t> want_r(static_cast<size_t>(rows * row_bytes), 0);
    for (int64_t i = 0; i < n; ++i) std::memcpy(&want_r[idx[i] * row_bytes], &want[i * row_bytes], static_cast<size_t>(row_bytes));
    c.check("scatter_rows with repeated rows " + std::to_string(row_bytes) + "-byte rows n=" + std::to_string(n), [&]() {
      Buf ds = put(t, want), di = put(t, idx), dout = put(t, std::vector<uint8_t>(want_r.size(), 0));
      t.scatter_rows(ds.raw(), row_bytes, di.as<int32_t>(), n, dout.raw(), idx);
      return compare_bitwise(get<uint8_t>(t, dout, want_r.size()), want_r);
    });
  }
  // Conversions between f32, f16 and bf16, specials included (NaN, infinities, overflow, subnormals, ties).
  std::vector<float> vals = {0.f, -0.f, 1.f, -1.f, 65504.f, 65520.f, 1e6f, -1e6f, 6.1e-5f, 6e-8f, 1e-10f, 3.0e-39f, INFINITY, -INFINITY, NAN,
                             0.1f, 1.f / 3};
  for (float v : random_floats(997, 8, -70000, 70000)) vals.push_back(v);
  for (float v : random_floats(500, 9, -1e-4f, 1e-4f)) vals.push_back(v);
  const int64_t n = static_cast<int64_t>(vals.size());
  for (DType from : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<uint8_t> src(static_cast<size_t>(n) * dtype_size(from));
    cpu::convert_ref(vals.data(), DType::F32, src.data(), from, n);
    for (DType to : {DType::F32, DType::F16, DType::BF16}) {
      std::vector<uint8_t> want(static_cast<size_t>(n) * dtype_size(to));
      cpu::convert_ref(src.data(), from, want.data(), to, n);
      for (const Variant& v : t.variants()) {
        c.check(std::string("convert ") + v.name + " " + dtype_name(from) + " -> " + dtype_name(to), [&]() {
          Buf ds = put(t, src), dd(t, want.size());
          t.convert(ds.raw(), from, dd.raw(), to, n, v.reference);
          return compare_bytes(get<uint8_t>(t, dd, want.size()).data(), want.data(), want.size(), dtype_size(to));
        });
      }
    }
  }
}

// ---------------------------------------------------------------- RoPE

void rope_family(Ctx& c) {
  Target& t = c.t;
  const int64_t cases[][4] = {{5, 3, 8, 8}, {17, 4, 64, 32}, {1, 1, 2, 2}, {0, 2, 16, 16}, {9, 2, 80, 80}};
  for (const auto& cs : cases) {
    const int64_t tokens = cs[0], heads = cs[1], hd = cs[2], rot = cs[3];
    const size_t n = static_cast<size_t>(tokens * heads * hd);
    const std::vector<float> x = random_floats(n, static_cast<uint64_t>(tokens + hd));
    const std::vector<int32_t> pos = random_ints(static_cast<size_t>(tokens), 7, 0, 512);
    for (bool inverse : {false, true}) {
      std::vector<float> want = x;
      cpu::rope_ref(want.data(), tokens, heads, hd, rot, pos.data(), 10000.f, inverse);
      for (const Variant& v : t.variants()) {
        c.check("rope " + v.name + " " + dims({tokens, heads, hd}) + " rot " + std::to_string(rot) + (inverse ? " inverse" : ""), [&]() {
          Buf dx = put(t, x), dp = put(t, pos);
          t.rope(dx.as<float>(), tokens, heads, hd, rot, dp.as<int32_t>(), 10000.f, inverse, v.reference);
          // angles below 512 rad: a kernel forming the angle in f32 is off by up to 512 * 2^-24 rad
          return compare_close(get<float>(t, dx, n), want, 1e-4, 1e-4);
        });
      }
    }
  }
}

// ---------------------------------------------------------------- attention

void attention_family(Ctx& c) {
  Target& t = c.t;
  uint64_t seed = 500;
  // Decode over the paged cache: GQA 8/2 at every head size, then groups of 3, 2, 1 and 6 (CUDA runs 4, 2 or 1
  // query heads of a group per block, by group and head size); context lengths 0 (writes zeros), 1, one page, a
  // page + 1, ragged.
  const int64_t decode_shapes[][3] = {{8, 2, 16}, {8, 2, 64}, {8, 2, 80}, {8, 2, 128}, {8, 2, 256}, {8, 2, 300},
                                      {6, 2, 64}, {4, 2, 128}, {6, 6, 80}, {12, 2, 256}};
  for (const auto& shape : decode_shapes) {
    const int64_t nh = shape[0], nkv = shape[1], hd = shape[2];
    const int64_t batch = 5, num_pages = 24, max_pages = 4;
    const std::vector<int32_t> lens = {0, 1, 16, 17, 61};
    std::vector<int32_t> order(static_cast<size_t>(num_pages));
    std::iota(order.begin(), order.end(), 0);
    Rng r(seed++);
    for (int64_t i = num_pages - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r.below(static_cast<int32_t>(i + 1)))]);
    std::vector<int32_t> table(static_cast<size_t>(batch * max_pages));
    for (size_t i = 0; i < table.size(); ++i) table[i] = order[i % static_cast<size_t>(num_pages)];
    const size_t cache_n = static_cast<size_t>(num_pages * kPageSize * nkv * hd);
    const std::vector<float> q = random_floats(static_cast<size_t>(batch * nh * hd), seed++), k = random_floats(cache_n, seed++),
                             v = random_floats(cache_n, seed++);
    DecodeAttentionArgs a;
    a.batch = batch;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.num_pages = num_pages;
    a.max_pages = max_pages;
    a.scale = 1.f / std::sqrt(static_cast<float>(hd));
    std::vector<float> want(q.size());
    {
      DecodeAttentionArgs h = a;
      h.q = q.data();
      h.k_cache = k.data();
      h.v_cache = v.data();
      h.block_table = table.data();
      h.context_lens = lens.data();
      h.out = want.data();
      cpu::attention_decode_ref(h);
    }
    for (const Variant& var : t.variants()) {
      c.check("decode " + var.name + " d=" + std::to_string(hd) + " batch 5 heads " + std::to_string(nh) + "/" + std::to_string(nkv) + " lens 0,1,16,17,61", [&]() {
        Buf dq = put(t, q), dk = put(t, k), dv = put(t, v), dt = put(t, table), dl = put(t, lens), dout(t, q.size() * 4);
        DecodeAttentionArgs d = a;
        d.q = dq.as<float>();
        d.k_cache = dk.as<float>();
        d.v_cache = dv.as<float>();
        d.block_table = dt.as<int32_t>();
        d.context_lens = dl.as<int32_t>();
        d.out = dout.as<float>();
        t.attention_decode(d, var.reference);
        // f32 online softmax (expf, FMA dot products) against the double reference
        return compare_close(get<float>(t, dout, q.size()), want, var.reference ? 1e-6 : 1e-5, 1e-6);
      });
    }
  }
  // Prefill: GQA, causal or not, a key padding mask with one sequence all padding, and an empty sequence.
  const int64_t cases[][5] = {{2, 19, 4, 2, 40}, {1, 33, 2, 2, 64}, {3, 5, 6, 3, 8}, {1, 0, 2, 1, 8}};
  for (const auto& cs : cases) {
    const int64_t batch = cs[0], seq = cs[1], nh = cs[2], nkv = cs[3], hd = cs[4];
    const size_t qn = static_cast<size_t>(batch * seq * nh * hd), kn = static_cast<size_t>(batch * seq * nkv * hd);
    const std::vector<float> q = random_floats(qn, seed++), k = random_floats(kn, seed++), v = random_floats(kn, seed++);
    std::vector<uint8_t> mask(static_cast<size_t>(batch * seq));
    Rng r(seed++);
    for (uint8_t& m : mask) m = r.below(4) == 0 ? 0 : 1;
    if (batch > 1) std::fill(mask.begin() + seq, mask.begin() + 2 * seq, 0);
    for (bool causal : {false, true}) {
      for (bool with_mask : {false, true}) {
        PrefillAttentionArgs a;
        a.batch = batch;
        a.seq = seq;
        a.n_heads = nh;
        a.n_kv_heads = nkv;
        a.head_dim = hd;
        a.causal = causal;
        a.scale = 1.f / std::sqrt(static_cast<float>(hd));
        std::vector<float> want(qn);
        {
          PrefillAttentionArgs h = a;
          h.q = q.data();
          h.k = k.data();
          h.v = v.data();
          h.out = want.data();
          h.key_mask = with_mask ? mask.data() : nullptr;
          cpu::attention_prefill_ref(h);
        }
        for (const Variant& var : t.variants()) {
          c.check("prefill " + var.name + " " + dims({batch, seq, nh, nkv, hd}) + (causal ? " causal" : "") + (with_mask ? " mask" : ""), [&]() {
            Buf dq = put(t, q), dk = put(t, k), dv = put(t, v), dm = put(t, mask), dout(t, qn * 4);
            PrefillAttentionArgs d = a;
            d.q = dq.as<float>();
            d.k = dk.as<float>();
            d.v = dv.as<float>();
            d.out = dout.as<float>();
            d.key_mask = with_mask ? dm.as<uint8_t>() : nullptr;
            t.attention_prefill(d, var.reference);
            return compare_close(get<float>(t, dout, qn), want, var.reference ? 1e-6 : 1e-5, 1e-6);
          });
        }
      }
    }
  }
}

// ---------------------------------------------------------------- SGMV / BGMV

void sgmv_family(Ctx& c) {
  Target& t = c.t;
  const int64_t L = 2, layer = 1;
  struct Case {
    int64_t rows, h_in, h_out;
    std::vector<int64_t> lengths;
  };
  // decode-size distinct segments, skewed, prefill-size, empty segments, several K chunks, no rows at all
  const std::vector<Case> cases = {{8, 4096, 4096, {1, 1, 1, 1, 1, 1, 1, 1}},
                                   {40, 300, 520, {1, 0, 39}},
                                   {133, 96, 130, {70, 0, 0, 63}},
                                   {5, 1000, 33, {0, 2, 3, 0}},
                                   {0, 64, 64, {}}};
  uint64_t seed = 1500;
  for (const Case& cs : cases) {
    const size_t ns = cs.lengths.size();
    std::vector<int64_t> ranks(ns);
    for (size_t i = 0; i < ns; ++i) ranks[i] = std::vector<int64_t>{16, 8, 64, 32}[i % 4];
    int64_t r_max = 1;
    for (int64_t r : ranks) r_max = std::max(r_max, r);
    std::vector<std::vector<float>> A(ns), B(ns);
    for (size_t i = 0; i < ns; ++i) {
      A[i] = random_floats(static_cast<size_t>(L * ranks[i] * cs.h_in), seed++);
      B[i] = random_floats(static_cast<size_t>(L * ranks[i] * cs.h_out), seed++);
    }
    std::vector<int64_t> indptr = {0};
    for (int64_t n : cs.lengths) indptr.push_back(indptr.back() + n);
    const std::vector<float> x = random_floats(static_cast<size_t>(cs.rows * cs.h_in), seed++),
                             v = random_floats(static_cast<size_t>(cs.rows * r_max), seed++),
                             ys0 = random_floats(static_cast<size_t>(cs.rows * r_max), seed++),
                             ye0 = random_floats(static_cast<size_t>(cs.rows * cs.h_out), seed++);
    const std::string label = "rows " + std::to_string(cs.rows) + " h " + std::to_string(cs.h_in) + "->" + std::to_string(cs.h_out) + " segments " +
                              std::to_string(ns);
    // Segment 1 has no adapter (a base-model segment); empty segments make no group, as the binding builds them.
    auto groups = [&](bool expand, const std::vector<const float*>& w_base) {
      std::vector<SgmvSegment> g;
      for (size_t i = 0; i < ns; ++i) {
        if (i == 1 || cs.lengths[i] == 0) continue;
        const int64_t h = expand ? cs.h_out : cs.h_in;
        g.push_back({w_base[i] + layer * ranks[i] * h, ranks[i], indptr[i], cs.lengths[i], 0.5f + static_cast<float>(i)});
      }
      return g;
    };
    std::vector<const float*> a_host(ns), b_host(ns);
    for (size_t i = 0; i < ns; ++i) {
      a_host[i] = A[i].data();
      b_host[i] = B[i].data();
    }
    std::vector<float> want_s = ys0, want_e = ye0;
    {
      const std::vector<SgmvSegment> gs = groups(false, a_host), ge = groups(true, b_host);
      SgmvArgs s{x.data(), want_s.data(), cs.rows, cs.h_in, r_max, gs.data(), static_cast<int64_t>(gs.size()), nullptr};
      cpu::sgmv_shrink_ref(s);
      SgmvArgs e{v.data(), want_e.data(), cs.rows, cs.h_out, r_max, ge.data(), static_cast<int64_t>(ge.size()), nullptr};
      cpu::sgmv_expand_ref(e);
    }
    // Runs SGMV (rows in segment order) on the target; returns y after shrink and after expand.
    auto run = [&](bool reference, std::vector<float>& ys, std::vector<float>& ye) {
      std::vector<Buf> da, db;
      std::vector<const float*> a_dev(ns), b_dev(ns);
      for (size_t i = 0; i < ns; ++i) {
        da.push_back(put(t, A[i]));
        db.push_back(put(t, B[i]));
        a_dev[i] = da.back().as<float>();
        b_dev[i] = db.back().as<float>();
      }
      Buf dx = put(t, x), dv = put(t, v), dys = put(t, ys0), dye = put(t, ye0);
      const std::vector<SgmvSegment> gs = groups(false, a_dev), ge = groups(true, b_dev);
      t.sgmv_shrink({dx.as<float>(), dys.as<float>(), cs.rows, cs.h_in, r_max, gs.data(), static_cast<int64_t>(gs.size()), nullptr}, reference);
      t.sgmv_expand({dv.as<float>(), dye.as<float>(), cs.rows, cs.h_out, r_max, ge.data(), static_cast<int64_t>(ge.size()), nullptr}, reference);
      ys = get<float>(t, dys, ys0.size());
      ye = get<float>(t, dye, ye0.size());
    };
    for (const Variant& var : t.variants()) {
      std::vector<float> ys, ye, ys2, ye2;
      // against the double references: normwise 1e-5, as native/test/sgmv.test.ts allows every path
      c.check("sgmv shrink " + var.name + " " + label, [&]() {
        run(var.reference, ys, ye);
        return compare_normwise(ys, want_s, 1e-5);
      });
      c.check("sgmv expand " + var.name + " " + label, [&]() { return compare_normwise(ye, want_e, 1e-5); });
      c.check("sgmv rerun bitwise " + var.name + " " + label, [&]() {
        run(var.reference, ys2, ye2);
        Cmp a = compare_bitwise(ys2, ys);
        return a.ok ? compare_bitwise(ye2, ye) : a;
      });
      if (var.reference) continue;
      // BGMV: the same rows in a shuffled order with a row list per adapter equal SGMV bit for bit (each row's sum
      // order is fixed), and the CPU reference over the row lists.
      c.check("bgmv == sgmv bitwise " + var.name + " " + label, [&]() {
        std::vector<int64_t> perm(static_cast<size_t>(cs.rows));
        std::iota(perm.begin(), perm.end(), 0);
        std::stable_sort(perm.begin(), perm.end(), [](int64_t p, int64_t q) { return (p * 7919) % 13 < (q * 7919) % 13; });
        auto shuffle = [&](const std::vector<float>& d, int64_t w) {
          std::vector<float> o(d.size());
          for (size_t dst = 0; dst < perm.size(); ++dst) std::copy_n(d.begin() + perm[dst] * w, w, o.begin() + static_cast<int64_t>(dst) * w);
          return o;
        };
        auto unshuffle = [&](const std::vector<float>& d, int64_t w) {
          std::vector<float> o(d.size());
          for (size_t dst = 0; dst < perm.size(); ++dst) std::copy_n(d.begin() + static_cast<int64_t>(dst) * w, w, o.begin() + perm[dst] * w);
          return o;
        };
        std::vector<int32_t> seg_of(static_cast<size_t>(cs.rows), -1);
        for (size_t s = 0; s < ns; ++s)
          for (int64_t j = indptr[s]; j < indptr[s + 1]; ++j) seg_of[static_cast<size_t>(j)] = s == 1 ? -1 : static_cast<int32_t>(s);
        std::vector<int32_t> row_ids;
        std::vector<std::pair<size_t, std::pair<int64_t, int64_t>>> spans;  // adapter, (begin, rows) in row_ids
        for (size_t s = 0; s < ns; ++s) {
          const int64_t begin = static_cast<int64_t>(row_ids.size());
          for (size_t dst = 0; dst < perm.size(); ++dst)
            if (seg_of[static_cast<size_t>(perm[dst])] == static_cast<int32_t>(s)) row_ids.push_back(static_cast<int32_t>(dst));
          if (static_cast<int64_t>(row_ids.size()) > begin) spans.push_back({s, {begin, static_cast<int64_t>(row_ids.size()) - begin}});
        }
        std::vector<Buf> da, db;
        std::vector<SgmvSegment> gs, ge;
        for (const auto& sp : spans) {
          const size_t s = sp.first;
          da.push_back(put(t, A[s]));
          db.push_back(put(t, B[s]));
          gs.push_back({da.back().as<float>() + layer * ranks[s] * cs.h_in, ranks[s], sp.second.first, sp.second.second, 1.f});
          ge.push_back({db.back().as<float>() + layer * ranks[s] * cs.h_out, ranks[s], sp.second.first, sp.second.second, 0.5f + static_cast<float>(s)});
        }
        Buf dx = put(t, shuffle(x, cs.h_in)), dv = put(t, shuffle(v, r_max)), dys = put(t, shuffle(ys0, r_max)), dye = put(t, shuffle(ye0, cs.h_out));
        t.sgmv_shrink({dx.as<float>(), dys.as<float>(), cs.rows, cs.h_in, r_max, gs.data(), static_cast<int64_t>(gs.size()), row_ids.data()}, false);
        t.sgmv_expand({dv.as<float>(), dye.as<float>(), cs.rows, cs.h_out, r_max, ge.data(), static_cast<int64_t>(ge.size()), row_ids.data()}, false);
        Cmp a = compare_bitwise(unshuffle(get<float>(t, dys, ys0.size()), r_max), ys);
        return a.ok ? compare_bitwise(unshuffle(get<float>(t, dye, ye0.size()), cs.h_out), ye) : a;
      });
    }
  }
}

// ---------------------------------------------------------------- PET operators (PetS)

void pet_family(Ctx& c) {
  Target& t = c.t;
  const int64_t total = 300, d = 96, in = 80, m = 24;
  const std::vector<float> y0 = random_floats(static_cast<size_t>(total * d), 2000), x = random_floats(static_cast<size_t>(total * in), 2001);
  // A sparse S [d, in] in CSR by output row, ~20% dense, with an empty row.
  std::vector<int32_t> indptr = {0}, indices;
  std::vector<float> values;
  Rng r(2002);
  for (int64_t o = 0; o < d; ++o) {
    if (o != 5)
      for (int64_t i = 0; i < in; ++i)
        if (r.below(5) == 0) {
          indices.push_back(static_cast<int32_t>(i));
          values.push_back(r.uniform(-1.f, 1.f));
        }
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  const std::vector<float> bias = random_floats(static_cast<size_t>(d), 2003), down = random_floats(static_cast<size_t>(m * d), 2004, -0.2f, 0.2f),
                           down_bias = random_floats(static_cast<size_t>(m), 2005), up = random_floats(static_cast<size_t>(d * m), 2006, -0.2f, 0.2f),
                           up_bias = random_floats(static_cast<size_t>(d), 2007), gamma = random_floats(static_cast<size_t>(d), 2008, 0.5f, 1.5f),
                           beta = random_floats(static_cast<size_t>(d), 2009);
  // Tasks on disjoint rows: packed ranges and padded mini-batches (seqs x tokens, stride apart); rows 290.. untouched.
  const PetRows rows[] = {{0, 1, 0, 12}, {12, 4, 32, 20}, {140, 1, 0, 1}, {141, 3, 40, 33}, {261, 1, 0, 29}};
  struct Ptrs {
    const float *x, *values, *bias, *down, *down_bias, *up, *up_bias, *gamma, *beta;
    const int32_t *indptr, *indices;
    float* y;
  };
  auto build = [&](const Ptrs& p, const std::string& only, int num_streams) {
    std::vector<PetOpArgs> ops;
    auto add = [&](PetOpKind kind, int task) {
      PetOpArgs o;
      o.kind = kind;
      o.rows = rows[task];
      o.stream = task % num_streams;
      o.y = p.y;
      o.out = d;
      if (kind == PetOpKind::Csr) {
        o.x = p.x;
        o.in = in;
        o.indptr = p.indptr;
        o.indices = p.indices;
        o.values = p.values;
        o.nnz = static_cast<int64_t>(values.size());
        o.scale = task == 0 ? -1.f : 0.75f;
      } else if (kind == PetOpKind::Bias) {
        o.bias = p.bias;
      } else if (kind == PetOpKind::Adapter) {
        o.down = p.down;
        o.down_bias = p.down_bias;
        o.up = p.up;
        o.up_bias = p.up_bias;
        o.m = m;
        o.act = task == 3 ? Activation::GeluTanh : Activation::GeluErf;
      } else {
        o.x = p.y;  // in place
        o.in = d;
        o.gamma = p.gamma;
        o.beta = p.beta;
        o.eps = 1e-12f;
      }
      const char* names[] = {"csr", "bias", "adapter", "layernorm"};
      if (only.empty() || only == names[static_cast<int>(kind)]) ops.push_back(o);
    };
    add(PetOpKind::Csr, 0);
    add(PetOpKind::LayerNorm, 0);
    add(PetOpKind::Adapter, 1);
    add(PetOpKind::LayerNorm, 1);
    add(PetOpKind::Bias, 2);
    add(PetOpKind::Csr, 2);
    add(PetOpKind::Adapter, 3);
    add(PetOpKind::Bias, 3);
    add(PetOpKind::Csr, 4);
    add(PetOpKind::Adapter, 4);
    add(PetOpKind::LayerNorm, 4);
    return ops;
  };
  for (const std::string only : {"", "csr", "bias", "adapter", "layernorm"}) {
    const std::string label = only.empty() ? "mixed site" : only;
    std::vector<float> want = y0;
    {
      Ptrs h{x.data(), values.data(), bias.data(), down.data(), down_bias.data(), up.data(), up_bias.data(), gamma.data(), beta.data(),
             indptr.data(), indices.data(), want.data()};
      const std::vector<PetOpArgs> ops = build(h, only, 1);
      cpu::pet_site_ref({ops.data(), static_cast<int64_t>(ops.size()), 1});
    }
    for (const Variant& var : t.variants()) {
      std::vector<float> first;
      for (int streams : {1, 3}) {
        c.check("pet " + label + " " + var.name + " streams " + std::to_string(streams), [&]() {
          Buf dx = put(t, x), dvals = put(t, values), dbias = put(t, bias), ddown = put(t, down), ddb = put(t, down_bias), dup = put(t, up),
              dub = put(t, up_bias), dg = put(t, gamma), dbe = put(t, beta), dip = put(t, indptr), dind = put(t, indices), dy = put(t, y0);
          Ptrs p{dx.as<float>(), dvals.as<float>(), dbias.as<float>(), ddown.as<float>(), ddb.as<float>(), dup.as<float>(), dub.as<float>(),
                 dg.as<float>(), dbe.as<float>(), dip.as<int32_t>(), dind.as<int32_t>(), dy.as<float>()};
          const std::vector<PetOpArgs> ops = build(p, only, streams);
          t.pet_site({ops.data(), static_cast<int64_t>(ops.size()), streams}, var.reference);
          const std::vector<float> got = get<float>(t, dy, y0.size());
          // rows no op covers stay untouched, bit for bit
          for (int64_t row = 290; row < total; ++row)
            for (int64_t j = 0; j < d; ++j)
              if (std::memcmp(&got[static_cast<size_t>(row * d + j)], &y0[static_cast<size_t>(row * d + j)], 4) != 0)
                return Cmp{false, INFINITY, "row " + std::to_string(row) + " is covered by no op but changed"};
          if (streams == 1) first = got;
          else if (!var.reference && !first.empty()) {
            Cmp same = compare_bitwise(got, first);
            if (!same.ok) return Cmp{false, INFINITY, "3 streams differ from 1 stream: " + same.detail};
          }
          return compare_normwise(got, want, 1e-5);
        });
      }
    }
  }
}

// ---------------------------------------------------------------- training kernels

void train_family(Ctx& c) {
  Target& t = c.t;
  const int64_t shapes[][2] = {{37, 300}, {5, 33}, {0, 16}};
  for (const auto& s : shapes) {
    const int64_t rows = s[0], dim = s[1];
    const size_t n = static_cast<size_t>(rows * dim);
    const std::vector<float> x = random_floats(n, 1, -3, 3), dy = random_floats(n, 2), gamma = random_floats(static_cast<size_t>(dim), 3, 0.5f, 1.5f),
                             g0 = random_floats(static_cast<size_t>(dim), 4);
    const std::string sh = " " + dims({rows, dim});
    for (bool acc : {false, true}) {
      std::vector<float> wdx(n), wdg = g0, wdb = g0, rdx(n), rdg = g0;
      cpu::layer_norm_bwd_ref(x.data(), dy.data(), rows, dim, gamma.data(), 1e-5f, wdx.data(), wdg.data(), wdb.data(), acc);
      cpu::rms_norm_bwd_ref(x.data(), dy.data(), rows, dim, gamma.data(), 1e-6f, rdx.data(), rdg.data(), acc);
      for (const Variant& v : t.variants()) {
        // f32 block reductions and rstd-amplified rounding: rtol / atol 1e-4 (a double reference on the target: 1e-6)
        const double tol = v.reference ? 1e-6 : 1e-4;
        c.check("layer_norm_bwd " + v.name + sh + (acc ? " accumulate" : ""), [&]() {
          Buf dx_ = put(t, x), ddy = put(t, dy), dg = put(t, gamma), ox(t, n * 4), og = put(t, g0), ob = put(t, g0);
          t.layer_norm_bwd(dx_.as<float>(), ddy.as<float>(), rows, dim, dg.as<float>(), 1e-5f, ox.as<float>(), og.as<float>(), ob.as<float>(), acc,
                           v.reference);
          Cmp a = compare_close(get<float>(t, ox, n), wdx, tol, tol);
          Cmp b = compare_close(get<float>(t, og, g0.size()), wdg, tol, tol);
          Cmp e = compare_close(get<float>(t, ob, g0.size()), wdb, tol, tol);
          return !a.ok || a.ratio >= std::max(b.ratio, e.ratio) ? a : !b.ok || b.ratio >= e.ratio ? b : e;
        });
        c.check("rms_norm_bwd " + v.name + sh + (acc ? " accumulate" : ""), [&]() {
          Buf dx_ = put(t, x), ddy = put(t, dy), dg = put(t, gamma), ox(t, n * 4), og = put(t, g0);
          t.rms_norm_bwd(dx_.as<float>(), ddy.as<float>(), rows, dim, dg.as<float>(), 1e-6f, ox.as<float>(), og.as<float>(), acc, v.reference);
          Cmp a = compare_close(get<float>(t, ox, n), rdx, tol, tol);
          Cmp b = compare_close(get<float>(t, og, g0.size()), rdg, tol, tol);
          return !a.ok || a.ratio >= b.ratio ? a : b;
        });
      }
    }
    std::vector<float> y(n);
    for (size_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]) / 100;
    std::vector<float> wsm(n);
    cpu::softmax_bwd_ref(y.data(), dy.data(), rows, dim, 0.5f, wsm.data());
    for (const Variant& v : t.variants()) {
      c.check("softmax_bwd " + v.name + sh, [&]() {
        Buf dyv = put(t, y), ddy = put(t, dy), o(t, n * 4);
        t.softmax_bwd(dyv.as<float>(), ddy.as<float>(), rows, dim, 0.5f, o.as<float>(), v.reference);
        return compare_close(get<float>(t, o, n), wsm, 1e-4, 1e-6);
      });
    }
    const char* act_names[] = {"gelu_erf", "gelu_tanh", "silu"};
    for (Activation act : {Activation::GeluErf, Activation::GeluTanh, Activation::Silu}) {
      std::vector<float> want(n);
      cpu::activation_bwd_ref(act, x.data(), dy.data(), static_cast<int64_t>(n), want.data());
      for (const Variant& v : t.variants()) {
        c.check(std::string(act_names[static_cast<int>(act)]) + "_bwd " + v.name + sh, [&]() {
          Buf dx_ = put(t, x), ddy = put(t, dy), o(t, n * 4);
          t.activation_bwd(act, dx_.as<float>(), ddy.as<float>(), static_cast<int64_t>(n), o.as<float>(), v.reference);
          return v.reference ? compare_close(get<float>(t, o, n), want, 1e-6, 1e-7) : compare_close(get<float>(t, o, n), want, 1e-5, 1e-6);
        });
      }
    }
    std::vector<float> wg(n), wu(n);
    cpu::silu_mul_bwd_ref(x.data(), y.data(), dy.data(), static_cast<int64_t>(n), wg.data(), wu.data());
    for (const Variant& v : t.variants()) {
      c.check("silu_mul_bwd " + v.name + sh, [&]() {
        Buf dg = put(t, x), du = put(t, y), ddy = put(t, dy), og(t, n * 4), ou(t, n * 4);
        t.silu_mul_bwd(dg.as<float>(), du.as<float>(), ddy.as<float>(), static_cast<int64_t>(n), og.as<float>(), ou.as<float>(), v.reference);
        Cmp a = compare_close(get<float>(t, og, n), wg, 1e-5, 1e-6);
        Cmp b = compare_close(get<float>(t, ou, n), wu, 1e-5, 1e-6);
        return !a.ok || a.ratio >= b.ratio ? a : b;
      });
    }
  }
  // Cross-entropy with label smoothing and an ignored row; column sums; embedding scatter-add.
  {
    const int64_t rows = 19, vocab = 5000;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows * vocab), 11, -6, 6);
    std::vector<int32_t> targets = random_ints(static_cast<size_t>(rows), 12, 0, static_cast<int32_t>(vocab));
    targets[3] = -100;
    CrossEntropyArgs a;
    a.rows = rows;
    a.vocab = vocab;
    a.smoothing = 0.1f;
    a.grad_scale = 1.f / 18;
    std::vector<float> wl(static_cast<size_t>(rows)), wd(logits.size());
    {
      CrossEntropyArgs h = a;
      h.logits = logits.data();
      h.targets = targets.data();
      h.loss = wl.data();
      h.dlogits = wd.data();
      cpu::cross_entropy_ref(h);
    }
    for (const Variant& v : t.variants()) {
      c.check("cross_entropy " + v.name + " [19x5000] smoothing 0.1, one ignored row", [&]() {
        Buf dlg = put(t, logits), dt = put(t, targets), ol(t, wl.size() * 4), od(t, wd.size() * 4);
        CrossEntropyArgs d = a;
        d.logits = dlg.as<float>();
        d.targets = dt.as<int32_t>();
        d.loss = ol.as<float>();
        d.dlogits = od.as<float>();
        t.cross_entropy(d, v.reference);
        Cmp l = compare_close(get<float>(t, ol, wl.size()), wl, 1e-4, 1e-6);
        Cmp g = compare_close(get<float>(t, od, wd.size()), wd, 1e-4, 1e-7);
        return !l.ok || l.ratio >= g.ratio ? l : g;
      });
      // In place (dlogits is the logits, as training passes them) and loss only (no dlogits).
      c.check("cross_entropy in place, then loss only " + v.name + " [19x5000]", [&]() {
        Buf dlg = put(t, logits), dt = put(t, targets), ol(t, wl.size() * 4), ol2(t, wl.size() * 4);
        CrossEntropyArgs d = a;
        d.logits = dlg.as<float>();
        d.targets = dt.as<int32_t>();
        d.loss = ol.as<float>();
        d.dlogits = dlg.as<float>();
        t.cross_entropy(d, v.reference);
        Cmp g = compare_close(get<float>(t, dlg, wd.size()), wd, 1e-4, 1e-7);
        Cmp l = compare_close(get<float>(t, ol, wl.size()), wl, 1e-4, 1e-6);
        Buf dlg2 = put(t, logits);
        d.logits = dlg2.as<float>();
        d.loss = ol2.as<float>();
        d.dlogits = nullptr;
        t.cross_entropy(d, v.reference);
        Cmp l2 = compare_close(get<float>(t, ol2, wl.size()), wl, 1e-4, 1e-6);
        return !g.ok ? g : !l.ok ? l : !l2.ok ? l2 : (g.ratio >= std::max(l.ratio, l2.ratio) ? g : l.ratio >= l2.ratio ? l : l2);
      });
    }
    for (bool acc : {false, true}) {
      const int64_t r2 = 190, c2 = 500;
      const std::vector<float> init = random_floats(static_cast<size_t>(c2), 30);
      std::vector<float> want = init;
      cpu::column_sum_ref(logits.data(), r2, c2, want.data(), acc);
      for (const Variant& v : t.variants()) {
        c.check("column_sum " + v.name + " [190x500]" + (acc ? " accumulate" : ""), [&]() {
          Buf dx = put(t, logits), o = put(t, init);
          t.column_sum(dx.as<float>(), r2, c2, o.as<float>(), acc, v.reference);
          return compare_close(get<float>(t, o, want.size()), want, 1e-6, 1e-6);
        });
      }
    }
    const std::vector<int32_t> ids = random_ints(64, 13, 0, 50);
    const std::vector<float> dy = random_floats(64 * 96, 14), init = random_floats(50 * 96, 15);
    for (bool acc : {false, true}) {
      std::vector<float> want = init;
      cpu::embedding_bwd_ref(dy.data(), ids.data(), 64, 96, 50, want.data(), acc);
      for (const Variant& v : t.variants()) {
        c.check("embedding_bwd " + v.name + " 64 ids, vocab 50, dim 96" + (acc ? " accumulate" : ""), [&]() {
          Buf ddy = put(t, dy), di = put(t, ids), o = put(t, init);
          t.embedding_bwd(ddy.as<float>(), di.as<int32_t>(), 64, 96, 50, o.as<float>(), acc, v.reference);
          return compare_close(get<float>(t, o, want.size()), want, 1e-5, 1e-6);  // f32 sums in token order
        });
      }
    }
  }
  // AdamW (two steps) and the sum of squares.
  {
    const int64_t n = 100003;
    const std::vector<float> p0 = random_floats(static_cast<size_t>(n), 16), g = random_floats(static_cast<size_t>(n), 17, -0.1f, 0.1f);
    auto args_for = [](int step) {
      AdamWArgs a;
      const double lr = 1e-2, wd = 0.01;
      a.decay = 1 - lr * wd;
      a.step_size = lr / (1 - std::pow(a.beta1, step));
      a.inv_sqrt_bc2 = 1 / std::sqrt(1 - std::pow(a.beta2, step));
      return a;
    };
    std::vector<float> wp = p0, wm(static_cast<size_t>(n), 0.f), wv(static_cast<size_t>(n), 0.f);
    for (int step : {1, 2}) {
      AdamWArgs a = args_for(step);
      a.param = wp.data();
      a.grad = g.data();
      a.m = wm.data();
      a.v = wv.data();
      a.n = n;
      cpu::adamw_ref(a);
    }
    for (const Variant& var : t.variants()) {
      c.check("adamw " + var.name + " n=100003, 2 steps", [&]() {
        Buf dp = put(t, p0), dg = put(t, g), dm = put(t, std::vector<float>(static_cast<size_t>(n), 0.f)),
            dv = put(t, std::vector<float>(static_cast<size_t>(n), 0.f));
        for (int step : {1, 2}) {
          AdamWArgs a = args_for(step);
          a.param = dp.as<float>();
          a.grad = dg.as<float>();
          a.m = dm.as<float>();
          a.v = dv.as<float>();
          a.n = n;
          t.adamw(a, var.reference);
        }
        // param: f32 rounding of operands of size ~|p0| where the update cancels it (atol 1e-6), as the CPU tests
        Cmp p = compare_close(get<float>(t, dp, wp.size()), wp, 1e-6, 1e-6);
        Cmp m = compare_close(get<float>(t, dm, wm.size()), wm, 1e-5, 1e-9);
        Cmp v = compare_close(get<float>(t, dv, wv.size()), wv, 1e-5, 1e-12);
        return !p.ok ? p : !m.ok ? m : !v.ok ? v : (p.ratio >= std::max(m.ratio, v.ratio) ? p : m.ratio >= v.ratio ? m : v);
      });
    }
    for (int64_t len : {n, int64_t(0), int64_t(16385)}) {
      const double want = cpu::sum_squares_ref(p0.data(), len);
      for (const Variant& var : t.variants()) {
        c.check("sum_squares " + var.name + " n=" + std::to_string(len), [&]() {
          Buf dp = put(t, p0);
          const double got = t.sum_squares(dp.as<float>(), len, var.reference);
          const double tol = 1e-10 * want;  // double partials: far below f32 resolution
          Cmp r;
          r.ratio = got == want ? 0 : tol > 0 ? std::fabs(got - want) / tol : INFINITY;
          r.ok = !(r.ratio > 1);
          r.detail = "got " + num(got) + ", want " + num(want) + " (rtol 1e-10)";
          return r;
        });
      }
    }
  }
  // Attention backward: causal, a padding mask, GQA; bitwise on rerun.
  {
    const int64_t B = 2, S = 33, H = 8, KVH = 2, D = 64;
    const size_t qn = static_cast<size_t>(B * S * H * D), kn = static_cast<size_t>(B * S * KVH * D);
    const std::vector<float> q = random_floats(qn, 21), k = random_floats(kn, 22), v = random_floats(kn, 23), dout = random_floats(qn, 24);
    std::vector<uint8_t> mask(static_cast<size_t>(B * S));
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = (static_cast<int64_t>(i) % S < 30 || static_cast<int64_t>(i) < S) ? 1 : 0;
    PrefillAttentionBwdArgs a;
    a.batch = B;
    a.seq = S;
    a.n_heads = H;
    a.n_kv_heads = KVH;
    a.head_dim = D;
    a.causal = true;
    a.scale = 0.125f;
    std::vector<float> wq(qn), wk(kn), wv(kn);
    {
      PrefillAttentionBwdArgs h = a;
      h.q = q.data();
      h.k = k.data();
      h.v = v.data();
      h.dout = dout.data();
      h.key_mask = mask.data();
      h.dq = wq.data();
      h.dk = wk.data();
      h.dv = wv.data();
      cpu::attention_prefill_bwd_ref(h);
    }
    for (const Variant& var : t.variants()) {
      std::vector<float> first;
      for (int rep = 0; rep < 2; ++rep) {
        c.check("attention_prefill_bwd " + var.name + " [2x33x8/2x64] causal mask" + (rep ? " rerun bitwise" : ""), [&]() {
          Buf dq = put(t, q), dk = put(t, k), dv = put(t, v), ddo = put(t, dout), dm = put(t, mask), oq(t, qn * 4), ok(t, kn * 4), ov(t, kn * 4);
          PrefillAttentionBwdArgs d = a;
          d.q = dq.as<float>();
          d.k = dk.as<float>();
          d.v = dv.as<float>();
          d.dout = ddo.as<float>();
          d.key_mask = dm.as<uint8_t>();
          d.dq = oq.as<float>();
          d.dk = ok.as<float>();
          d.dv = ov.as<float>();
          t.attention_prefill_bwd(d, var.reference);
          std::vector<float> all = get<float>(t, oq, qn), gk = get<float>(t, ok, kn), gv = get<float>(t, ov, kn);
          const double rtol = var.reference ? 1e-6 : 1e-4, atol = var.reference ? 1e-7 : 1e-5;
          Cmp r1 = compare_close(all, wq, rtol, atol), r2 = compare_close(gk, wk, rtol, atol), r3 = compare_close(gv, wv, rtol, atol);
          all.insert(all.end(), gk.begin(), gk.end());
          all.insert(all.end(), gv.begin(), gv.end());
          if (rep == 0) first = all;
          else {
            Cmp same = compare_bitwise(all, first);
            if (!same.ok) return Cmp{false, INFINITY, "rerun differs: " + same.detail};
          }
          return !r1.ok ? r1 : !r2.ok ? r2 : !r3.ok ? r3 : (r1.ratio >= std::max(r2.ratio, r3.ratio) ? r1 : r2.ratio >= r3.ratio ? r2 : r3);
        });
      }
    }
  }
}

}  // namespace

const std::string& current_check() { return g_current; }
void set_check_listener(std::function<void(const std::string&)> fn) { g_on_begin = std::move(fn); }
void set_result_listener(std::function<void(const CheckResult&)> fn) { g_on_result = std::move(fn); }

void run_family_checks(Target& t, Report& r, const std::string& family, const std::string& name_prefix) {
  Ctx c(t, r, family, name_prefix);
  if (family == "gemm") gemm_family(c);
  else if (family == "elementwise") elementwise_family(c);
  else if (family == "norm") norm_family(c);
  else if (family == "gather") gather_family(c);
  else if (family == "rope") rope_family(c);
  else if (family == "attention") attention_family(c);
  else if (family == "sgmv") sgmv_family(c);
  else if (family == "pet") pet_family(c);
  else if (family == "train") train_family(c);
  else throw std::invalid_argument("unknown kernel family " + family);
}

}  // namespace tessera::gpucheck

#include "cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tessera {

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.f16c = __builtin_cpu_supports("f16c");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512dq = __builtin_cpu_supports("avx512dq");
    c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
#if defined(__x86_64__) && defined(__linux__)
    unsigned a = 0, b = 0, cx = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {  // leaf 7 EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8
      c.amx_bf16 = (d >> 22) & 1u;
      c.amx_tile = (d >> 24) & 1u;
      c.amx_int8 = (d >> 25) & 1u;
    }
#endif
    return c;
  }();
  return f;
}

bool amx_ready() {
  static const bool ready = [] {
#if defined(__x86_64__) && defined(__linux__)
    if (!cpu_features().amx_tile) return false;
    constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ready;
}

Isa best_supported_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) return Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
  return Isa::Scalar;
}

namespace {
Isa initial_isa() {
  Isa isa = best_supported_isa();
  if (const char* env = std::getenv("TESSERA_ISA")) {
    Isa want = isa;
    if (std::strcmp(env, "scalar") == 0) want = Isa::Scalar;
    else if (std::strcmp(env, "avx2") == 0) want = Isa::Avx2;
    else if (std::strcmp(env, "avx512") == 0) want = Isa::Avx512;
    if (static_cast<int>(want) < static_cast<int>(isa)) isa = want;
  }
  return isa;
}
std::atomic<int>& isa_slot() {
  static std::atomic<int> slot{static_cast<int>(initial_isa())};
  return slot;
}
}  // namespace

Isa active_isa() { return static_cast<Isa>(isa_slot().load(std::memory_order_relaxed)); }

void set_active_isa(Isa isa) {
  const Isa best = best_supported_isa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  isa_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace tessera

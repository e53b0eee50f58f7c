// Runtime CPU dispatch, as in ggml: kernels are compiled for several ISAs (per-file target flags) and the
// best one the running CPU supports is chosen at run time. TESSERA_ISA=scalar|avx2|avx512 caps the choice,
// and tests switch it to compare every path against the scalar reference on one machine.
#pragma once

namespace tessera {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512bf16 = false;
  // What CPUID reports. Linux also needs a per-process request before the first tile instruction: amx_ready().
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
};

const CpuFeatures& cpu_features();
// True once the process may use AMX tiles: the CPU has AMX-TILE and the kernel granted the tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once, on first use; without it the first tile
// instruction raises SIGILL). AMX kernels sit under the Avx512 level and check this before they run.
bool amx_ready();
Isa best_supported_isa();
Isa active_isa();             // what kernels dispatch to now
void set_active_isa(Isa isa); // clamped to best_supported_isa()
const char* isa_name(Isa isa);

}  // namespace tessera

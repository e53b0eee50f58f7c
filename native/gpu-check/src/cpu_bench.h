// CPU GEMM micro-benchmarks of tessera-gpu-check (--cpu-bench): f32 against the bf16-compute kernels (cpu_bench.cc).
#pragma once
#include "report.h"

namespace tessera::gpucheck {

void run_cpu_benchmarks(Report& r);

}  // namespace tessera::gpucheck

// The CUDA part of the check (compiled only when nvcc was found and TESSERA_GPU_CHECK_CUDA is on).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "report.h"
#include "target.h"

namespace tessera::gpucheck {

struct CudaDeviceFacts {
  int index = 0;
  std::string name;
  int major = 0, minor = 0, sms = 0;
  uint64_t total_memory = 0;
  int l2_bytes = 0;
  double sm_clock_hz = 0, mem_clock_hz = 0;
  int bus_bits = 0;
  int driver_version = 0, runtime_version = 0;

  // Peak DRAM (HBM) bandwidth: double data rate x bus width.
  double hbm_bytes_per_s() const { return 2.0 * mem_clock_hz * bus_bits / 8.0; }
};

// Picks the device (TESSERA_CUDA_DEVICE, default 0), reads its facts and, with make_current, makes it current (which
// creates its context). Returns "" when it is usable, else why not.
std::string cuda_select_device(CudaDeviceFacts* facts, bool make_current);

std::unique_ptr<Target> make_cuda_target();

// Dense peak FLOP/s of one kind ("bf16 tensor", "f16 tensor", "tf32 tensor", "fp32") at the reported SM clock, by
// compute capability; 0 when this program knows no figure for the device.
double cuda_peak_flops(const CudaDeviceFacts& f, const std::string& kind);

// The GPU micro-benchmarks (cuda_bench.cc): GEMM, SGMV, attention, PET ops, plus a copy and an elementwise op for
// the bandwidth the device reaches at all.
void run_cuda_benchmarks(Report& r, const CudaDeviceFacts& f);

}  // namespace tessera::gpucheck

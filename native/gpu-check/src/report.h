// The check's results and the one plain-text report (plus an optional JSON file). Results are grouped by kernel
// family; every comparison records its worst element as a fraction of its tolerance, so the report says how close
// each family came to failing, not only whether it passed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::gpucheck {

// One comparison of a kernel's output with its reference.
struct CheckResult {
  std::string part;     // "cpu" (optimized CPU paths vs the scalar references) or "cuda"
  std::string family;   // gemm, elementwise, norm, ...
  std::string name;     // the case: kernel, variant and shape
  bool pass = false;
  double ratio = 0;     // worst |got - want| / tolerance (<= 1 passes; 0 when bitwise equal)
  std::string detail;   // the worst element, or why it failed
};

// One micro-benchmark: achieved rates and, where a peak applies, the fraction of it.
struct BenchResult {
  std::string family, name;
  double ms = 0;          // median time per call
  double gbps = 0;        // bytes the kernel must move / time (0: not bandwidth-bound, not stated)
  double tflops = 0;      // useful flops / time (0: not stated)
  double bw_frac = 0;     // gbps / peak HBM bandwidth
  double peak_frac = 0;   // tflops / the peak named in peak_kind
  std::string peak_kind;  // "bf16 tensor", "tf32 tensor", "fp32", ... (empty: no compute peak applies)
  std::string note;
};

struct InfoLine {
  std::string key, value;
};

class Report {
 public:
  void info(const std::string& key, const std::string& value) { info_.push_back({key, value}); }
  void add(CheckResult r) { checks_.push_back(std::move(r)); }
  void add(BenchResult b) { benches_.push_back(std::move(b)); }
  // "CUDA: skipped (reason)" / "CUDA: ran on <device>".
  void set_cuda_status(const std::string& s) { cuda_status_ = s; }

  const std::vector<CheckResult>& checks() const { return checks_; }
  const std::vector<BenchResult>& benches() const { return benches_; }
  const std::vector<InfoLine>& infos() const { return info_; }
  int failures() const;

  std::string text() const;
  std::string json() const;

 private:
  std::vector<InfoLine> info_;
  std::vector<CheckResult> checks_;
  std::vector<BenchResult> benches_;
  std::string cuda_status_;
};

// The kernel families every report lists, in order (the CPU part and the CUDA part check the same ones).
const std::vector<std::string>& kernel_families();

}  // namespace tessera::gpucheck

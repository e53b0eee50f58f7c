#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace tessera::gpucheck {

const std::vector<std::string>& kernel_families() {
  static const std::vector<std::string> f = {"gemm", "elementwise", "norm", "gather", "rope", "attention", "sgmv", "pet", "train"};
  return f;
}

int Report::failures() const {
  int n = 0;
  for (const CheckResult& c : checks_) n += c.pass ? 0 : 1;
  return n;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) o += fmt("\\u%04x", static_cast<double>(static_cast<unsigned char>(c)));
        else o += c;
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt("%.6g", v);
}

}  // namespace

std::string Report::text() const {
  std::ostringstream o;
  o << "tessera-gpu-check report\n";
  for (const InfoLine& i : info_) o << "  " << i.key << ": " << i.value << "\n";
  for (const std::string part : {"cpu", "cuda"}) {
    const bool any = std::any_of(checks_.begin(), checks_.end(), [&](const CheckResult& c) { return c.part == part; });
    if (part == "cpu") {
      if (!any) {
        o << "\n== CPU: skipped (--no-cpu)\n";
        continue;
      }
      o << "\n== CPU: optimized kernels vs the scalar references (every ISA this CPU has)\n";
    } else {
      o << "\n== " << cuda_status_ << "\n";
      if (!any) continue;
      o << "   CUDA kernels (fast and reference paths) vs the CPU reference backend\n";
    }
    for (const std::string& family : kernel_families()) {
      int n = 0, failed = 0;
      double worst = 0;
      const CheckResult* worst_case = nullptr;
      for (const CheckResult& c : checks_) {
        if (c.part != part || c.family != family) continue;
        ++n;
        if (!c.pass) ++failed;
        if (!worst_case || c.ratio > worst || (!c.pass && worst_case->pass)) {
          worst = c.ratio;
          worst_case = &c;
        }
      }
      char line[256];
      if (n == 0) {
        std::snprintf(line, sizeof line, "  %-12s  no checks ran\n", family.c_str());
        o << line;
        continue;
      }
      std::snprintf(line, sizeof line, "  %-12s %4d checks  %-4s  worst %s of tolerance", family.c_str(), n, failed ? "FAIL" : "pass",
                    fmt("%.3g", worst).c_str());
      o << line;
      if (worst_case) o << "  (" << worst_case->name << ")";
      o << "\n";
      for (const CheckResult& c : checks_) {
        if (c.part == part && c.family == family && !c.pass) o << "      FAIL " << c.name << ": " << c.detail << "\n";
      }
    }
    // Checks in families outside the fixed list (none expected) still show.
    for (const CheckResult& c : checks_) {
      if (c.part == part && std::find(kernel_families().begin(), kernel_families().end(), c.family) == kernel_families().end())
        o << "  " << c.family << " " << c.name << ": " << (c.pass ? "pass" : "FAIL ") << c.detail << "\n";
    }
  }
  if (!benches_.empty()) {
    o << "\n== CUDA micro-benchmarks (median of timed calls after warm-up)\n";
    char line[320];
    std::snprintf(line, sizeof line, "  %-11s %-52s %9s %9s %7s %9s %7s  %s\n", "family", "case", "ms", "GB/s", "%HBM", "TFLOP/s", "%peak",
                  "peak");
    o << line;
    for (const BenchResult& b : benches_) {
      std::snprintf(line, sizeof line, "  %-11s %-52s %9.4f %9s %7s %9s %7s  %s\n", b.family.c_str(), b.name.c_str(), b.ms,
                    b.gbps > 0 ? fmt("%.1f", b.gbps).c_str() : "-", b.bw_frac > 0 ? fmt("%.1f", 100 * b.bw_frac).c_str() : "-",
                    b.tflops > 0 ? fmt("%.2f", b.tflops).c_str() : "-", b.peak_frac > 0 ? fmt("%.1f", 100 * b.peak_frac).c_str() : "-",
                    b.peak_kind.c_str());
      o << line;
      if (!b.note.empty()) o << "  " << std::string(12, ' ') << b.note << "\n";
    }
  }
  const int failed = failures();
  o << "\nRESULT: " << (failed ? "FAIL" : "PASS") << " (" << checks_.size() << " checks, " << failed << " failed)\n";
  return o.str();
}

std::string Report::json() const {
  std::ostringstream o;
  o << "{\n  \"result\": " << json_str(failures() ? "fail" : "pass") << ",\n  \"failures\": " << failures() << ",\n  \"cuda\": "
    << json_str(cuda_status_) << ",\n  \"info\": {";
  for (size_t i = 0; i < info_.size(); ++i) o << (i ? ", " : "") << json_str(info_[i].key) << ": " << json_str(info_[i].value);
  o << "},\n  \"checks\": [\n";
  for (size_t i = 0; i < checks_.size(); ++i) {
    const CheckResult& c = checks_[i];
    o << "    {\"part\": " << json_str(c.part) << ", \"family\": " << json_str(c.family) << ", \"name\": " << json_str(c.name)
      << ", \"pass\": " << (c.pass ? "true" : "false") << ", \"ratio\": " << json_num(c.ratio) << ", \"detail\": " << json_str(c.detail)
      << "}" << (i + 1 < checks_.size() ? "," : "") << "\n";
  }
  o << "  ],\n  \"benchmarks\": [\n";
  for (size_t i = 0; i < benches_.size(); ++i) {
    const BenchResult& b = benches_[i];
    o << "    {\"family\": " << json_str(b.family) << ", \"name\": " << json_str(b.name) << ", \"ms\": " << json_num(b.ms)
      << ", \"gbps\": " << json_num(b.gbps) << ", \"hbm_frac\": " << json_num(b.bw_frac) << ", \"tflops\": " << json_num(b.tflops)
      << ", \"peak_frac\": " << json_num(b.peak_frac) << ", \"peak\": " << json_str(b.peak_kind) << ", \"note\": " << json_str(b.note) << "}"
      << (i + 1 < benches_.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  return o.str();
}

}  // namespace tessera::gpucheck

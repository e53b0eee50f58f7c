// tessera-gpu-check: checks every kernel family against the CPU's scalar references and benchmarks the GPU, with no
// Node.js: built from native/ by CMake alone (native/gpu-check/run.sh), it prints one plain-text report (and JSON with
// --json). Exit status 0 when every check passed, 1 when any failed, 2 on a usage error.
//
//   1. CPU: every optimized CPU kernel at every ISA this CPU has (scalar, AVX2, AVX-512) vs the scalar references.
//   2. CUDA (when compiled in and a device answers, else "CUDA: skipped (reason)"): every CUDA kernel, fast and
//      reference paths, vs the CPU references; then the micro-benchmarks. Each kernel family runs in its own child
//      process (this executable, re-run with --cuda-child), so a kernel that faults the device or hangs fails its own
//      family, names the check that was running, and leaves the other families' results intact.
//   3. With --cpu-bench: the CPU's f32 GEMM against its bf16-compute kernels (AVX512-BF16, AMX) on bench gemm's
//      shapes (cpu_bench.cc), for the hosts with AMX CPUs and no Node.js.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../cpp/core/cpu_features.h"
#include "../../cpp/core/thread_pool.h"
#include "cpu_bench.h"
#include "cpu_target.h"
#include "report.h"
#include "target.h"
#ifdef TESSERA_GPU_CHECK_CUDA
#include "cuda_target.h"
#endif

namespace tessera::gpucheck {

namespace {

struct Options {
  std::string json_path, report_path;
  std::string inject_fault;  // testing the checker: a CPU family whose outputs are corrupted (must then fail)
  bool bench = true, cuda = true, cpu = true, cpu_bench = false;
  std::vector<std::string> families = kernel_families();
  double family_timeout_s = 150;  // a family takes seconds; a hung kernel must not eat a GPU lease
  // internal: a child process running one CUDA family ("bench": the benchmarks), streaming results to a file
  std::string child_family, child_results;
};

void usage() {
  std::cerr << "usage: tessera-gpu-check [--json PATH] [--report PATH] [--no-bench] [--no-cuda] [--no-cpu] [--cpu-bench]\n"
               "                         [--families gemm,sgmv,...] [--family-timeout SECONDS]\n"
               "                         [--inject-fault FAMILY]   (tests the checker: corrupts that family's CPU outputs)\n"
               "families: ";
  for (const std::string& f : kernel_families()) std::cerr << f << " ";
  std::cerr << "\n";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--json") o.json_path = value();
    else if (a == "--report") o.report_path = value();
    else if (a == "--no-bench") o.bench = false;
    else if (a == "--cpu-bench") o.cpu_bench = true;
    else if (a == "--no-cuda") o.cuda = false;
    else if (a == "--no-cpu") o.cpu = false;
    else if (a == "--families") {
      o.families = split(value(), ',');
      for (const std::string& f : o.families) {
        bool known = false;
        for (const std::string& k : kernel_families()) known = known || k == f;
        if (!known) throw std::invalid_argument("unknown family " + f);
      }
    } else if (a == "--family-timeout") o.family_timeout_s = std::atof(value().c_str());
    else if (a == "--inject-fault") o.inject_fault = value();
    else if (a == "--cuda-child") o.child_family = value();
    else if (a == "--results") o.child_results = value();
    else if (a == "-h" || a == "--help") return false;
    else throw std::invalid_argument("unknown argument " + a);
  }
  return true;
}

#ifdef TESSERA_GPU_CHECK_CUDA
// ---------------------------------------------------------------- child-process results (one line per record)

std::string clean(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

void write_line(FILE* f, const std::string& line) {
  std::fputs(line.c_str(), f);
  std::fputc('\n', f);
  std::fflush(f);
}

std::string check_line(const CheckResult& c) {
  return "C\t" + clean(c.family) + "\t" + clean(c.name) + "\t" + (c.pass ? "1" : "0") + "\t" + std::to_string(c.ratio) + "\t" + clean(c.detail);
}

std::string bench_line(const BenchResult& b) {
  char nums[256];
  std::snprintf(nums, sizeof nums, "%.9g\t%.9g\t%.9g\t%.9g\t%.9g", b.ms, b.gbps, b.tflops, b.bw_frac, b.peak_frac);
  return "B\t" + clean(b.family) + "\t" + clean(b.name) + "\t" + nums + "\t" + clean(b.peak_kind) + "\t" + clean(b.note);
}

double to_d(const std::string& s) {
  if (s == "inf") return INFINITY;
  return std::strtod(s.c_str(), nullptr);
}

// Reads a child's results into the report; returns the last check it started (for a crash message).
std::string merge_results(const std::string& path, Report& r) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t start = 0;
    for (size_t p; (p = line.find('\t', start)) != std::string::npos; start = p + 1) f.push_back(line.substr(start, p - start));
    f.push_back(line.substr(start));
    if (f[0] == "S" && f.size() >= 2) last = f[1];
    else if (f[0] == "C" && f.size() >= 6) {
      CheckResult c;
      c.part = "cuda";
      c.family = f[1];
      c.name = f[2];
      c.pass = f[3] == "1";
      c.ratio = to_d(f[4]);
      c.detail = f[5];
      r.add(c);
      last.clear();
    } else if (f[0] == "B" && f.size() >= 10) {
      BenchResult b;
      b.family = f[1];
      b.name = f[2];
      b.ms = to_d(f[3]);
      b.gbps = to_d(f[4]);
      b.tflops = to_d(f[5]);
      b.bw_frac = to_d(f[6]);
      b.peak_frac = to_d(f[7]);
      b.peak_kind = f[8];
      b.note = f[9];
      r.add(b);
    }
  }
  return last;
}
#endif

// ---------------------------------------------------------------- the CPU part

void run_cpu_part(Report& r, const Options& o) {
  auto t = make_cpu_target(o.inject_fault);
  const Isa best = best_supported_isa();
  std::string isas;
  for (int i = 0; i <= static_cast<int>(best); ++i) isas += std::string(i ? ", " : "") + isa_name(static_cast<Isa>(i));
  std::string model = "unknown";
  {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
        model = line.substr(line.find(':') + 2);
        break;
      }
    }
  }
  r.info("cpu", model + "; ISAs checked: " + isas + "; threads " + std::to_string(global_pool().size()));
  const Isa before = active_isa();
  for (int i = 0; i <= static_cast<int>(best); ++i) {
    set_active_isa(static_cast<Isa>(i));
    for (const std::string& family : o.families) run_family_checks(*t, r, family, std::string(isa_name(static_cast<Isa>(i))) + ": ");
  }
  set_active_isa(before);
}

// ---------------------------------------------------------------- the CUDA part

#ifdef TESSERA_GPU_CHECK_CUDA

std::string describe(const CudaDeviceFacts& f) {
  char b[512];
  std::snprintf(b, sizeof b,
                "%s (device %d, compute capability %d.%d, %d SMs at %.0f MHz, %.1f GiB, HBM %.0f GB/s peak = %.0f MHz x 2 x %d bits, "
                "L2 %d MiB, driver %d, runtime %d)",
                f.name.c_str(), f.index, f.major, f.minor, f.sms, f.sm_clock_hz / 1e6, f.total_memory / 1073741824.0, f.hbm_bytes_per_s() / 1e9,
                f.mem_clock_hz / 1e6, f.bus_bits, f.l2_bytes >> 20, f.driver_version, f.runtime_version);
  return b;
}

// Runs in the child: one family (or the benchmarks), streaming every record to `path` as it is made.
int cuda_child(const Options& o) {
  FILE* out = std::fopen(o.child_results.c_str(), "w");
  if (!out) return 4;
  CudaDeviceFacts f;
  const std::string why = cuda_select_device(&f, true);
  if (!why.empty()) {
    CheckResult c{"cuda", o.child_family, "device", false, INFINITY, why};
    write_line(out, check_line(c));
    return 3;
  }
  Report r;
  std::string lost;
  try {
    if (o.child_family == "bench") {
      run_cuda_benchmarks(r, f);
    } else {
      auto t = make_cuda_target();
      // Stream as we go: a crash later still leaves everything recorded so far, and names the check it hit.
      set_check_listener([&](const std::string& name) { write_line(out, "S\t" + clean(name)); });
      set_result_listener([&](const CheckResult& c) { write_line(out, check_line(c)); });
      run_family_checks(*t, r, o.child_family, "");
    }
  } catch (const std::exception& e) {
    lost = std::string(e.what()) + (o.child_family == "bench" ? "" : " (after " + current_check() + ")") +
           "; the remaining " + (o.child_family == "bench" ? "benchmarks" : "checks of the family") + " did not run";
  }
  if (o.child_family == "bench") {  // the benchmarks finished so far, also when a later one lost the device
    for (const CheckResult& c : r.checks()) write_line(out, check_line(c));
    for (const BenchResult& b : r.benches()) write_line(out, bench_line(b));
  }
  if (!lost.empty()) write_line(out, check_line(CheckResult{"cuda", o.child_family, "device lost", false, INFINITY, lost}));
  std::fclose(out);
  return lost.empty() ? 0 : 3;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  return buf;
}

// Runs one family in a child process with a time limit and merges its results.
void run_child(const std::string& family, const Options& o, Report& r) {
  char tmpl[] = "/tmp/tessera-gpu-check-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  const std::string results = tmpl, exe = self_path();
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    execl(exe.c_str(), exe.c_str(), "--cuda-child", family.c_str(), "--results", results.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > o.family_timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string last = merge_results(results, r);
  std::remove(results.c_str());
  const std::string fam = family == "bench" ? "benchmarks" : family;
  if (timed_out) {
    r.add(CheckResult{"cuda", family, fam + " process", false, INFINITY,
                      "timed out after " + std::to_string(static_cast<int>(o.family_timeout_s)) + " s" + (last.empty() ? "" : " during " + last)});
  } else if (WIFSIGNALED(status)) {
    r.add(CheckResult{"cuda", family, fam + " process", false, INFINITY,
                      std::string("killed by signal ") + strsignal(WTERMSIG(status)) + (last.empty() ? "" : " during " + last)});
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3) {
    r.add(CheckResult{"cuda", family, fam + " process", false, INFINITY,
                      "exited with status " + std::to_string(WEXITSTATUS(status)) + (last.empty() ? "" : " during " + last)});
  }
  char b[64];
  std::snprintf(b, sizeof b, "%.1f s", secs);
  r.info("cuda " + fam + " time", b);
}

void run_cuda_part(Report& r, const Options& o) {
  if (!o.cuda) {
    r.set_cuda_status("CUDA: skipped (--no-cuda)");
    return;
  }
  CudaDeviceFacts f;
  const std::string why = cuda_select_device(&f, false);
  if (!why.empty()) {
    r.set_cuda_status("CUDA: skipped (" + why + ")");
    return;
  }
  r.set_cuda_status("CUDA: ran on " + f.name);
  r.info("cuda device", describe(f));
  for (const char* kind : {"bf16 tensor", "tf32 tensor", "fp32"}) {
    const double p = cuda_peak_flops(f, kind);
    r.info(std::string("cuda peak ") + kind, p > 0 ? std::to_string(static_cast<int>(p / 1e12)) + " TFLOP/s (dense, at the max SM clock)"
                                                   : "no figure for this compute capability");
  }
  for (const std::string& family : o.families) run_child(family, o, r);
  if (o.bench) run_child("bench", o, r);
}

#else

void run_cuda_part(Report& r, const Options&) {
  r.set_cuda_status(std::string("CUDA: skipped (") + TESSERA_GPU_CHECK_NO_CUDA_REASON + ")");
}

#endif

int run(int argc, char** argv) {
  Options o;
  try {
    if (!parse(argc, argv, o)) {
      usage();
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "tessera-gpu-check: " << e.what() << "\n";
    usage();
    return 2;
  }
#ifdef TESSERA_GPU_CHECK_CUDA
  if (!o.child_family.empty()) return cuda_child(o);
#endif
  Report r;
  const auto t0 = std::chrono::steady_clock::now();
  r.info("kernel families", [] {
    std::string s;
    for (const std::string& f : kernel_families()) s += (s.empty() ? "" : ", ") + f;
    return s;
  }());
  if (o.cpu) {
    run_cpu_part(r, o);
    char b[64];
    std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    r.info("cpu time", b);
  }
  if (o.cpu_bench) run_cpu_benchmarks(r);
  run_cuda_part(r, o);
  const std::string text = r.text();
  std::cout << text << std::flush;
  if (!o.report_path.empty()) std::ofstream(o.report_path) << text;
  if (!o.json_path.empty()) std::ofstream(o.json_path) << r.json();
  return r.failures() ? 1 : 0;
}

}  // namespace

}  // namespace tessera::gpucheck

int main(int argc, char** argv) { return tessera::gpucheck::run(argc, argv); }

#include "thread_pool.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera {

namespace {
thread_local bool t_inside_pool = false;

// Kernels are often called back to back on small problems (a 768 x 768 GEMM with m = 32 takes 0.2 ms), where a
// condition-variable wake-up (several microseconds, each way) is a visible share of the call. So a worker that
// finished a job, and a caller waiting for its workers, poll for this long before sleeping.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls until done() holds or kSpin has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) threads = 1;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks() {
  const bool was_inside = t_inside_pool;
  t_inside_pool = true;
  for (;;) {
    const int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (t >= job_tasks_) break;
    try {
      (*job_)(t);
    } catch (...) {
      // An exception escaping a worker thread would terminate the process: keep the first, skip the rest.
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(job_tasks_, std::memory_order_relaxed);
    }
  }
  t_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  auto woken = [&] {
    return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_tasks();
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be asleep on cv_done_: notify under mu_ so the wake-up cannot fall between its check
      // and its wait.
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t tasks, const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1 || t_inside_pool) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_tasks_ = tasks;
    next_task_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    // Release: a spinning worker that sees the new generation also sees the job fields above.
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_tasks();
  auto finished = [&] { return active_.load(std::memory_order_acquire) == 0; };
  spin_until(finished);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, finished);
  job_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    lock.unlock();
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_range(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  // Chunk count depends on n and grain only, never on the thread count.
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t chunks = max_chunks < 64 ? max_chunks : 64;
  const int64_t per = (n + chunks - 1) / chunks;
  parallel_for(chunks, [&](int64_t c) {
    const int64_t b = c * per;
    const int64_t e = b + per < n ? b + per : n;
    if (b < e) fn(b, e);
  });
}

int default_thread_count() {
  if (const char* env = std::getenv("TESSERA_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool& global_pool() {
  auto& slot = pool_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(default_thread_count());
  return *slot;
}

void set_global_threads(int threads) { pool_slot() = std::make_unique<ThreadPool>(threads < 1 ? 1 : threads); }

}  // namespace tessera

// A fixed pool of worker threads for kernels. parallel_for hands out task indices; each task must write a
// disjoint part of the output with a fixed internal reduction order, which is what makes every kernel's
// result bitwise identical for any thread count.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // the caller participates

  // Runs fn(task) for task in [0, tasks). Blocks until all are done. Tasks are claimed dynamically;
  // results must not depend on which thread ran which task. Nested calls run inline. If a task throws, the
  // remaining unclaimed tasks are skipped and the first exception is rethrown on the calling thread.
  void parallel_for(int64_t tasks, const std::function<void(int64_t)>& fn);

  // parallel_for, or a plain loop on the calling thread when `on_caller` is set: for work smaller than what
  // waking the pool costs (and, on a busy machine, waiting for a descheduled worker to check in). Tasks write
  // disjoint outputs, so both ways give the same bits.
  void parallel_for_or_inline(int64_t tasks, bool on_caller, const std::function<void(int64_t)>& fn) {
    if (on_caller) {
      for (int64_t t = 0; t < tasks; ++t) fn(t);
    } else {
      parallel_for(tasks, fn);
    }
  }

  // Convenience: splits [0, n) into chunks of at least `grain` items, fn(begin, end).
  void parallel_range(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_tasks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::exception_ptr error_;  // first exception thrown by a task of the current job (guarded by mu_)
  // Atomic so that a worker spinning after a job (see worker_loop) sees the next job, and the caller sees the
  // workers finish, without taking mu_; they are still written under mu_ where a sleeper must be woken.
  std::atomic<int> active_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex run_mu_;  // one parallel_for at a time
};

// The process-wide pool kernels use, sized from TESSERA_THREADS (default: hardware threads).
ThreadPool& global_pool();
// Replaces the global pool (tests compare 1 vs 2 threads). Not safe while kernels run.
void set_global_threads(int threads);
int default_thread_count();

}  // namespace tessera

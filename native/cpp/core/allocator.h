// Every tensor's memory comes from an Allocator with a byte budget: "device memory" limits (how many tenants
// fit) are real and measurable on CPU too. Exceeding the budget throws ErrorCode::BudgetExceeded; nothing is
// overcommitted. Thread-safe: background copies allocate and free from other threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "error.h"

namespace tessera {

struct AllocatorStats {
  uint64_t in_use = 0;       // bytes currently allocated
  uint64_t peak = 0;         // high-water mark since creation or reset_peak()
  uint64_t budget = 0;       // limit; allocations beyond it fail
  uint64_t allocations = 0;  // live allocation count
  uint64_t total_allocations = 0;
  uint64_t failed = 0;       // rejected for budget
};

class Allocator {
 public:
  explicit Allocator(uint64_t budget) { stats_.budget = budget; }
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Reserves `bytes` against the budget, then asks the backend for memory. Zero-byte requests get a valid
  // (non-null) pointer so empty tensors need no special cases.
  void* allocate(uint64_t bytes) {
    const uint64_t charged = charge(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stats_.in_use + charged > stats_.budget) {
        ++stats_.failed;
        const uint64_t in_use = stats_.in_use, budget = stats_.budget;
        throw Error(ErrorCode::BudgetExceeded,
                    std::string(name()) + " allocator: cannot allocate " + std::to_string(bytes) + " bytes: " +
                        std::to_string(in_use) + " of " + std::to_string(budget) + " budget bytes in use");
      }
      stats_.in_use += charged;
      if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
      ++stats_.allocations;
      ++stats_.total_allocations;
    }
    void* p = nullptr;
    try {
      p = raw_allocate(charged == 0 ? kAlignment : charged);
    } catch (...) {
      release_charge(charged);
      throw;
    }
    return p;
  }

  void deallocate(void* p, uint64_t bytes) {
    if (!p) return;
    const uint64_t charged = charge(bytes);
    raw_free(p, charged == 0 ? kAlignment : charged);
    release_charge(charged);
  }

  AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  // Lowering the budget below what is in use is allowed: new allocations fail until enough is freed.
  void set_budget(uint64_t budget) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.budget = budget;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak = stats_.in_use;
  }

  virtual const char* name() const = 0;
  static constexpr uint64_t kAlignment = 64;

 protected:
  virtual void* raw_allocate(uint64_t bytes) = 0;
  virtual void raw_free(void* p, uint64_t bytes) = 0;

 private:
  // Budget accounting rounds every allocation up to the 64-byte alignment actually consumed.
  static uint64_t charge(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  void release_charge(uint64_t charged) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.in_use -= charged;
    --stats_.allocations;
  }

  mutable std::mutex mu_;
  AllocatorStats stats_;
};

// Host memory, 64-byte aligned so every SIMD width loads aligned rows when strides allow.
class HostAllocator final : public Allocator {
 public:
  using Allocator::Allocator;
  const char* name() const override { return "cpu"; }

 protected:
  void* raw_allocate(uint64_t bytes) override;
  void raw_free(void* p, uint64_t bytes) override;
};

}  // namespace tessera

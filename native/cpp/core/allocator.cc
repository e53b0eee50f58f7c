#include "allocator.h"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

namespace tessera {

// malloc(bytes + kAlignment) aligned by hand (the block's own pointer kept just below the aligned address), not
// aligned_alloc: glibc's memalign asks for bytes + alignment + slack, so a freed tensor's hole is never quite big
// enough for the next tensor of the same size, while small allocations settle in the slack and pin it. A training
// loop that allocates and frees the same activations every step then grew the heap by about their size per step
// (23 GB in minutes). A plain malloc of the same size reuses the same hole.
void* HostAllocator::raw_allocate(uint64_t bytes) {
  static_assert(kAlignment >= sizeof(void*) && (kAlignment & (kAlignment - 1)) == 0, "alignment: a power of two that fits a pointer");
  void* base = std::malloc(static_cast<size_t>(bytes) + kAlignment);
  if (!base) {
    throw Error(ErrorCode::Device, "cpu allocator: the operating system refused " + std::to_string(bytes) + " bytes");
  }
  // malloc's result is at least 16-byte aligned, so the aligned address is 16..kAlignment bytes past it: room for the pointer.
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(base) + kAlignment) & ~static_cast<uintptr_t>(kAlignment - 1);
  reinterpret_cast<void**>(aligned)[-1] = base;
  return reinterpret_cast<void*>(aligned);
}

void HostAllocator::raw_free(void* p, uint64_t) { std::free(static_cast<void**>(p)[-1]); }

}  // namespace tessera

#include "allocator.h"

#include <cstdlib>
#include <new>

namespace tessera {

void* HostAllocator::raw_allocate(uint64_t bytes) {
  void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
  if (!p) {
    throw Error(ErrorCode::Device, "cpu allocator: the operating system refused " + std::to_string(bytes) + " bytes");
  }
  return p;
}

void HostAllocator::raw_free(void* p, uint64_t) { std::free(p); }

}  // namespace tessera

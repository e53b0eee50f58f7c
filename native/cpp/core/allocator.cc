#include "allocator.h"

#include <cstdlib>
#include <new>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tessera {

namespace {
// Activations are large and short-lived: every forward allocates and frees workspaces of the same sizes (tens of
// MiB at PetS batch sizes). By default glibc serves such blocks with fresh mmaps and unmaps them on free, so each
// forward faults its whole workspace in again, page by page, and its heap trims freed memory back to the OS.
// Keeping blocks up to glibc's largest mmap threshold on the heap, untrimmed, lets the next forward reuse them: the
// CPU counterpart of the caching allocator GPU engines use (PetS's CUB allocator). Budget accounting is unchanged:
// it counts live tensors, not what the C library keeps.
struct HostMallocTuning {
  HostMallocTuning() {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's upper limit on 64-bit
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }
};
const HostMallocTuning host_malloc_tuning;
}  // namespace

void* HostAllocator::raw_allocate(uint64_t bytes) {
  void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
  if (!p) {
    throw Error(ErrorCode::Device, "cpu allocator: the operating system refused " + std::to_string(bytes) + " bytes");
  }
  return p;
}

void HostAllocator::raw_free(void* p, uint64_t) { std::free(p); }

}  // namespace tessera

// Gathers and copies: embedding lookup (f32/f16/bf16 table -> f32 rows), byte-row gather/scatter (any dtype), and
// f32/f16/bf16 conversion. All are exact data movement (conversions round to nearest even with core/dtype.h's NaN
// encoding), so they match the CPU backend bit for bit. Indices were validated on the host by the bindings.
#include <cstdint>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "device_common.cuh"

namespace tessera::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBlocks = 1 << 20;

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks); }
bool aligned_to(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

// ---------------------------------------------------------------- embedding

// Fast: one block per output row, threads across the row (coalesced reads of the table row).
template <int kDType>
__global__ void embedding_kernel(const void* table, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t base = static_cast<int64_t>(ids[i]) * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[i * dim + c] = load_as_f32<kDType>(table, base + c);
  }
}

// Reference: one thread per output element.
template <int kDType>
__global__ void embedding_ref_kernel(const void* table, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * dim) return;
  const int64_t i = e / dim, c = e % dim;
  out[e] = load_as_f32<kDType>(table, static_cast<int64_t>(ids[i]) * dim + c);
}

// ---------------------------------------------------------------- row gather / scatter over words of type W

template <typename W>
__global__ void gather_rows_kernel(const W* src, int64_t row_words, const int32_t* idx, int64_t n, W* dst) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const W* s = src + static_cast<int64_t>(idx[i]) * row_words;
    W* d = dst + i * row_words;
    for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) d[w] = s[w];
  }
}

template <typename W>
__global__ void scatter_rows_kernel(const W* src, int64_t row_words, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, W* dst) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t from = src_rows ? src_rows[i] : i;
    const W* s = src + from * row_words;
    W* d = dst + static_cast<int64_t>(dst_rows[i]) * row_words;
    for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) d[w] = s[w];
  }
}

// Widest word (16, 4 or 1 bytes) that divides the row and keeps every row start aligned.
int word_bytes(int64_t row_bytes, const void* a, const void* b) {
  if (row_bytes % 16 == 0 && aligned_to(a, 16) && aligned_to(b, 16)) return 16;
  if (row_bytes % 4 == 0 && aligned_to(a, 4) && aligned_to(b, 4)) return 4;
  return 1;
}

int row_threads(int64_t row_words) { return row_words >= 256 ? 256 : row_words > 64 ? 128 : 32; }

// ---------------------------------------------------------------- conversion

template <int kTo>
__device__ __forceinline__ void store_from_f32(void* dst, int64_t i, float v) {
  if constexpr (kTo == 0) {
    static_cast<float*>(dst)[i] = v;
  } else if constexpr (kTo == 1) {
    static_cast<uint16_t*>(dst)[i] = f32_to_f16_bits(v);
  } else {
    static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(v);
  }
}

// f16 -> bf16 (and back) goes through f32, which is exact, then rounds once: as the CPU conversion does.
template <int kFrom, int kTo>
__global__ void convert_kernel(const void* src, void* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_from_f32<kTo>(dst, i, load_as_f32<kFrom>(src, i));
}

int float_code(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::BF16: return 2;
    default: fail(ErrorCode::DTypeMismatch, std::string("convert: ") + dtype_name(t) + " is not a floating-point dtype");
  }
}

template <int kFrom>
void launch_convert(const void* src, int to, void* dst, int64_t n, unsigned grid) {
  switch (to) {
    case 0: convert_kernel<kFrom, 0><<<grid, kThreads>>>(src, dst, n); break;
    case 1: convert_kernel<kFrom, 1><<<grid, kThreads>>>(src, dst, n); break;
    default: convert_kernel<kFrom, 2><<<grid, kThreads>>>(src, dst, n); break;
  }
}

}  // namespace

void embedding(const void* table, DType table_dtype, int64_t dim, const int32_t* ids, int64_t n, float* out, bool reference) {
  if (n == 0 || dim == 0) return;
  const int code = float_code(table_dtype);
  if (reference) {
    const int64_t total = n * dim;
    const int64_t blocks = (total + kThreads - 1) / kThreads;
    if (blocks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "embedding reference: too many elements for one launch");
    const unsigned grid = static_cast<unsigned>(blocks);
    if (code == 0) embedding_ref_kernel<0><<<grid, kThreads>>>(table, dim, ids, n, out);
    else if (code == 1) embedding_ref_kernel<1><<<grid, kThreads>>>(table, dim, ids, n, out);
    else embedding_ref_kernel<2><<<grid, kThreads>>>(table, dim, ids, n, out);
    check_launch("embedding_ref_kernel");
    return;
  }
  const int threads = row_threads(dim);
  if (code == 0) embedding_kernel<0><<<row_grid(n), threads>>>(table, dim, ids, n, out);
  else if (code == 1) embedding_kernel<1><<<row_grid(n), threads>>>(table, dim, ids, n, out);
  else embedding_kernel<2><<<row_grid(n), threads>>>(table, dim, ids, n, out);
  check_launch("embedding_kernel");
}

void gather_rows(const void* src, int64_t row_bytes, const int32_t* idx, int64_t n, void* dst) {
  if (n == 0 || row_bytes == 0) return;
  const int wb = word_bytes(row_bytes, src, dst);
  const int64_t words = row_bytes / wb;
  const int threads = row_threads(words);
  if (wb == 16) gather_rows_kernel<<<row_grid(n), threads>>>(static_cast<const uint4*>(src), words, idx, n, static_cast<uint4*>(dst));
  else if (wb == 4) gather_rows_kernel<<<row_grid(n), threads>>>(static_cast<const uint32_t*>(src), words, idx, n, static_cast<uint32_t*>(dst));
  else gather_rows_kernel<<<row_grid(n), threads>>>(static_cast<const uint8_t*>(src), words, idx, n, static_cast<uint8_t*>(dst));
  check_launch("gather_rows_kernel");
}

void scatter_rows(const void* src, int64_t row_bytes, const int32_t* src_rows, const int32_t* dst_rows, int64_t n, void* dst) {
  if (n == 0 || row_bytes == 0) return;
  const int wb = word_bytes(row_bytes, src, dst);
  const int64_t words = row_bytes / wb;
  const int threads = row_threads(words);
  if (wb == 16)
    scatter_rows_kernel<<<row_grid(n), threads>>>(static_cast<const uint4*>(src), words, src_rows, dst_rows, n, static_cast<uint4*>(dst));
  else if (wb == 4)
    scatter_rows_kernel<<<row_grid(n), threads>>>(static_cast<const uint32_t*>(src), words, src_rows, dst_rows, n, static_cast<uint32_t*>(dst));
  else
    scatter_rows_kernel<<<row_grid(n), threads>>>(static_cast<const uint8_t*>(src), words, src_rows, dst_rows, n, static_cast<uint8_t*>(dst));
  check_launch("scatter_rows_kernel");
}

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, bool reference) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) check_cuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype), cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync(convert)");
    return;
  }
  const int from = float_code(src_dtype), to = float_code(dst_dtype);
  // The reference is the same exact conversion with one thread per element (no grid-stride reuse).
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (!reference && blocks > 65535LL * 8) blocks = 65535LL * 8;
  if (blocks > 0x7fffffffLL) fail(ErrorCode::InvalidArgument, "convert reference: too many elements for one launch");
  const unsigned grid = static_cast<unsigned>(blocks);
  if (from == 0) launch_convert<0>(src, to, dst, n, grid);
  else if (from == 1) launch_convert<1>(src, to, dst, n, grid);
  else launch_convert<2>(src, to, dst, n, grid);
  check_launch("convert_kernel");
}

}  // namespace tessera::gpu

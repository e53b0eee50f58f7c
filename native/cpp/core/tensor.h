// A tensor is a contiguous row-major view (dtype, shape, byte offset) into reference-counted Storage that
// an Allocator owns. Row views share the storage, so a view keeps its parent's memory alive.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allocator.h"
#include "dtype.h"

namespace tessera {

class Storage {
 public:
  Storage(Allocator& alloc, uint64_t bytes) : alloc_(alloc), bytes_(bytes), data_(alloc.allocate(bytes)) {}
  ~Storage() { alloc_.deallocate(data_, bytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  Allocator& allocator() const { return alloc_; }

 private:
  Allocator& alloc_;
  uint64_t bytes_;
  void* data_;
};

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

struct Tensor {
  std::shared_ptr<Storage> storage;
  uint64_t offset = 0;  // bytes from storage->data()
  DType dtype = DType::F32;
  Shape shape;

  static Tensor empty(Allocator& alloc, DType dtype, Shape shape) {
    Tensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.storage = std::make_shared<Storage>(alloc, static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(dtype));
    return t;
  }

  int64_t numel() const { return shape_numel(shape); }
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t dim(size_t i) const { return shape.at(i); }
  int64_t last_dim() const { return shape.empty() ? 1 : shape.back(); }
  int64_t row_numel() const { return shape.empty() ? 1 : numel() / (shape[0] == 0 ? 1 : shape[0]); }

  void* raw() const { return static_cast<char*>(storage->data()) + offset; }
  template <typename T>
  T* data() const { return static_cast<T*>(raw()); }

  // Rows [start, start + count) of dimension 0; shares storage.
  Tensor rows_view(int64_t start, int64_t count) const {
    Tensor v = *this;
    int64_t per_row = 1;
    for (size_t i = 1; i < shape.size(); ++i) per_row *= shape[i];
    v.offset = offset + static_cast<uint64_t>(start * per_row) * dtype_size(dtype);
    v.shape[0] = count;
    return v;
  }
};

}  // namespace tessera

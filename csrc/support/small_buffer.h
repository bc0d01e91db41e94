// A fixed-size array that lives on the stack up to N elements and on the heap beyond: scratch space for one
// call on the per-call path, which should not allocate for the usual small graph.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>

namespace fastcomp {

template <class T, size_t N>
class SmallBuffer {
 public:
  explicit SmallBuffer(size_t n) : size_(n), data_(n <= N ? inline_ : (heap_ = std::make_unique<T[]>(n)).get()) {
    if (n <= N) std::fill_n(inline_, n, T());  // the heap array is value-initialised already
  }
  SmallBuffer(const SmallBuffer&) = delete;
  SmallBuffer& operator=(const SmallBuffer&) = delete;

  T* data() { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }

 private:
  size_t size_;
  T inline_[N];
  std::unique_ptr<T[]> heap_;
  T* data_;
};

}  // namespace fastcomp

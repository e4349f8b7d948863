#pragma once
// The elements of a real tensor: f64 values in one block that copies of the
// tensor share until one of them is written (copy on write).
//
// Why by hand and not std::vector<double>: the interpreters pass values into
// calls, folds, tuples and parameter trees by copy (interp/interpreter.h),
// and a training step copied every activation and parameter slice it passed
// (a fifth of a step at D = 256, docs/performance.md). Sharing makes a copy
// a reference count. And a writer that fills every element (a kernel's
// output, a product's result) asks for a block `for_overwrite`, which is not
// zero-filled first.
//
// Reading goes through the const accessors. The non-const ones (data(),
// operator[], begin(), end()) first make this storage the block's only
// owner, copying the elements when another tensor shares them, so a write
// never reaches another tensor. A writer takes its pointer after the last
// copy of the tensor it writes is made: a pointer taken, then the tensor
// copied, then written through, would reach both.

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <vector>

namespace quire::runtime {

class RealStorage {
 public:
  using value_type = double;
  using iterator = double*;
  using const_iterator = const double*;

  RealStorage() = default;
  /// n elements, each `fill`.
  explicit RealStorage(size_t n, double fill = 0.0) : RealStorage(for_overwrite(n)) {
    std::fill_n(block_.get(), n, fill);
  }
  RealStorage(std::initializer_list<double> values) : RealStorage(values.begin(), values.size()) {}
  // Implicit: a vector of values is this storage's natural literal (tests,
  // readers of files).
  RealStorage(const std::vector<double>& values) : RealStorage(values.data(), values.size()) {}  // NOLINT
  RealStorage(const double* values, size_t n) : RealStorage(for_overwrite(n)) { std::copy_n(values, n, block_.get()); }

  /// n elements whose values are indeterminate: for a writer that sets every one.
  static RealStorage for_overwrite(size_t n) {
    RealStorage s;
    s.size_ = n;
    if (n > 0) s.block_ = std::make_shared_for_overwrite<double[]>(n);
    return s;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  const double* data() const { return block_.get(); }
  const double& operator[](size_t i) const { return block_[static_cast<std::ptrdiff_t>(i)]; }
  const double* begin() const { return data(); }
  const double* end() const { return data() + size_; }

  double* data() {
    own();
    return block_.get();
  }
  double& operator[](size_t i) { return data()[i]; }
  double* begin() { return data(); }
  double* end() { return data() + size_; }

  /// Bounds-checked read.
  const double& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("RealStorage::at: index out of range");
    return (*this)[i];
  }

  void assign(size_t n, double fill) { *this = RealStorage(n, fill); }
  std::vector<double> to_vector() const { return {begin(), end()}; }
  /// Whether another tensor shares these elements (what a write would copy).
  bool shared() const { return block_ && block_.use_count() > 1; }

  friend bool operator==(const RealStorage& a, const RealStorage& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const RealStorage& a, const std::vector<double>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  /// Makes the block this storage's alone, copying it when it is shared.
  void own() {
    if (shared()) *this = RealStorage(block_.get(), size_);
  }

  std::shared_ptr<double[]> block_;
  size_t size_ = 0;
};

}  // namespace quire::runtime

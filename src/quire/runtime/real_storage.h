#pragma once
// The elements of a real tensor: one block that copies of the tensor share
// until one of them is written (copy on write), held as f64 values, as f32
// values, or both.
//
// Why by hand and not std::vector<double>: the interpreters pass values into
// calls, folds, tuples and parameter trees by copy (interp/interpreter.h),
// and a training step copied every activation and parameter slice it passed
// (a fifth of a step at D = 256, docs/performance.md). Sharing makes a copy
// a reference count. And a writer that fills every element (a kernel's
// output, a product's result) asks for a block `for_overwrite`, which is not
// zero-filled first.
//
// Why two representations: a value realized in f32, bf16 or f16 holds only
// numbers that f32 represents exactly, and the native kernels read and write
// such values as f32 (half the bytes of f64, and the packed products' own
// operand type). A kernel's f32 output is held as f32 alone; the f64 view is
// made the first time the host's reference walk reads the tensor, and is
// then kept beside it (and likewise the other way). Both views always hold
// the same numbers: a NaN may lose its payload bits in the f32 view, which
// no contract of quire keeps (docs/language.md §9).
//
// Reading goes through the const accessors (`data()`, `narrow()`). The
// non-const ones (data(), operator[], begin(), end(), narrow_for_writing())
// first make this storage the block's only owner, copying the elements when
// another tensor shares them, and drop the other view, so a write never
// reaches another tensor nor leaves a stale view. A writer takes its pointer
// after the last copy of the tensor it writes is made: a pointer taken, then
// the tensor copied, then written through, would reach both.
//
// A storage may be a window onto another's block (`window`: a contiguous
// slice, such as one copy of a stacked parameter, is not copied): it shares
// the block as a copy does, reads its own elements from `offset_` on, and a
// writer of either copies out its own elements first, as for any sharing.
// The f64 view made for a window is made for the whole block (widening is
// exact); the f32 view is not, since the rest of the block need not hold
// f32 numbers: a window that lacks it first copies its own elements out.
//
// The views are made lazily by const readers, so a storage must not be read
// by two threads at once before both views exist; quire's host is one thread
// (the kernels' workers receive pointers taken before they start).

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
    if (n > 0) std::fill_n(block_->wide.get(), n, fill);
  }
  RealStorage(std::initializer_list<double> values) : RealStorage(values.begin(), values.size()) {}
  // Implicit: a vector of values is this storage's natural literal (tests,
  // readers of files).
  RealStorage(const std::vector<double>& values) : RealStorage(values.data(), values.size()) {}  // NOLINT
  RealStorage(const double* values, size_t n) : RealStorage(for_overwrite(n)) {
    if (n > 0) std::copy_n(values, n, block_->wide.get());
  }

  /// n f64 elements whose values are indeterminate: for a writer that sets every one.
  static RealStorage for_overwrite(size_t n);
  /// n f32 elements whose values are indeterminate, held as f32 alone: for a
  /// writer of f32 values (narrow_for_writing) that sets every one.
  static RealStorage narrow_for_overwrite(size_t n);
  /// Elements [offset, offset + n) of `whole`, sharing its block (no copy).
  static RealStorage window(const RealStorage& whole, size_t offset, size_t n);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  /// The f64 view (made from the f32 one if this is its first reader).
  const double* data() const {
    if (block_ && block_->wide) return block_->wide.get() + offset_;  // the common case, inline
    return size_ == 0 ? nullptr : wide_view();
  }
  const double& operator[](size_t i) const { return data()[i]; }
  const double* begin() const { return data(); }
  const double* end() const { return data() + size_; }

  double* data() {
    if (block_ && block_->wide && !block_->narrow && block_.use_count() == 1) return block_->wide.get() + offset_;
    return own_wide();
  }
  double& operator[](size_t i) { return data()[i]; }
  double* begin() { return data(); }
  double* end() { return data() + size_; }

  /// The f32 view: every element as f32. Made from the f64 view if this is
  /// its first reader, which requires every element to be an f32 number (a
  /// NaN counts as one): std::logic_error otherwise, since a value realized
  /// in a narrow type that is not one is a broken invariant, not a rounding
  /// to perform here.
  const float* narrow() const {
    if (block_ && block_->narrow) return block_->narrow.get() + offset_;
    return size_ == 0 ? nullptr : narrow_view();
  }
  /// The f32 view for a writer of f32 values: this storage's alone, the f64 view dropped.
  float* narrow_for_writing();
  /// Whether the f32 view exists now (a reader of narrow() would not make it).
  bool holds_narrow() const { return block_ && block_->narrow; }
  /// Whether every element is an f32 number (a NaN counts as one): what
  /// narrow() requires. True at once where the f32 view exists.
  bool holds_f32_numbers() const;
  /// Whether the f64 view exists now.
  bool holds_wide() const { return block_ && block_->wide; }

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
  /// The shared elements: one view or both, each of `size` elements (a
  /// window's `size_` of them from `offset_` on).
  struct Block {
    std::unique_ptr<double[]> wide;
    std::unique_ptr<float[]> narrow;
    size_t size = 0;
    Block() = default;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    /// Reports its views released to the allocation log (allocation_log.h),
    /// as every allocation and release of a view is.
    ~Block();
  };

  double* own_wide();
  /// Makes the block this storage's alone (copying `current`, the view
  /// `mine` as it is, when another storage shares it) and drops the view
  /// `other`: what a writer of `mine` needs.
  template <class Mine, class Other>
  Mine* own_view(std::unique_ptr<Mine[]> Block::*mine, std::unique_ptr<Other[]> Block::*other, const Mine* current);
  const double* wide_view() const;
  const float* narrow_view() const;

  /// Gives a window of a block that has only the f64 view a block of its
  /// own with its elements (narrow_view's first step for such a window).
  void detach_wide() const;

  // Mutable for detach_wide(), which changes where the elements are, not what they are.
  mutable std::shared_ptr<Block> block_;
  mutable size_t offset_ = 0;  ///< where this storage's elements start in the block
  size_t size_ = 0;
};

}  // namespace quire::runtime

#include "quire/runtime/real_storage.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "quire/runtime/allocation_log.h"

namespace quire::runtime {

namespace {
// Every view is allocated and freed through these two, which report it to
// the allocation log: a release before the memory is freed (allocation_log.h).
template <class T>
std::unique_ptr<T[]> allocate_view(size_t n) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);
  auto view = std::make_unique_for_overwrite<T[]>(n);
  AllocationLog::allocated(view.get(), static_cast<int64_t>(n * sizeof(T)),
                           std::is_same_v<T, double> ? HeldAs::F64 : HeldAs::F32);
  return view;
}

template <class T>
void release_view(std::unique_ptr<T[]>& view) {
  if (!view) return;
  AllocationLog::released(view.get());
  view.reset();
}
}  // namespace

RealStorage::Block::~Block() {
  release_view(wide);
  release_view(narrow);
}

RealStorage RealStorage::for_overwrite(size_t n) {
  RealStorage s;
  s.size_ = n;
  if (n > 0) {
    s.block_ = std::make_shared<Block>();
    s.block_->wide = allocate_view<double>(n);
    s.block_->size = n;
  }
  return s;
}

RealStorage RealStorage::narrow_for_overwrite(size_t n) {
  RealStorage s;
  s.size_ = n;
  if (n > 0) {
    s.block_ = std::make_shared<Block>();
    s.block_->narrow = allocate_view<float>(n);
    s.block_->size = n;
  }
  return s;
}

RealStorage RealStorage::window(const RealStorage& whole, size_t offset, size_t n) {
  if (offset > whole.size_ || n > whole.size_ - offset)
    throw std::out_of_range(
        fmt::format("RealStorage::window: elements [{}, {}) of {}", offset, offset + n, whole.size_));
  RealStorage s;
  s.size_ = n;
  if (n > 0) {
    s.block_ = whole.block_;
    s.offset_ = whole.offset_ + offset;
  }
  return s;
}

const double* RealStorage::wide_view() const {
  Block& b = *block_;
  if (!b.wide) {
    b.wide = allocate_view<double>(b.size);
    std::copy_n(b.narrow.get(), b.size, b.wide.get());  // exact: every f32 is an f64
  }
  return b.wide.get() + offset_;
}

void RealStorage::detach_wide() const {
  auto own = std::make_shared<Block>();
  own->size = size_;
  own->wide = allocate_view<double>(size_);
  std::copy_n(block_->wide.get() + offset_, size_, own->wide.get());
  block_ = std::move(own);
  offset_ = 0;
}

namespace {
/// Whether x is an f32 number (a NaN counts as one).
bool is_f32_number(double x) { return static_cast<double>(static_cast<float>(x)) == x || std::isnan(x); }
}  // namespace

bool RealStorage::holds_f32_numbers() const {
  if (holds_narrow() || size_ == 0) return true;
  const double* d = data();
  return std::all_of(d, d + size_, is_f32_number);
}

const float* RealStorage::narrow_view() const {
  if (!block_->narrow && size_ != block_->size) detach_wide();
  Block& b = *block_;
  if (!b.narrow) {
    auto narrow = allocate_view<float>(b.size);
    const double* wide = b.wide.get();
    for (size_t i = 0; i < b.size; ++i) {
      if (!is_f32_number(wide[i])) {
        release_view(narrow);
        throw std::logic_error(
            fmt::format("internal: a value held in a narrow type is not an f32 number: element {} is {}", i, wide[i]));
      }
      narrow[i] = static_cast<float>(wide[i]);
    }
    b.narrow = std::move(narrow);
  }
  return b.narrow.get() + offset_;
}

template <class Mine, class Other>
Mine* RealStorage::own_view(std::unique_ptr<Mine[]> Block::*mine, std::unique_ptr<Other[]> Block::*other,
                            const Mine* current) {
  if (shared()) {
    // Copy only the view the writer needs, and only this storage's elements.
    auto own = std::make_shared<Block>();
    own.get()->*mine = allocate_view<Mine>(size_);
    own->size = size_;
    std::copy_n(current, size_, (own.get()->*mine).get());
    block_ = std::move(own);
    offset_ = 0;
  } else {
    release_view(block_.get()->*other);  // the writer may change the numbers
  }
  return (block_.get()->*mine).get() + offset_;
}

double* RealStorage::own_wide() { return size_ == 0 ? nullptr : own_view(&Block::wide, &Block::narrow, wide_view()); }

float* RealStorage::narrow_for_writing() {
  return size_ == 0 ? nullptr : own_view(&Block::narrow, &Block::wide, narrow_view());
}

}  // namespace quire::runtime

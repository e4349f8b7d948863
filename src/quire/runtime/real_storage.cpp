#include "quire/runtime/real_storage.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

namespace quire::runtime {

RealStorage RealStorage::for_overwrite(size_t n) {
  RealStorage s;
  s.size_ = n;
  if (n > 0) {
    s.block_ = std::make_shared<Block>();
    s.block_->wide = std::make_unique_for_overwrite<double[]>(n);
  }
  return s;
}

RealStorage RealStorage::narrow_for_overwrite(size_t n) {
  RealStorage s;
  s.size_ = n;
  if (n > 0) {
    s.block_ = std::make_shared<Block>();
    s.block_->narrow = std::make_unique_for_overwrite<float[]>(n);
  }
  return s;
}

const double* RealStorage::wide_view() const {
  Block& b = *block_;
  if (!b.wide) {
    b.wide = std::make_unique_for_overwrite<double[]>(size_);
    std::copy_n(b.narrow.get(), size_, b.wide.get());  // exact: every f32 is an f64
  }
  return b.wide.get();
}

const float* RealStorage::narrow_view() const {
  Block& b = *block_;
  if (!b.narrow) {
    auto narrow = std::make_unique_for_overwrite<float[]>(size_);
    const double* wide = b.wide.get();
    for (size_t i = 0; i < size_; ++i) {
      const float f = static_cast<float>(wide[i]);
      if (static_cast<double>(f) != wide[i] && !std::isnan(wide[i]))
        throw std::logic_error(
            fmt::format("internal: a value held in a narrow type is not an f32 number: element {} is {}", i, wide[i]));
      narrow[i] = f;
    }
    b.narrow = std::move(narrow);
  }
  return b.narrow.get();
}

template <class Mine, class Other>
Mine* RealStorage::own_view(std::unique_ptr<Mine[]> Block::*mine, std::unique_ptr<Other[]> Block::*other,
                            const Mine* current) {
  if (shared()) {
    // Copy only the view the writer needs.
    auto own = std::make_shared<Block>();
    own.get()->*mine = std::make_unique_for_overwrite<Mine[]>(size_);
    std::copy_n(current, size_, (own.get()->*mine).get());
    block_ = std::move(own);
  } else {
    (block_.get()->*other).reset();  // the writer may change the numbers
  }
  return (block_.get()->*mine).get();
}

double* RealStorage::own_wide() { return size_ == 0 ? nullptr : own_view(&Block::wide, &Block::narrow, wide_view()); }

float* RealStorage::narrow_for_writing() {
  return size_ == 0 ? nullptr : own_view(&Block::narrow, &Block::wide, narrow_view());
}

}  // namespace quire::runtime

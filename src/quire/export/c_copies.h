#pragma once
// A copying step of the C export (transpose, slice, concat, merge, the
// cotangents of restructuring, broadcasts): its result as boxes, each copied
// from one operand at fixed strides, the rest of the result zero.
//
// The map is not derived from the operation's attributes by a second copy of
// its meaning: the export runs the reference kernel itself on operands whose
// elements are their own positions (element_sources), and fits boxes to what
// comes out (fit_boxes), every element of a box checked. So the C program
// copies exactly what the reference kernel copies, and a map that no boxes
// fit is refused rather than approximated.

#include <cstdint>
#include <optional>
#include <vector>

#include "quire/runtime/tensor.h"

namespace quire::exports {

/// Where one element of a copy's result comes from: operand `operand`'s
/// element at the flat row-major `index`, or nowhere (-1: zero).
struct ElementSource {
  int operand = -1;
  int64_t index = 0;
};

/// result[dst_at + Σ i_d·dst_strides[d]] = operand[src_at + Σ i_d·src_strides[d]]
/// for every index i of `extents`.
struct CopyBox {
  int operand = 0;
  std::vector<int64_t> extents;
  int64_t dst_at = 0;
  std::vector<int64_t> dst_strides;
  int64_t src_at = 0;
  std::vector<int64_t> src_strides;
};

/// An operand's elements as their own positions: element i of operand k
/// holds k·2^32 + i + 1 (0 stays free for "no operand"), exact in f64 and in
/// int64. Requires fewer than 2^20 operands and 2^32 elements each.
runtime::Tensor position_tensor(int operand, const runtime::Shape& shape, runtime::ElemKind kind);
/// The sources of a result computed from position tensors.
std::vector<ElementSource> element_sources(const runtime::Tensor& result);

/// Boxes that reproduce `sources` over a result of `shape` (row-major),
/// zero boxes left out; nullopt when none fit (a source that is no copy).
std::optional<std::vector<CopyBox>> fit_boxes(const runtime::Shape& shape, const std::vector<ElementSource>& sources);

}  // namespace quire::exports

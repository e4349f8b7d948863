#include "quire/precision/element_maps.h"

#include <fmt/format.h>

#include <stdexcept>

#include "quire/interp/reference_step.h"
#include "quire/interp/value.h"

namespace quire::precision {

using runtime::Shape;
using runtime::Tensor;

namespace {

/// 1 + offset, 2 + offset, … in `shape`: element numbers a kernel can move.
Tensor numbering(const Shape& shape, double offset = 0) {
  Tensor t = Tensor::real_for_overwrite(shape);
  double* out = t.reals.data();
  for (size_t i = 0, n = static_cast<size_t>(t.size()); i < n; ++i) out[i] = offset + static_cast<double>(i) + 1;
  return t;
}

/// Moved numbers read back: element j holds number n (−1: 0, none).
std::vector<int64_t> read_numbering(const Tensor& moved, double offset = 0) {
  std::vector<int64_t> out(static_cast<size_t>(moved.size()));
  for (size_t j = 0; j < out.size(); ++j)
    out[j] = moved.reals[j] == 0 ? -1 : static_cast<int64_t>(moved.reals[j] - offset) - 1;
  return out;
}

}  // namespace

std::vector<int64_t> aligned_elements(const Shape& operand, const runtime::AxisMap& map, const Shape& result) {
  return read_numbering(runtime::broadcast_to(numbering(operand), map, result));
}

std::vector<std::vector<int64_t>> group_by_owner(const std::vector<int64_t>& owner, size_t results) {
  std::vector<std::vector<int64_t>> terms(results);
  for (size_t i = 0; i < owner.size(); ++i)
    if (owner[i] >= 0) terms.at(static_cast<size_t>(owner[i])).push_back(static_cast<int64_t>(i));
  return terms;
}

std::vector<std::vector<int64_t>> reduced_elements(const Shape& operand, const runtime::AxisMap& map,
                                                   const Shape& result) {
  // The result's numbers spread back over the operand (the reduced axes broadcast): each operand
  // element's owner. The kernel folds an element's terms in row-major order of the reduced axes,
  // which is increasing operand offset.
  return group_by_owner(aligned_elements(result, map, operand), static_cast<size_t>(runtime::element_count(result)));
}

std::vector<std::vector<int64_t>> summed_to(const Shape& ct, const runtime::AxisMap& map, const Shape& operand) {
  return group_by_owner(aligned_elements(operand, map, ct), static_cast<size_t>(runtime::element_count(operand)));
}

std::vector<std::vector<int64_t>> gathered_back(const Shape& table, int axis, const Tensor& ids, size_t results) {
  return group_by_owner(read_numbering(runtime::gather(numbering(table), axis, ids)), results);
}

ContractionTerms contraction_terms(const runtime::ContractPlan& plan, const Shape& p, const Shape& q) {
  // The kernel's loop as one tensor: the result axes outside, the contracted pairs inside.
  Shape full;
  runtime::AxisMap p_map, q_map;
  for (const runtime::ResultAxis& ax : plan.result) {
    full.push_back(ax.a_axis >= 0 ? p.at(static_cast<size_t>(ax.a_axis)) : q.at(static_cast<size_t>(ax.b_axis)));
    p_map.push_back(ax.a_axis);
    q_map.push_back(ax.b_axis);
  }
  int64_t results = 1;
  for (int64_t size : full) results *= size;
  for (auto [pa, qb] : plan.contracted) {
    full.push_back(p.at(static_cast<size_t>(pa)));
    p_map.push_back(pa);
    q_map.push_back(qb);
  }
  ContractionTerms out;
  out.p_at = aligned_elements(p, p_map, full);
  out.q_at = aligned_elements(q, q_map, full);
  out.k = results > 0 ? out.p_at.size() / static_cast<size_t>(results) : 0;
  return out;
}

CopiedFrom copied_from(const core::Function& fn, const core::Instr& in, const std::vector<const Tensor*>& operands,
                       const std::map<std::string, int64_t>& dims) {
  // Operand k's elements numbered after the operands before it; a gather's or a pick's ids stay ids. Where
  // two operands are one value, the first (the data; the others give shapes) is the one read.
  auto is_ids = [&](size_t k) {
    return ((in.op == core::Op::Gather || in.op == core::Op::Pick) && k == 1) || (in.op == core::Op::PickGrad && k == 2);
  };
  std::vector<double> first(operands.size(), 0);
  double next = 0;
  for (size_t k = 0; k < operands.size(); ++k) {
    if (is_ids(k)) continue;
    first[k] = next;
    next += static_cast<double>(operands[k]->size());
  }
  std::vector<interp::Value> env(static_cast<size_t>(fn.value_count() + 1));
  for (size_t k = operands.size(); k-- > 0;)
    env.at(static_cast<size_t>(in.args.at(k))) =
        interp::Value::of(is_ids(k) ? *operands[k] : numbering(operands[k]->shape, first[k]));
  const interp::Value moved = interp::evaluate_step(fn, in, env, dims, nullptr);
  const std::vector<int64_t> number = read_numbering(moved.tensor);
  CopiedFrom out;
  out.operand.assign(number.size(), -1);
  out.element.assign(number.size(), -1);
  for (size_t j = 0; j < number.size(); ++j) {
    if (number[j] < 0) continue;
    size_t k = 0;
    for (size_t m = 0; m < operands.size(); ++m)
      if (!is_ids(m) && static_cast<double>(number[j]) >= first[m]) k = m;
    out.operand[j] = static_cast<int>(k);
    out.element[j] = number[j] - static_cast<int64_t>(first[k]);
  }
  return out;
}

}  // namespace quire::precision

// The C twins of what the native backend runs outside its kernels: host
// steps, and launches left to the reference kernels (c_host.h).

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "quire/core/printer.h"
#include "quire/export/c_copies.h"
#include "quire/export/c_host.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/reference_step.h"
#include "quire/realize/realization.h"
#include "quire/runtime/float_types.h"
#include "quire/runtime/scan_order.h"

namespace quire::exports::c_detail {

using core::Op;

void Frame::store_scalar(const core::Instr& in, const std::string& value_text) {
  Leaf l = new_tensor(in.id);
  const std::string round = rounding(in, FloatType::F64, l.type);
  std::string text = alloc_text(l);
  text += fmt::format("  (({}*){})[0] = ({}){};\n", storage_ctype(l.storage), l.expr, storage_ctype(l.storage),
                      round.empty() ? value_text : fmt::format("{}({})", round, value_text));
  add(std::move(text), {});
  bind(in.id, std::move(l));
}

void Frame::host_scalar(const core::Instr& in, double value) {
  CValue v;
  v.kind = Value::Kind::Host;
  v.leaf.kind = Value::Kind::Host;
  v.leaf.expr = c_double(value);
  env[static_cast<size_t>(in.id)] = std::move(v);
}

/// A view of operand 0 under another shape (a reshape: the same elements in the same order).
void Frame::alias(const core::Instr& in) {
  CValue v = arg(in, 0);
  const HostBuffer* b = buffer(in.id);
  if (v.kind != Value::Kind::Tensor || !b) fail(in.id, "internal: a reshape of no tensor");
  if (runtime::element_count(b->shape) != runtime::element_count(v.leaf.shape))
    fail(in.id, "internal: a reshape that changes the element count");
  v.leaf.shape = b->shape;
  stored_as_site(in, v);
  env[static_cast<size_t>(in.id)] = std::move(v);
}

/// A value that a step passes on unchanged, stored at its site: where
/// the site's type is narrower (a parameter's master read as a half),
/// a rounded copy (store_at_site), else the value itself.
void Frame::stored_as_site(const core::Instr& in, CValue& v) {
  if (v.kind != Value::Kind::Tensor || v.leaf.elem != runtime::ElemKind::Real) return;
  const HostBuffer* b = buffer(in.id);
  if (!b || b->type == v.leaf.type) return;
  const std::string round = rounding(in, v.leaf.type, b->type);
  if (round.empty()) return;
  Leaf out = new_tensor(in.id);
  std::string text = alloc_text(out);
  text += fmt::format("  quire_convert({}, {}, {}, {}, {}, {});\n", out.expr, storage_name(out.storage), v.leaf.expr,
                      storage_name(v.leaf.storage), runtime::element_count(out.shape), round);
  CValue from = v;
  add(std::move(text), {&from});
  v.leaf = std::move(out);
}

/// A copying step: the reference kernel run on position tensors, its map fitted with boxes.
void Frame::copies(const core::Instr& in) {
  std::vector<Value> probe(env.size());
  std::vector<const CValue*> read;
  for (size_t k = 0; k < in.args.size(); ++k) {
    const CValue& a = arg(in, k);
    if (a.kind != Value::Kind::Tensor) fail(in.id, "internal: a copy of something that is not a tensor");
    probe.at(static_cast<size_t>(in.args[k])) =
        Value::of(position_tensor(static_cast<int>(k), a.leaf.shape, a.leaf.elem));
    read.push_back(&a);
  }
  Value r = interp::evaluate_step(fn, in, probe, h.dims, nullptr);
  Leaf out = new_tensor(in.id);
  if (r.kind != Value::Kind::Tensor || r.tensor.shape != out.shape)
    fail(in.id, "internal: the copy's shape is not its buffer's");
  const std::optional<std::vector<CopyBox>> boxes = fit_boxes(out.shape, element_sources(r.tensor));
  if (!boxes) fail(in.id, "computes elements that are no copies, which the C export does not write yet");
  std::string text = alloc_text(out);
  for (const CopyBox& c : *boxes) {
    const Leaf& from = tensor(in, static_cast<size_t>(c.operand));
    const std::string round = out.elem == runtime::ElemKind::Real ? rounding(in, from.type, out.type) : "";
    text += fmt::format("  quire_copy_box({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", out.expr,
                        storage_name(out.storage), c.dst_at, c_array(c.dst_strides), from.expr,
                        storage_name(from.storage), c.src_at, c_array(c.src_strides), c_array(c.extents),
                        c.extents.size(), round.empty() ? "NULL" : round);
  }
  add(std::move(text), read);
  bind(in.id, std::move(out));
}

/// A result computed as f64 (or integers) into `natural`, then stored at the site.
void Frame::finish_computed(const core::Instr& in, Leaf out, const std::string& natural_name, int natural_storage,
                            std::string text, const std::vector<const CValue*>& read) {
  const int64_t n = runtime::element_count(out.shape);
  const std::string round =
      out.elem == runtime::ElemKind::Real ? rounding(in, FloatType::F64, out.type) : std::string();
  text += alloc_text(out);
  text += fmt::format("  quire_convert({}, {}, {}, {}, {}, {});\n", out.expr, storage_name(out.storage), natural_name,
                      storage_name(natural_storage), n, round.empty() ? "NULL" : round);
  text += release_named(natural_name);
  add(std::move(text), read);
  bind(in.id, std::move(out));
}

void Frame::draw(const core::Instr& in) {
  const CValue& key = arg(in, 0);
  Leaf out = new_tensor(in.id);
  const int64_t n = runtime::element_count(out.shape);
  const std::string t = fresh_name("t");
  std::string text;
  std::vector<const CValue*> read;
  if (in.op == Op::Bernoulli) {
    const Leaf& p = tensor(in, 1);
    read.push_back(&arg(in, 1));
    text += alloc_named(t, n, kInt);
    text += fmt::format("  quire_draw_bernoulli({0}, {1}, {2}, (double)(({3}*){4})[0]);\n", t, n, key.leaf.expr,
                        storage_ctype(p.storage), p.expr);
    finish_computed(in, std::move(out), t, kInt, std::move(text), read);
    return;
  }
  const core::attr::DrawParams& d = in.attr<core::attr::DrawParams>();
  text += alloc_named(t, n, kDouble);
  text += fmt::format("  quire_draw_{1}({0}, {2}, {3}, {4}, {5});\n", t, in.op == Op::Uniform ? "uniform" : "normal", n,
                      key.leaf.expr, c_double(d.first), c_double(d.second));
  finish_computed(in, std::move(out), t, kDouble, std::move(text), read);
}

void Frame::gather_like(const core::Instr& in) {
  const Leaf& x = tensor(in, 0);
  const Leaf& ids = tensor(in, 1);
  Leaf out = new_tensor(in.id);
  if (ids.storage != kInt || x.storage != out.storage)
    fail(in.id, "internal: a gather whose table and result are held otherwise");
  const int rest = static_cast<int>(x.shape.size() - fn.type_of(in.args[0]).tensor.axes.size());
  const int axis = in.op == Op::Gather ? in.axes.at(0) : rest + in.axes.at(0);
  auto product = [&](size_t from, size_t to) {
    int64_t p = 1;
    for (size_t d = from; d < to; ++d) p *= x.shape.at(d);
    return p;
  };
  const size_t a = static_cast<size_t>(axis);
  std::string text = alloc_text(out);
  if (in.op == Op::Gather)
    text += fmt::format("  quire_gather({}, {}, {}, {}, {}, {}, {}, {});\n", out.expr, x.expr, storage_name(x.storage),
                        product(0, a), x.shape.at(a), product(a + 1, x.shape.size()), ids.expr,
                        runtime::element_count(ids.shape));
  else
    text += fmt::format("  quire_pick({}, {}, {}, {}, {}, {}, {});\n", out.expr, x.expr, storage_name(x.storage),
                        product(0, a), x.shape.at(a), product(a + 1, x.shape.size()), ids.expr);
  add(std::move(text), {&arg(in, 0), &arg(in, 1)});
  bind(in.id, std::move(out));
}

/// Whether every operand and the result of `in` hold integers or booleans.
bool Frame::on_integers(const core::Instr& in) const {
  const HostBuffer* b = buffer(in.id);
  if (!b || b->kind != Value::Kind::Tensor || b->elem == runtime::ElemKind::Real) return false;
  for (size_t k = 0; k < in.args.size(); ++k) {
    const CValue& a = arg(in, k);
    if (a.kind != Value::Kind::Tensor || a.leaf.elem == runtime::ElemKind::Real) return false;
  }
  return true;
}

/// The strides that read operand k along each axis of the result (its alignment, interp::axis_map).
std::vector<int64_t> Frame::aligned_strides(const core::Instr& in, size_t k, const runtime::Shape& result) const {
  const Leaf& l = tensor(in, k);
  const size_t explicit_k = fn.type_of(in.args.at(k)).tensor.axes.size();
  int64_t result_rest = 0;
  for (size_t j = 0; j < in.args.size(); ++j)
    if (in.align.at(j).rest)
      result_rest = std::max<int64_t>(
          result_rest, static_cast<int64_t>(tensor(in, j).shape.size() - fn.type_of(in.args.at(j)).tensor.axes.size()));
  const runtime::AxisMap map =
      interp::axis_map(in.align.at(k), static_cast<int64_t>(l.shape.size()), explicit_k, result_rest);
  if (map.size() != result.size()) fail(in.id, "internal: an alignment of another rank than the result");
  const std::vector<int64_t> own = runtime::contiguous_strides(l.shape);
  std::vector<int64_t> out(result.size(), 0);
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i] >= 0 && l.shape.at(static_cast<size_t>(map[i])) != 1) out[i] = own[static_cast<size_t>(map[i])];
  return out;
}

/// The runtime's integer operation of `op` (quire_runtime.h's QUIRE_INT_…).
const char* Frame::int_op(Op op) {
  static const std::map<Op, const char*> names = {{Op::Add, "QUIRE_INT_ADD"},
                                                  {Op::Sub, "QUIRE_INT_SUB"},
                                                  {Op::Mul, "QUIRE_INT_MUL"},
                                                  {Op::Min, "QUIRE_INT_MIN"},
                                                  {Op::Max, "QUIRE_INT_MAX"},
                                                  {Op::Lt, "QUIRE_INT_LT"},
                                                  {Op::Le, "QUIRE_INT_LE"},
                                                  {Op::Gt, "QUIRE_INT_GT"},
                                                  {Op::Ge, "QUIRE_INT_GE"},
                                                  {Op::Eq, "QUIRE_INT_EQ"},
                                                  {Op::Ne, "QUIRE_INT_NE"},
                                                  {Op::Neg, "QUIRE_INT_NEG"},
                                                  {Op::Abs, "QUIRE_INT_ABS"},
                                                  {Op::Not, "QUIRE_INT_NOT"},
                                                  {Op::Relu, "QUIRE_INT_RELU"},
                                                  {Op::Where, "QUIRE_INT_WHERE"},
                                                  {Op::Sum, "QUIRE_INT_SUM"},
                                                  {Op::ReduceMax, "QUIRE_INT_REDUCE_MAX"},
                                                  {Op::ReduceMin, "QUIRE_INT_REDUCE_MIN"}};
  return names.at(op);
}

/// An element-wise step on integers (exact, as runtime::binary's integer path).
void Frame::int_elementwise(const core::Instr& in) {
  Leaf out = new_tensor(in.id);
  std::vector<std::string> operands;
  std::vector<const CValue*> read;
  for (size_t k = 0; k < 3; ++k) {
    if (k >= in.args.size()) {
      operands.push_back("NULL, NULL");
      continue;
    }
    // A one-operand step reads its operand as it is (its alignment is the identity).
    const std::vector<int64_t> strides =
        in.args.size() == 1 ? runtime::contiguous_strides(out.shape) : aligned_strides(in, k, out.shape);
    operands.push_back(fmt::format("{}, {}", tensor(in, k).expr, c_array(strides)));
    read.push_back(&arg(in, k));
  }
  std::string text = alloc_text(out);
  text += fmt::format("  quire_int_elementwise({}, {}, {}, {}, {}, {}, {}, {});\n", int_op(in.op), out.expr,
                      c_array(out.shape), out.shape.size(), out.elem == runtime::ElemKind::I32 ? 1 : 0, operands[0],
                      operands[1], operands[2]);
  add(std::move(text), read);
  bind(in.id, std::move(out));
}

/// An element-wise step with a real operand or a real result, as
/// runtime::unary, binary and where compute it: each element in f64 by
/// the prelude's twin of apply_unary / apply_binary (quire_add, …), then
/// stored at the site's type.
void Frame::real_elementwise(const core::Instr& in) {
  Leaf out = new_tensor(in.id);
  const size_t rank = out.shape.size();
  std::vector<const CValue*> read;
  std::vector<std::string> loads;
  for (size_t k = 0; k < in.args.size(); ++k) {
    const Leaf& a = tensor(in, k);
    const std::vector<int64_t> strides =
        in.args.size() == 1 ? runtime::contiguous_strides(out.shape) : aligned_strides(in, k, out.shape);
    std::string at = "0";
    for (size_t d = 0; d < rank; ++d)
      if (strides[d] != 0) at += fmt::format(" + i{} * {}", d, strides[d]);
    loads.push_back(fmt::format("(double)((const {}*){})[{}]", storage_ctype(a.storage), a.expr, at));
    read.push_back(&arg(in, k));
  }
  std::string value;
  if (in.op == Op::Where) {
    value = "x0 != 0.0 ? x1 : x2";
  } else if (in.op == Op::PowConst) {
    const double e = in.attr<core::attr::Exponent>().value;
    value = e == 2.0 ? "x0 * x0" : fmt::format("quire_pow(x0, {})", c_double(e));
  } else if (in.op == Op::Pow) {
    value = tensor(in, 1).shape.empty() ? "x1 == 2.0 ? x0 * x0 : quire_pow(x0, x1)" : "quire_pow(x0, x1)";
  } else if (in.args.size() == 1) {
    value = fmt::format("quire_{}(x0)", runtime::op_name(interp::unary_op(in.op)));
  } else {
    value = fmt::format("quire_{}(x0, x1)", runtime::op_name(interp::binary_op(in.op)));
  }
  const std::string round = out.elem == runtime::ElemKind::Real ? rounding(in, FloatType::F64, out.type) : "";
  std::string text = alloc_text(out);
  text += "  {\n    int64_t e = 0;\n";
  for (size_t d = 0; d < rank; ++d)
    text += fmt::format("    for (int64_t i{0} = 0; i{0} < {1}; ++i{0})\n", d, out.shape[d]);
  text += "    {\n";
  for (size_t k = 0; k < loads.size(); ++k) text += fmt::format("      const double x{} = {};\n", k, loads[k]);
  text += fmt::format("      const double r = {};\n", value);
  text += fmt::format("      (({0}*){1})[e++] = ({0})({2});\n", storage_ctype(out.storage), out.expr,
                      round.empty() ? "r" : round + "(r)");
  text += "    }\n  }\n";
  add(std::move(text), read);
  bind(in.id, std::move(out));
}

/// The cotangent of a gather or a pick: ct's elements added (a gather's,
/// in ct's order, each sum rounded to the site's accumulator) or placed
/// where the forward read them, into +0.0, then stored at the site.
void Frame::gather_adjoint(const core::Instr& in) {
  const Leaf& ct = tensor(in, 0);
  const Leaf& x = tensor(in, 1);
  const Leaf& ids = tensor(in, 2);
  const int rest = static_cast<int>(x.shape.size() - fn.type_of(in.args[1]).tensor.axes.size());
  const int axis = in.op == Op::GatherGrad ? in.axes.at(0) : rest + in.axes.at(0);
  const size_t a = static_cast<size_t>(axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < a; ++d) outer *= x.shape.at(d);
  for (size_t d = a + 1; d < x.shape.size(); ++d) inner *= x.shape.at(d);
  Leaf out = new_tensor(in.id);
  const std::string t = fresh_name("t");
  std::string text = alloc_named(t, runtime::element_count(x.shape), kDouble);
  if (in.op == Op::GatherGrad) {
    const precision::SiteType* site = h.table && h.table->values.at(static_cast<size_t>(in.id))
                                          ? &*h.table->values[static_cast<size_t>(in.id)]
                                          : nullptr;
    const FloatType acc = site ? site->accumulator : FloatType::F64;
    text += fmt::format("  quire_gather_adjoint({}, {}, {}, {}, {}, {}, {}, {}, {});\n", t, ct.expr,
                        storage_name(ct.storage), outer, x.shape.at(a), inner, ids.expr,
                        runtime::element_count(ids.shape), acc == FloatType::F64 ? "NULL" : w.rounding_function({acc}));
  } else {
    text += fmt::format("  quire_pick_adjoint({}, {}, {}, {}, {}, {}, {});\n", t, ct.expr, storage_name(ct.storage),
                        outer, x.shape.at(a), inner, ids.expr);
  }
  finish_computed(in, std::move(out), t, kDouble, std::move(text), {&arg(in, 0), &arg(in, 2)});
}

void Frame::scan(const core::Instr& in) {
  const Leaf& first = tensor(in, 0);
  const Leaf& second = tensor(in, 1);
  // x (a scan's operand 1) and h (scan_grad_a's) carry t and n after the `...`.
  const int rest = static_cast<int>(second.shape.size() - fn.type_of(in.args[1]).tensor.axes.size());
  const runtime::ScanAxes axes = interp::scan_axes(in, rest);
  const bool adjoint = in.attr<core::attr::ScanOf>().adjoint;
  Leaf out = new_tensor(in.id);
  const std::string t = fresh_name("t");
  std::string text = alloc_named(t, runtime::element_count(out.shape), kDouble);
  if (in.op == Op::Scan) {
    const precision::SiteType* site = h.table && h.table->values.at(static_cast<size_t>(in.id))
                                          ? &*h.table->values[static_cast<size_t>(in.id)]
                                          : nullptr;
    const FloatType acc = site ? site->accumulator : FloatType::F64;
    const runtime::ScanGeometry g = runtime::scan_geometry(second.shape, axes);
    if (g.batch.size() > 8) fail(in.id, "a scan with more than 8 batch axes: quire_scan walks at most 8");
    text += fmt::format("  quire_scan({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", t,
                        first.expr, storage_name(first.storage), second.expr, storage_name(second.storage),
                        c_array(g.batch), c_array(g.batch_x), c_array(g.batch_a), g.batch.size(), g.steps, g.states,
                        g.ts, g.ns, g.ats, g.ans, g.am, adjoint ? 1 : 0,
                        acc == FloatType::F64 ? "NULL" : w.rounding_function({acc}));
  } else {
    const runtime::ScanGradGeometry g = runtime::scan_grad_geometry(second.shape, axes);
    if (g.a.size() > 9) fail(in.id, "a scan's a of more than 9 axes: quire_scan_grad_a walks at most 9");
    text += fmt::format("  quire_scan_grad_a({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", t,
                        first.expr, storage_name(first.storage), second.expr, storage_name(second.storage),
                        c_array(g.a), g.a.size(), c_array(g.to_x), g.t_in_a, g.n_in_a, g.m, g.ts, g.ns,
                        adjoint ? 1 : 0);
  }
  finish_computed(in, std::move(out), t, kDouble, std::move(text), {&arg(in, 0), &arg(in, 1)});
}

/// A tree shaped as operand 0, each leaf the sum of the parts whose paths
/// name it, in order, from the first (the reference's `params`), +0.0 where
/// none names it, held in f64.
void Frame::make_params(const core::Instr& in) {
  const CValue& tree = arg(in, 0);
  std::vector<std::pair<std::string, const Leaf*>> parts;
  std::vector<const CValue*> read;
  for (size_t k = 1; k < in.args.size(); ++k) {
    const std::string& path = in.paths.at(k - 1);
    const CValue& part = arg(in, k);
    read.push_back(&part);
    if (part.kind == Value::Kind::Params)
      for (const auto& [p, l] : part.params) parts.emplace_back(path + p, &l);
    else
      parts.emplace_back(path, &part.leaf);
  }
  CValue v;
  v.kind = Value::Kind::Params;
  std::string text;
  for (const auto& [path, l] : tree.params) {
    Leaf out = l;
    out.storage = kDouble;
    out.type = FloatType::F64;
    out.elem = runtime::ElemKind::Real;
    out.slot = -1;
    out.expr = fresh_name("g");
    out.owner = allocate(out.expr);
    text += alloc_text(out);
    bool first = true;
    for (const auto& [p, part] : parts) {
      if (p != path) continue;
      if (part->shape != l.shape) fail(in.id, fmt::format("internal: a part of `{}` of another shape", path));
      text += fmt::format("  quire_accumulate({}, {}, {}, {}, {});\n", out.expr, part->expr,
                          storage_name(part->storage), runtime::element_count(l.shape), first ? 1 : 0);
      first = false;
    }
    v.params.emplace(path, std::move(out));
  }
  for (const auto& [p, part] : parts)
    if (!tree.params.count(p)) fail(in.id, fmt::format("internal: a part for `{}`, which the tree lacks", p));
  add(std::move(text), read);
  env[static_cast<size_t>(in.id)] = std::move(v);
}

/// A reduction of integers over the axes interp::reduced_axes names.
void Frame::int_reduce(const core::Instr& in) {
  const Leaf& x = tensor(in, 0);
  Leaf out = new_tensor(in.id);
  const int rank = static_cast<int>(x.shape.size());
  const int rest = rank - static_cast<int>(fn.type_of(in.args.at(0)).tensor.axes.size());
  const std::vector<int> axes = interp::reduced_axes(rank, rest, in.all_axes, in.axes);
  const std::vector<int64_t> strides = runtime::contiguous_strides(x.shape);
  std::vector<int64_t> kept, kept_strides, reduced, reduced_strides;
  for (int d = 0; d < rank; ++d) {
    const bool gone = std::find(axes.begin(), axes.end(), d) != axes.end();
    (gone ? reduced : kept).push_back(x.shape[static_cast<size_t>(d)]);
    (gone ? reduced_strides : kept_strides).push_back(strides[static_cast<size_t>(d)]);
  }
  if (runtime::element_count(kept) != runtime::element_count(out.shape))
    fail(in.id, "internal: a reduction whose result is not its kept axes");
  std::string text = alloc_text(out);
  text += fmt::format("  quire_int_reduce({}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", int_op(in.op), out.expr, x.expr,
                      c_array(kept), c_array(kept_strides), kept.size(), c_array(reduced), c_array(reduced_strides),
                      reduced.size(), out.elem == runtime::ElemKind::I32 ? 1 : 0);
  add(std::move(text), {&arg(in, 0)});
  bind(in.id, std::move(out));
}

void Frame::step(const core::Instr& in, const std::string& why) {
  check_read_down(in);
  auto no_twin = [&]() {
    fail(in.id, fmt::format("{} runs on the reference kernels{}, and the C export has no twin of it yet",
                            core::op_info(in.op).spelling, why.empty() ? "" : fmt::format(" ({})", why)));
  };
  switch (in.op) {
    case Op::Const:
      store_scalar(in, c_double(in.attr<core::attr::Literal>().value));
      return;
    case Op::HostConst:
      host_scalar(in, in.attr<core::attr::Literal>().value);
      return;
    case Op::ConstInt:
      host_scalar(in, static_cast<double>(in.attr<core::attr::Integer>().value));
      return;
    case Op::ConstBool:
      host_scalar(in, in.attr<core::attr::Boolean>().value ? 1.0 : 0.0);
      return;
    case Op::Real: {
      const CValue& a = arg(in, 0);
      if (a.kind != Value::Kind::Host) fail(in.id, "internal: `real` of no host scalar");
      store_scalar(in, a.leaf.expr);
      return;
    }
    case Op::Field: {
      const CValue& tree = arg(in, 0);
      const std::string& name = in.attr<core::attr::Member>().name;
      CValue v;
      if (in.type.kind == elab::TypeKind::Tensor) {
        auto it = tree.params.find(name);
        if (it == tree.params.end()) fail(in.id, fmt::format("parameter `{}` is missing", name));
        v.leaf = it->second;
        stored_as_site(in, v);
      } else {
        v.kind = Value::Kind::Params;
        for (const auto& [path, l] : tree.params)
          if (path.size() > name.size() && path.compare(0, name.size(), name) == 0 && path[name.size()] == '.')
            v.params.emplace(path.substr(name.size() + 1), l);
      }
      env[static_cast<size_t>(in.id)] = std::move(v);
      return;
    }
    case Op::TupleGet: {
      const CValue& t = arg(in, 0);
      const size_t i = static_cast<size_t>(in.attr<core::attr::Element>().index);
      if (t.kind != Value::Kind::Tuple || i >= t.elements.size()) fail(in.id, "internal: no such element");
      env[static_cast<size_t>(in.id)] = t.elements[i];
      return;
    }
    case Op::MakeTuple: {
      CValue v;
      v.kind = Value::Kind::Tuple;
      for (size_t k = 0; k < in.args.size(); ++k) v.elements.push_back(arg(in, k));
      env[static_cast<size_t>(in.id)] = std::move(v);
      return;
    }
    case Op::KeySplit: {
      const CValue& k = arg(in, 0);
      CValue v;
      v.kind = Value::Kind::Tuple;
      std::string text;
      for (int second = 0; second < 2; ++second) {
        CValue part;
        part.kind = Value::Kind::Key;
        part.leaf.kind = Value::Kind::Key;
        part.leaf.expr = fresh_name("key");
        text += fmt::format("  const quire_key {} = quire_split_key({}, {});\n", part.leaf.expr, k.leaf.expr, second);
        v.elements.push_back(std::move(part));
      }
      add(std::move(text), {});
      env[static_cast<size_t>(in.id)] = std::move(v);
      return;
    }
    case Op::SplitAxis:
    case Op::ReshapeAs:
      alias(in);
      return;
    case Op::MergeAxes:
    case Op::Transpose:
    case Op::Concat:
    case Op::Slice:
    case Op::MergeGrad:
    case Op::ConcatGrad:
    case Op::SliceGrad:
      copies(in);
      return;
    case Op::Expand:
      if (in.attr<core::attr::ExpandOf>().mean) no_twin();
      copies(in);
      return;
    case Op::ZerosLike: {
      Leaf out = new_tensor(in.id);
      add(alloc_text(out), {});
      bind(in.id, std::move(out));
      return;
    }
    case Op::Gather:
    case Op::Pick:
      gather_like(in);
      return;
    case Op::OneHot: {
      const Leaf& ids = tensor(in, 0);
      Leaf out = new_tensor(in.id);
      const int64_t classes = out.shape.empty() ? 0 : out.shape.back();
      const std::string t = fresh_name("t");
      std::string text = alloc_named(t, runtime::element_count(out.shape), kDouble);
      text +=
          fmt::format("  quire_one_hot({}, {}, {}, {});\n", t, ids.expr, runtime::element_count(ids.shape), classes);
      finish_computed(in, std::move(out), t, kDouble, std::move(text), {&arg(in, 0)});
      return;
    }
    case Op::Iota: {
      Leaf out = new_tensor(in.id);
      std::string text = alloc_text(out);
      text += fmt::format("  quire_iota({}, {});\n", out.expr, runtime::element_count(out.shape));
      add(std::move(text), {});
      bind(in.id, std::move(out));
      return;
    }
    case Op::Uniform:
    case Op::Normal:
    case Op::Bernoulli:
      draw(in);
      return;
    case Op::Call:
    case Op::Fold:
    case Op::FoldVjp:
      fail(in.id, "internal: a call outside a call step");
    case Op::MakeParams:
      make_params(in);
      return;
    case Op::PickGrad:
    case Op::GatherGrad:
      gather_adjoint(in);
      return;
    case Op::Scan:
    case Op::ScanGradA:
      scan(in);
      return;
    case Op::Neg:
    case Op::Abs:
    case Op::Not:
    case Op::Relu:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Min:
    case Op::Max:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Eq:
    case Op::Ne:
    case Op::Where:
      if (on_integers(in))
        int_elementwise(in);
      else
        real_elementwise(in);
      return;
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Tanh:
    case Op::Erf:
    case Op::Sigmoid:
    case Op::Gelu:
    case Op::GeluTanh:
    case Op::Silu:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Softplus:
    case Op::Div:
    case Op::Pow:
    case Op::PowConst:
      real_elementwise(in);
      return;
    case Op::Sum:
    case Op::ReduceMax:
    case Op::ReduceMin:
      if (!on_integers(in)) no_twin();
      int_reduce(in);
      return;
    case Op::Cast:
    case Op::Mean:
    case Op::LogSumExp:
    case Op::Dot:
    case Op::Contract:
    case Op::SumTo:
    case Op::ContractGradA:
    case Op::ContractGradB:
#ifdef QUIRE_TEST_EXTRA_OP
    case Op::TestExtraOp:
#endif
      no_twin();
  }
  no_twin();
}

}  // namespace quire::exports::c_detail

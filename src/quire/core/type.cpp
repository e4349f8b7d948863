#include "quire/core/type.h"

#include <fmt/format.h>

namespace quire::elab {

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::Real: return "ℝ";
    case Elem::I32: return "i32";
    case Elem::I64: return "i64";
    case Elem::Bool: return "bool";
  }
  return "?";
}

const char* scalar_name(ScalarKind k) {
  switch (k) {
    case ScalarKind::Nat: return "nat";
    case ScalarKind::Int: return "int";
    case ScalarKind::F64: return "f64";
    case ScalarKind::Bool: return "bool";
  }
  return "?";
}

int TensorType::find(const std::string& name) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == name) return static_cast<int>(i);
  return -1;
}

Type Type::make_tensor(TensorType t) {
  Type r;
  r.kind = TypeKind::Tensor;
  r.tensor = std::move(t);
  return r;
}
Type Type::real_scalar() { return make_tensor({}); }
Type Type::make_scalar(ScalarKind k) {
  Type r;
  r.kind = TypeKind::Scalar;
  r.scalar = k;
  return r;
}
Type Type::make_key() {
  Type r;
  r.kind = TypeKind::Key;
  return r;
}
Type Type::make_tuple(std::vector<Type> elements) {
  Type r;
  r.kind = TypeKind::Tuple;
  r.elements = std::move(elements);
  return r;
}
Type Type::make_params(ParamsType p) {
  Type r;
  r.kind = TypeKind::Params;
  r.params = std::move(p);
  return r;
}

std::string TypePrinter::tensor(const TensorType& t) const {
  std::vector<std::string> parts;
  if (t.rest) parts.push_back("...");
  for (const Axis& a : t.axes) parts.push_back(a.name.empty() ? a.size.str() : fmt::format("{}: {}", a.name, a.size.str()));
  return fmt::format("{}[{}]", elem_name(t.elem), fmt::join(parts, ", "));
}

std::string TypePrinter::params(const ParamsType& p) const {
  std::string name = p.module >= 0 && p.module < static_cast<int>(module_names.size()) ? module_names[p.module] : "?";
  if (!p.dims.empty()) {
    std::vector<std::string> dims;
    for (const Size& s : p.dims) dims.push_back(s.str());
    name += fmt::format("{{{}}}", fmt::join(dims, ", "));
  }
  for (auto it = p.stack.rbegin(); it != p.stack.rend(); ++it) name = fmt::format("stack{{{}}}({})", it->str(), name);
  return name;
}

std::string TypePrinter::operator()(const Type& t) const {
  switch (t.kind) {
    case TypeKind::Tensor: return tensor(t.tensor);
    case TypeKind::Scalar: return scalar_name(t.scalar);
    case TypeKind::Key: return "key";
    case TypeKind::Params: return "params " + params(t.params);
    case TypeKind::Tuple: {
      std::vector<std::string> parts;
      for (const Type& e : t.elements) parts.push_back((*this)(e));
      return fmt::format("({})", fmt::join(parts, ", "));
    }
  }
  return "?";
}

namespace {

std::string describe_axis(const Axis& a, size_t index) {
  if (a.name.empty()) return fmt::format("positional axis {} (size {})", index, a.size.str());
  return fmt::format("axis `{}` (size {})", a.name, a.size.str());
}

bool is_one(const Size& s) { return s.constant_value() == std::optional<int64_t>(1); }

// Pairs the operand's axes with the frame's: by name, then the rest from the
// right. Returns false with `error` set when two axes cannot line up.
bool pair_with_frame(const TensorType& frame, const TensorType& op, std::vector<int>& map, std::string& error) {
  map.assign(frame.axes.size(), -1);
  std::vector<bool> op_used(op.axes.size(), false);
  for (size_t k = 0; k < op.axes.size(); ++k) {
    if (op.axes[k].name.empty()) continue;
    int j = frame.find(op.axes[k].name);
    if (j >= 0) {
      map[j] = static_cast<int>(k);
      op_used[k] = true;
    }
  }
  std::vector<size_t> frame_free, op_free;
  for (size_t j = 0; j < frame.axes.size(); ++j)
    if (map[j] < 0) frame_free.push_back(j);
  for (size_t k = 0; k < op.axes.size(); ++k)
    if (!op_used[k]) op_free.push_back(k);
  if (op_free.size() > frame_free.size()) {
    // Only possible when the operand's named axes are missing from the frame.
    size_t k = op_free[op_free.size() - frame_free.size() - 1];
    error = fmt::format("{} has nothing to align with", describe_axis(op.axes[k], k));
    return false;
  }
  for (size_t i = 0; i < op_free.size(); ++i) {
    size_t j = frame_free[frame_free.size() - 1 - i];
    size_t k = op_free[op_free.size() - 1 - i];
    const Axis& fa = frame.axes[j];
    const Axis& oa = op.axes[k];
    if (!fa.name.empty() && !oa.name.empty() && fa.name != oa.name) {
      error = fmt::format("{} cannot align with {}", describe_axis(fa, j), describe_axis(oa, k));
      return false;
    }
    map[j] = static_cast<int>(k);
  }
  return true;
}

}  // namespace

std::optional<Alignment> align(const std::vector<const TensorType*>& operands, std::string& error) {
  size_t frame_index = 0;
  for (size_t i = 1; i < operands.size(); ++i)
    if (operands[i]->axes.size() > operands[frame_index]->axes.size()) frame_index = i;
  const TensorType& frame = *operands[frame_index];
  Alignment out;
  out.result = frame;
  out.result.elem = operands[0]->elem;
  for (const TensorType* op : operands) out.result.rest = out.result.rest || op->rest;
  out.operands.resize(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    OperandAlignment& oa = out.operands[i];
    oa.rest = operands[i]->rest;
    if (!pair_with_frame(frame, *operands[i], oa.map, error)) return std::nullopt;
    for (size_t j = 0; j < frame.axes.size(); ++j) {
      if (oa.map[j] < 0) continue;
      const Axis& src = operands[i]->axes[oa.map[j]];
      Axis& dst = out.result.axes[j];
      const Axis so_far = dst;  // as the earlier operands left it (a stretched 1 already widened)
      if (!dst.name.empty() && !src.name.empty() && dst.name != src.name) {
        // A positional axis of the frame that an earlier operand named.
        error = fmt::format("{} cannot align with {}", describe_axis(so_far, j), describe_axis(src, oa.map[j]));
        return std::nullopt;
      }
      if (dst.name.empty()) dst.name = src.name;
      if (src.size == dst.size || is_one(src.size)) continue;
      if (is_one(dst.size)) {
        dst.size = src.size;
        continue;
      }
      error = fmt::format("{} does not match {}", describe_axis(src, oa.map[j]), describe_axis(so_far, j));
      return std::nullopt;
    }
  }
  // Two operands may name two positional axes of the frame alike.
  for (size_t j = 0; j < out.result.axes.size(); ++j)
    for (size_t k = j + 1; k < out.result.axes.size(); ++k)
      if (!out.result.axes[j].name.empty() && out.result.axes[j].name == out.result.axes[k].name) {
        error = fmt::format("the operands name positional axes {} and {} both `{}`", j, k, out.result.axes[j].name);
        return std::nullopt;
      }
  return out;
}

}  // namespace quire::elab

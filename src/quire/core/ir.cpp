#include "quire/core/ir.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace quire::core {

const char* regularity_name(Regularity r) {
  switch (r) {
    case Regularity::Smooth: return "C∞";
    case Regularity::Continuous: return "C⁰";
    case Regularity::Discontinuous: return "discontinuous";
  }
  return "?";
}

const char* numerics_name(Numerics n) {
  switch (n) {
    case Numerics::Default: return "";
    case Numerics::High: return "numerics(high)";
    case Numerics::RegionBf16: return "precision(bf16)";
    case Numerics::RegionF16: return "precision(f16)";
  }
  return "";
}

namespace {

constexpr OpInfo make_info(const char* name, const char* spelling, int arity, Regularity regularity, uint16_t flags,
                           size_t attrs) {
  const auto has = [flags](uint16_t flag) { return (flags & flag) != 0; };
  return {name,
          spelling,
          arity,
          regularity,
          has(op_flag::Elementwise),
          has(op_flag::Reduction),
          has(op_flag::Product),
          has(op_flag::Copies),
          has(op_flag::StoredDirectly),
          has(op_flag::Selects),
          has(op_flag::Compares),
          has(op_flag::Draws),
          has(op_flag::Calls),
          attrs};
}

}  // namespace

const OpInfo& op_info(Op op) {
  using namespace op_flag;
  static constexpr OpInfo table[] = {
#define QUIRE_OP(E, N, S, A, REG, FLAGS, ATTRS) make_info(N, S, A, Regularity::REG, FLAGS, attr_index<attr::ATTRS>()),
#include "quire/core/ops.def"
#undef QUIRE_OP
  };
  return table[static_cast<size_t>(op)];
}

std::optional<Op> op_by_name(std::string_view name) {
  static constexpr Op kOps[] = {
#define QUIRE_OP(E, N, S, A, REG, FLAGS, ATTRS) Op::E,
#include "quire/core/ops.def"
#undef QUIRE_OP
  };
  for (Op op : kOps)
    if (name == op_info(op).name) return op;
  return std::nullopt;
}

void Instr::wrong_family(size_t asked) const {
  throw std::logic_error(fmt::format("internal: {} at %{} carries {} attributes, not {}", op_info(op).name, id,
                                     attr_family_name(attrs.index()), attr_family_name(asked)));
}

namespace {

template <size_t... I>
Attrs family_defaults(size_t family, std::index_sequence<I...>) {
  Attrs out;
  ((family == I ? (void)(out = std::variant_alternative_t<I, Attrs>{}) : void()), ...);
  return out;
}

}  // namespace

Attrs default_attrs(Op op) {
  return family_defaults(op_info(op).attrs, std::make_index_sequence<std::variant_size_v<Attrs>>{});
}

attr::ProductOut::Out requested_out(const Instr& in) {
  return in.op == Op::Dot ? in.attr<attr::ProductOut>().out : attr::ProductOut::Out::Policy;
}

const elab::Type& Function::type_of(int id) const {
  if (id >= 1 && id <= static_cast<int>(args.size())) return args[id - 1].type;
  size_t k = static_cast<size_t>(id) - args.size() - 1;
  if (k < body.size()) return body[k].type;
  throw std::logic_error("Core invariant: value %" + std::to_string(id) + " is not defined in " + name);
}

std::string Function::value_name(int id) const {
  if (id >= 1 && id <= static_cast<int>(args.size())) return args[id - 1].name;
  size_t k = static_cast<size_t>(id) - args.size() - 1;
  if (k < body.size() && !body[k].name.empty()) return body[k].name;
  return fmt::format("%{}", id);
}

}  // namespace quire::core

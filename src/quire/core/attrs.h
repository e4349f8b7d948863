#pragma once
// What an instruction carries besides its operands: one struct per family of
// operations. ops.def's last column names each operation's family, and an
// Instr holds exactly that one (core::verify checks it; Instr::set and
// Instr::attr refuse any other), so a slice's bounds can never be read as a
// tuple index, nor a cast's target as a product's accumulator.
//
// The other attributes (axes, alignments, callee, sizes, pairs, paths) are
// shared by several families and stay fields of Instr (ir.h).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace quire::core {

/// The type a cast converts to, as written after `as` (`real` is spelled ℝ).
enum class CastTarget : uint8_t { Real, F64, F32, Bf16, F16, F32Acc, I32, I64, Bool };
/// "ℝ", "f64", "f32", "bf16", "f16", "f32acc", "i32", "i64", "bool"
const char* cast_target_name(CastTarget t);
/// The target written `name` (`real` and `ℝ` both name Real), if any.
std::optional<CastTarget> parse_cast_target(std::string_view name);

namespace attr {

struct None {};
/// Const, HostConst: the literal.
struct Literal {
  double value = 0;
};
/// ConstInt: the integer.
struct Integer {
  int64_t value = 0;
};
/// ConstBool: the boolean.
struct Boolean {
  bool value = false;
};
/// Field: the member of the parameter tree read.
struct Member {
  std::string name;
};
/// TupleGet: the element read; ConcatGrad: the part whose slice it takes.
struct Element {
  int index = 0;
};
/// PowConst: the literal exponent.
struct Exponent {
  double value = 0;
};
/// Cast: the target type.
struct CastTo {
  CastTarget target = CastTarget::Real;
};
/// Dot: `out = f32|f64`, the accumulator written in the program, if any (the
/// realization otherwise follows the precision policy).
struct ProductOut {
  enum class Out : uint8_t { Policy, F32, F64 } out = Out::Policy;
};
/// Slice, SliceGrad: the kept positions start, start + step, … below stop.
struct Range {
  int64_t start = 0, stop = 0, step = 1;
};
/// Uniform: [low, high); Normal: (mean, std).
struct DrawParams {
  double first = 0, second = 0;
};
/// Expand: the cotangent of a sum (false) or of a mean (true: divided by the count).
struct ExpandOf {
  bool mean = false;
};
/// ContractGradA, ContractGradB: the cotangent of a dot (true) or of a contract.
struct ProductForm {
  bool dot = false;
};
/// Scan, ScanGradA: the recurrence forward (h[t] from h[t − 1], first t = 0)
/// or its adjoint (h[t] from h[t + 1] through a[t + 1] transposed, first the
/// last t: the cotangent of x in a forward scan, and the other way round).
struct ScanOf {
  bool adjoint = false;
};
/// FoldVjp: the function that is the copy's vjp.
struct VjpOf {
  int function = -1;
};

}  // namespace attr

using Attrs = std::variant<attr::None, attr::Literal, attr::Integer, attr::Boolean, attr::Member, attr::Element,
                           attr::Exponent, attr::CastTo, attr::ProductOut, attr::Range, attr::DrawParams,
                           attr::ExpandOf, attr::ProductForm, attr::ScanOf, attr::VjpOf>;

/// The position of family A in Attrs.
template <class A, size_t I = 0>
constexpr size_t attr_index() {
  static_assert(I < std::variant_size_v<Attrs>, "not an attribute family of Attrs");
  if constexpr (std::is_same_v<A, std::variant_alternative_t<I, Attrs>>)
    return I;
  else
    return attr_index<A, I + 1>();
}

/// The family's name as ops.def writes it ("Range").
const char* attr_family_name(size_t index);

}  // namespace quire::core

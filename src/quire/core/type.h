#pragma once
// The types of quire values after elaboration: tensors with named or
// positional axes (and an optional `...` of leading axes), tuples, parameter
// trees of module instances, host scalars and random keys.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/size.h"

namespace quire::elab {

/// The most elements a tensor type may have; the elaborator refuses a larger
/// one (E0404), and what is read back (envelopes) is held to it too.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

/// Element types of tensors. `Real` is the abstract ℝ: its storage type is the
/// realization's choice (f64 in the reference interpreter).
enum class Elem : uint8_t { Real, I32, I64, Bool };
const char* elem_name(Elem e);  // "ℝ", "i32", "i64", "bool"

/// One axis: a name (empty for a positional axis) and a size.
struct Axis {
  std::string name;
  Size size;
  bool operator==(const Axis&) const = default;
};

/// elem[..., axes]. `rest` is the `...` of leading axes: within one function
/// every `...` is the same unknown list, bound by the caller.
struct TensorType {
  Elem elem = Elem::Real;
  bool rest = false;
  std::vector<Axis> axes;
  bool operator==(const TensorType&) const = default;

  /// Index of the explicit axis with this name, or -1.
  int find(const std::string& name) const;
  bool is_scalar() const { return !rest && axes.empty(); }
};

enum class ScalarKind : uint8_t { Nat, Int, F64, Bool };
const char* scalar_name(ScalarKind k);

enum class TypeKind : uint8_t { Tensor, Tuple, Params, Scalar, Key };

/// The parameter tree of one module instance: `params Linear{4, 4}`, and with
/// `stack` counts (outermost first) `params stack{3}(Block)`.
struct ParamsType {
  int module = -1;             ///< index into Program::modules
  std::vector<Size> dims;      ///< the module's dimension arguments
  std::vector<Size> stack;     ///< stack counts, outermost first; empty if not stacked
  bool operator==(const ParamsType&) const = default;
};

struct Type {
  TypeKind kind = TypeKind::Tensor;
  TensorType tensor;
  std::vector<Type> elements;  ///< Tuple
  ParamsType params;
  ScalarKind scalar = ScalarKind::F64;

  static Type make_tensor(TensorType t);
  static Type real_scalar();
  static Type make_scalar(ScalarKind k);
  static Type make_key();
  static Type make_tuple(std::vector<Type> elements);
  static Type make_params(ParamsType p);

  bool operator==(const Type&) const = default;
  bool is_tensor() const { return kind == TypeKind::Tensor; }
};

/// Prints types as the language writes them; module names come from a callback
/// so that this header does not depend on the program.
struct TypePrinter {
  std::vector<std::string> module_names;  ///< index → "Linear"
  std::string operator()(const Type& t) const;
  std::string tensor(const TensorType& t) const;
  std::string params(const ParamsType& p) const;
};

/// How one operand of an element-wise operation lines up with the result:
/// `map[j]` is the operand's explicit axis feeding the result's explicit axis j
/// (or -1: broadcast); the operand's `...`, if it has one, lines up with the
/// result's `...` from the right.
struct OperandAlignment {
  std::vector<int> map;
  bool rest = false;
};

/// The result of aligning the operands of an element-wise operation.
struct Alignment {
  TensorType result;
  std::vector<OperandAlignment> operands;
};

/// Broadcasting: named axes align by name; the remaining axes align from the
/// right; an axis of size 1 stretches; `...` aligns with `...`. The result
/// takes the axis order of the operand with the most explicit axes (the first
/// on a tie). On failure returns nullopt and sets `error` to a message naming
/// both axes and both sizes. Elements: the result's is the first operand's
/// unless the caller sets it.
std::optional<Alignment> align(const std::vector<const TensorType*>& operands, std::string& error);

}  // namespace quire::elab

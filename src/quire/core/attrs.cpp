#include "quire/core/attrs.h"

#include <iterator>

namespace quire::core {

const char* cast_target_name(CastTarget t) {
  switch (t) {
    case CastTarget::Real: return "ℝ";
    case CastTarget::F64: return "f64";
    case CastTarget::F32: return "f32";
    case CastTarget::Bf16: return "bf16";
    case CastTarget::F16: return "f16";
    case CastTarget::F32Acc: return "f32acc";
    case CastTarget::I32: return "i32";
    case CastTarget::I64: return "i64";
    case CastTarget::Bool: return "bool";
  }
  return "?";
}

std::optional<CastTarget> parse_cast_target(std::string_view name) {
  if (name == "real") return CastTarget::Real;
  for (CastTarget t : {CastTarget::Real, CastTarget::F64, CastTarget::F32, CastTarget::Bf16, CastTarget::F16,
                       CastTarget::F32Acc, CastTarget::I32, CastTarget::I64, CastTarget::Bool})
    if (name == cast_target_name(t)) return t;
  return std::nullopt;
}

const char* attr_family_name(size_t index) {
  static constexpr const char* kNames[] = {"None",     "Literal",    "Integer",    "Boolean",  "Member",
                                           "Element",  "Exponent",   "CastTo",     "ProductOut", "Range",
                                           "DrawParams", "ExpandOf", "ProductForm", "ScanOf",     "VjpOf"};
  static_assert(std::size(kNames) == std::variant_size_v<Attrs>, "one name per family of Attrs");
  return index < std::size(kNames) ? kNames[index] : "?";
}

}  // namespace quire::core

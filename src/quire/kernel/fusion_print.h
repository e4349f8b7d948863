// Printing fusion's result (fusion.h): `quire dump --stage realize`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "quire/kernel/fusion.h"

namespace quire::kernel {

/// A group as `add(i0,i1);sqrt(s0)`: each step's operation and operands, iN
/// the group's input N and sN its step N.
std::string group_expression(const core::Function& fn, const FusionGroup& g);

/// Why `v` reaches memory, in words: "read by ms : ℝ[...] = mean axis model %4: a reduction".
std::string memory_reason_text(const elab::Program& prog, const core::Function& fn, const StoredValue& v);

/// `quire dump --stage realize`: per function its lets, launches and groups;
/// every value that reaches memory with its line and reason; the launch counts.
std::string print_fusion(const elab::Program& prog, const Fusion& f);
/// The same content: {entry, dims, size_limit, functions: [{name, lets,
/// launches, fused_launches, evaluations, groups: [{root, expression, steps,
/// inputs, epilogue}], stored: [{site, line, nest, reason, reader, why}]}],
/// launches, fused_launches, unknown}.
nlohmann::ordered_json fusion_json(const elab::Program& prog, const Fusion& f);

}  // namespace quire::kernel

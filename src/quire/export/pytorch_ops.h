#pragma once
// One Core instruction as Python statements over PyTorch (docs/export.md):
// the same value the reference interpreter computes under --precision f64.
// Named axes become positional dims counted from the right (a type's explicit
// axes are its last ones, after any `...`), so an instruction never needs to
// know how many leading axes its operands have.

#include <functional>
#include <string>
#include <vector>

#include "quire/core/ir.h"
#include "quire/core/program.h"
#include "quire/core/size.h"

namespace quire::exports {

/// What the translation of one instruction reads of the function it is in.
struct InstrScope {
  const elab::Program& prog;
  const core::Function& fn;
  /// The Python variable holding value %n.
  std::function<std::string(int)> value;
  /// A call's callee as the calling module names it ("Block.apply", "_01_linear.Linear.apply").
  std::function<std::string(const core::Instr&)> callee;
  /// The size keywords a call or fold passes its callee ("T=T", "B=B"), in order.
  std::function<std::vector<std::string>(const core::Instr&)> size_keywords;
};

/// A size as a Python integer expression over the dims in scope: "4", "C // 3 // H".
std::string python_size(const elab::Size& s);

/// A float literal Python reads back exactly: "1e-05", "1.0", "float('-inf')".
std::string python_float(double v);

/// The statements that set `target` to the value of `in` (one or more lines,
/// unindented; a fold's loop indents its body by four spaces). ExportError for
/// the reverse sweep's own operations, naming the function and the site.
std::vector<std::string> translate_instr(const InstrScope& scope, const core::Instr& in, const std::string& target);

}  // namespace quire::exports

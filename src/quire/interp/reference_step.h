#pragma once
// One instruction on the reference kernels (runtime/kernels.h), as every
// backend's host side evaluates the steps it has no kernel for: the
// definition of their bits. The reference interpreter (interpreter.h) walks
// Core with these; the executor of a compiled program (compile/executor.h)
// runs its host program's reference and host steps with them.
//
// Under a realization a computed value is stored at its site's realized type
// (store_at_site): rounded once, through f32 first for a computed half value
// unless the realization keeps half intermediates.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"
#include "quire/realize/realization.h"

namespace quire::interp {

/// The value of `in` (any operation but a call, a fold or a fold_vjp) from
/// its operands in `env` (by value number), under `table` (nullptr: f64),
/// before it is stored. Throws runtime::RuntimeError for a data-dependent
/// failure (an id out of range, a slice beyond its axis).
Value evaluate_step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
                    const std::map<std::string, int64_t>& dims, const precision::FunctionRealization* table);

/// Rounds a computed value to its site's realized type, or checks that a
/// carried one (a call's result, a tuple's element) has it (std::logic_error).
void store_at_site(const core::Function& fn, const core::Instr& in, const precision::SiteType& site,
                   bool half_intermediates, Value& v);

/// The invariant between elaboration and evaluation: a tensor value has the
/// kind and the sizes its site's static type gives it (std::logic_error if not).
void check_site_value(const elab::Program& prog, const core::Function& fn, const core::Instr& in, const Value& v,
                      const std::map<std::string, int64_t>& dims);

/// An entry argument as the realization casts it: real tensors to its input
/// type, each parameter to its stored type.
Value cast_entry_argument(const precision::Realization& r, const Value& v, int depth = 0);

/// The Core walker's (core/walk.h) structural pieces for these values, as
/// the reference interpreter and the executor evaluate them: tuples, a
/// fold's copy i of a stacked parameter tree (every leaf without its leading
/// axis), and a fold_vjp's gradient, each copy's (a parameter tree, copy 0
/// first) stacked along a new leading axis in `stacked`'s shapes.
struct ValueStructure {
  using Value = interp::Value;
  static Value tuple(std::vector<Value> elements) { return Value::of_tuple(std::move(elements)); }
  static Value element(const Value& tuple, size_t k) { return tuple.elements.at(k); }
  static Value copy_of(const Value& stacked, int64_t i);
  /// A fold's further operand as copy i sees it: a key is copy_key(k, i).
  static Value for_copy(const Value& operand, int64_t i) {
    return operand.kind == Value::Kind::Key ? Value::of_key(runtime::copy_key(operand.key, i)) : operand;
  }
  static Value stack(const Value& stacked, const std::vector<Value>& grads);
};

/// The bytes a value takes at its realized type (tensors and tuples of them;
/// parameter trees and keys are shared with the caller, not copies).
int64_t value_bytes(const Value& v, int depth = 0);
/// The bytes a step writes for a value stored at `site`: a tensor its
/// realization stores there, at its storage type; 0 for a value carried from
/// another site (a call's result, a tuple's element), an input, or no site.
int64_t written_bytes(const precision::SiteType* site, const Value& v);

}  // namespace quire::interp

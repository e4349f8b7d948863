#pragma once
// The exact reference: a second interpreter of Core that computes every real
// value with MPFR at N bits (128 by default), rounding to nearest at each
// operation. Realized runs (f64, f32, bf16, f16) are measured against it
// (DESIGN.md §5, docs/numerics.md "The exact reference").
//
// Its semantics are the reference interpreter's (interp/interpreter.cpp's
// `step` is the specification), with the arithmetic at N bits:
// - data movement (transpose, split, merge, concat, slice, gather, broadcast
//   and the adjoints that copy or scatter) runs the runtime kernels on index
//   tensors and picks the Big elements by the indices they return, so it
//   cannot drift from the kernels;
// - sums, reductions and contractions fold in the order kernels.h states;
// - draws are the f64 values the runtime draws produce, converted exactly;
//   f64 arguments and parameters are converted exactly; a real literal is
//   the decimal its source spells, at N bits (`0.1` is not the double 0.1);
// - there is no realization: a cast to a float type is the identity (the
//   exact value is the value of the real-number program), and `--remat` does
//   not apply (a vjp evaluates its forward again).
//
// Requires: a program elaborated without errors. A data-dependent failure
// throws interp::EvalError naming the site and its source position, as the
// reference interpreter does.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/exact/exact_value.h"
#include "quire/interp/value.h"

namespace quire::exact {

class ExactInterpreter {
 public:
  /// `dims` binds the program's free dimensions; `bits` is N (kMinBits..kMaxBits).
  ExactInterpreter(const elab::Program& prog, std::map<std::string, int64_t> dims, int bits = 128);

  /// Calls a function with f64 arguments (θ first for a module's function),
  /// checked against the declared types and converted exactly.
  ExactValue call(int function, const std::vector<interp::Value>& args);

  int bits() const { return bits_; }

  /// Sees every instruction's value as it is evaluated, in evaluation order
  /// (a callee's instructions before its call's result; once per call, fold
  /// copy and vjp re-evaluation). `env[k]` holds value %k of `fn` for every
  /// operand k of `in`. The measurements of precision/envelope.h are taken
  /// this way; without an observer evaluation is unchanged.
  using Observer = std::function<void(const core::Function& fn, const core::Instr& in, const ExactValue& value,
                                      const std::vector<ExactValue>& env)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  /// Whether `op` adds terms: a sum or mean, a contraction, or a reverse-sweep
  /// sum (sum_to, contract_grad_a/b, gather_grad): the operations
  /// absolute_terms applies to.
  static bool adds_terms(core::Op op);

  /// Such an instruction evaluated again, in the same order and at N bits, on
  /// the absolute values of its operands: each result element is then Σ|terms|
  /// of the original's (Σ|x_i| for a sum, Σ|a_i·b_i| for a contraction; a mean
  /// is Σ|x_i| / n). Index operands (gather_grad's ids) stay as they are.
  /// `env` is as the observer receives it. std::logic_error for another op.
  /// With `ones`, every real operand element is 1 instead: each result
  /// element is then the number of terms it adds (a mean's is 1).
  /// Linear in the operands' size, whatever the size of `env`.
  ExactValue absolute_terms(const core::Function& fn, const core::Instr& in, const std::vector<ExactValue>& env,
                            bool ones = false);

 private:
  /// This interpreter as the Core walker's domain (core/walk.h).
  struct Callees;
  ExactValue eval(int function, const std::vector<ExactValue>& args, const std::map<std::string, int64_t>& dims,
                  int depth);
  ExactValue step(const core::Function& fn, const core::Instr& in, const std::vector<ExactValue>& env,
                  const std::map<std::string, int64_t>& dims, int depth);
  /// The invariant between elaboration and evaluation: a tensor value has the
  /// kind and sizes of its site's static type (std::logic_error if not).
  void check_result(const core::Function& fn, const core::Instr& in, const ExactValue& v,
                    const std::map<std::string, int64_t>& dims) const;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  int bits_;
  Observer observer_;
  /// absolute_terms' environment, reused: only the operands' slots are ever
  /// filled, and they are emptied again after each use.
  std::vector<ExactValue> absolute_env_;
};

/// An f64 argument exactly (tuples, trees and tensors element by element).
ExactValue from_f64(const interp::Value& v, int bits);
/// Every real element rounded to the nearest double.
interp::Value to_f64(const ExactValue& v);
/// The leaves of a value under their paths (`result.0`), as interp::flatten_value names them.
void flatten(const ExactValue& v, const std::string& path, std::vector<std::pair<std::string, ExactValue>>& out);

}  // namespace quire::exact

#pragma once
// The reference interpreter: evaluates Core deterministically, one
// instruction at a time, with the kernels of runtime/kernels.h. Every later
// backend is checked against the bits it defines.
//
// Without a realization it computes in f64. Under one (precision/realization.h)
// every real site is stored at its realized type: the kernels compute in f64,
// products and reductions round each step to the site's accumulator, and the
// result is rounded once on store: to the type directly for casts, copies and
// parameter reads; through f32 first for a computed half value (an operation
// on half values computes in f32 and rounds once on store, as PyTorch does on
// the processor), or directly with `--half-intermediates`. Operands of a site
// that reads down (products under a half, everything in a region) are rounded
// to its type first, scalar constants excepted.
//
// Requires: a program elaborated without errors. A data-dependent failure (an
// id out of range, a shape that does not match the declared type) throws
// EvalError naming the site and its source position.

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/elab/program.h"
#include "quire/interp/value.h"
#include "quire/precision/realization.h"

namespace quire::interp {

struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The first site, in evaluation order, whose stored value held a NaN or an
/// infinity: what a training run names when its loss or gradient is not finite.
struct NonFiniteSite {
  std::string function;  ///< the function evaluated (`loss`, `Tower.apply.vjp`)
  std::string site;      ///< the site (`loss %12`, `Block.apply ms`)
  std::string op;        ///< its operation (`exp`, `contract`)
  SourceRange loc;       ///< the expression it came from (a backward site: the forward one it differentiates)
  double value = 0;      ///< the first non-finite element
};

class Interpreter {
 public:
  /// `dims` binds the program's free dimensions (`dim B`) for this run.
  /// `realization` (kept by reference; it must outlive the interpreter), when
  /// given, is the realization of the function `call` will be given.
  Interpreter(const elab::Program& prog, std::map<std::string, int64_t> dims,
              const precision::Realization* realization = nullptr);

  /// Calls a function with its arguments (θ first for a module's function).
  /// The arguments are checked against the declared types; under a
  /// realization, real arguments are cast to its input type and parameters to
  /// their stored types first.
  Value call(int function, const std::vector<Value>& args);

  /// The shape a tensor type has under this run's dimensions (`...` not allowed).
  runtime::Shape concrete_shape(const elab::TensorType& t, const std::map<std::string, int64_t>& dims) const;
  const std::map<std::string, int64_t>& dims() const { return dims_; }

  /// While on, every stored value is checked for NaN and infinity and the
  /// first one found is kept (checking costs a pass over every value, so a
  /// trainer turns it on only to explain a step already known to be bad).
  void watch_nonfinite(bool on) {
    watch_nonfinite_ = on;
    first_nonfinite_.reset();
  }
  const std::optional<NonFiniteSite>& first_nonfinite() const { return first_nonfinite_; }

 private:
  Value eval(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims, int depth,
             core::Numerics context);
  Value step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
             const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
             const precision::FunctionRealization* table);
  /// Rounds a computed value to its site's realized type (or checks a carried one).
  void store(const core::Function& fn, const core::Instr& in, const precision::SiteType& site, Value& v) const;
  /// An entry argument cast as the realization says (input type, stored parameter types).
  Value cast_entry_argument(const Value& v, int depth) const;
  void check_arg(const elab::Type& declared, const Value& v, const std::map<std::string, int64_t>& dims,
                 const std::string& what, int depth) const;
  /// The invariant between elaboration and evaluation: a tensor value has the
  /// kind and the sizes its site's static type gives it (std::logic_error if not).
  void check_result(const core::Function& fn, const core::Instr& in, const Value& v,
                    const std::map<std::string, int64_t>& dims) const;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  const precision::Realization* realization_;
  bool watch_nonfinite_ = false;
  std::optional<NonFiniteSite> first_nonfinite_;
};

}  // namespace quire::interp

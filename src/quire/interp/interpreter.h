#pragma once
// The reference interpreter: evaluates Core in f64, deterministically, one
// instruction at a time, with the kernels of runtime/kernels.h. Every later
// backend is checked against the bits it defines.
//
// Requires: a program elaborated without errors. A data-dependent failure (an
// id out of range, a shape that does not match the declared type) throws
// EvalError naming the site and its source position.

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/elab/program.h"
#include "quire/interp/value.h"

namespace quire::interp {

struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Interpreter {
 public:
  /// `dims` binds the program's free dimensions (`dim B`) for this run.
  Interpreter(const elab::Program& prog, std::map<std::string, int64_t> dims);

  /// Calls a function with its arguments (θ first for a module's function).
  /// The arguments are checked against the declared types.
  Value call(int function, const std::vector<Value>& args);

  /// The shape a tensor type has under this run's dimensions (`...` not allowed).
  runtime::Shape concrete_shape(const elab::TensorType& t, const std::map<std::string, int64_t>& dims) const;
  const std::map<std::string, int64_t>& dims() const { return dims_; }

 private:
  Value eval(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims, int depth);
  Value step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
             const std::map<std::string, int64_t>& dims, int depth);
  void check_arg(const elab::Type& declared, const Value& v, const std::map<std::string, int64_t>& dims,
                 const std::string& what, int depth) const;
  /// The invariant between elaboration and evaluation: a tensor value has the
  /// kind and the sizes its site's static type gives it (std::logic_error if not).
  void check_result(const core::Function& fn, const core::Instr& in, const Value& v,
                    const std::map<std::string, int64_t>& dims) const;

  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
};

}  // namespace quire::interp

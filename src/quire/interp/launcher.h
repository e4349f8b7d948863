#pragma once
// A launcher computes a function's launches as kernels instead of one
// instruction at a time (kernel/engine.h), for the reference interpreter's
// walk: the tests that compare a walk with a compiled program, and a failed
// training step walked again to find its first non-finite value (runs
// themselves execute the compiled program: compile/executor.h). The interpreter keeps the rest of
// the walk: calls, folds, tuples, parameter trees, the realization's tables
// and the forward values a reverse sweep reuses. Before evaluating a
// function it asks which values the launcher computes together; a member of
// a group is never stored, its root's kernel computes it in registers.

#include <optional>
#include <vector>

#include "quire/interp/value.h"
#include "quire/realize/realization.h"

namespace quire::interp {

struct LaunchGroups {
  /// By value number: the root of the group that computes it, for a member
  /// that is not its group's root; −1 for a value nothing needs, which is
  /// not computed at all (kernel/catalog.h); 0 otherwise.
  std::vector<int> computed_by;
  /// By value number: a root's steps in body order (the root last); empty
  /// for every other value.
  std::vector<std::vector<int>> steps;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  /// The groups of `function`, evaluated now under `table` (nullptr: f64):
  /// its fusion groups when `fused`, else each launch alone (an evaluation
  /// whose every value must be kept).
  virtual const LaunchGroups& groups(int function, bool fused, const precision::FunctionRealization* table) = 0;
  /// The value of `root` computed from `env` under `table` (nullptr: f64),
  /// or nullopt when its group has no kernel: the interpreter then evaluates
  /// the group's steps one at a time.
  virtual std::optional<Value> launch(int function, int root, bool fused, const std::vector<Value>& env,
                                      const precision::FunctionRealization* table) = 0;
};

}  // namespace quire::interp

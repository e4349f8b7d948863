#pragma once
// The executor: runs a compiled program (compile.h) by its host program's
// steps, in order, without walking Core. A kernel step runs its kernel on
// the engine's runner (the kernel interpreter or compiled code; the engine
// falls back to the kernel interpreter if the runner cannot take a kernel);
// a launch without a kernel and a host step are evaluated by the reference
// kernels (interp/reference_step.h), as the reference interpreter evaluates
// them; a call runs its callee's instance, a fold its copies' instances,
// and a fold's vjp its forward (unless kept) and then its copies' vjps, last
// first. Under `--remat store` a kept instance's values are held until the
// vjp that reuses them, exactly where the reference interpreter holds them.
//
// The bits are the reference interpreter's (interp/interpreter.h), which
// stays the definition: compile_test.cpp and executor_test.cpp compare the
// two on every tutorial and generated program, under every policy. So are
// the counts it keeps (interp::EvalStats): instructions evaluated, reused
// and repeated, and the most forward bytes kept.
//
// A value is released after its last reader (HostBuffer::last_read), so a
// frame holds only what is still to be read, where the reference interpreter
// holds every value of a frame until it returns. compile/memory.h counts
// what this allocates by replaying these frames on the host program, and
// memory_allocation_test.cpp holds the count to a run's allocations.
//
// Requires: the compiled program, its program and the engine outlive the
// executor; the engine runs the compiled program's catalog.

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/core/kept_forward.h"
#include "quire/interp/envelope_guard.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/engine.h"

namespace quire::compile {

class Executor {
 public:
  Executor(const elab::Program& prog, const CompiledProgram& compiled, kernel::KernelEngine& engine);

  /// Calls the compiled entry with its arguments (θ first for a module's
  /// function), checked against the declared types and against the shapes
  /// it was compiled for (interp::EvalError naming the argument otherwise),
  /// then cast as its realization says.
  interp::Value call(const std::vector<interp::Value>& args);

  /// Checks every value stored at a guarded site against its range
  /// (interp/envelope_guard.h): a kernel's root and every value the host
  /// evaluates; kept by reference, nullptr: none.
  void set_guard(interp::EnvelopeGuard* guard) { guard_ = guard; }

  const interp::EvalStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Saved;
  /// The forward evaluations a frame keeps for its reverse sweep, by
  /// (callee function, operand value numbers), as the interpreter keys them.
  using Kept = core::KeptForwards<interp::Value, std::shared_ptr<const Saved>>;
  struct Saved {
    std::vector<interp::Value> env;
    Kept kept;
    int64_t bytes = 0;
    int64_t* live = nullptr;  ///< the executor's count of bytes kept, given back on destruction
    ~Saved() {
      if (live) *live -= bytes;
    }
  };

  /// Runs instance `id` on `args`. `reuse` (a kept forward of the vjp's
  /// primal) supplies a reusing instance's forward values; `keep`, when
  /// given, receives this run's values for a later reverse sweep.
  interp::Value run(int id, std::vector<interp::Value> args, int depth, const Saved* reuse = nullptr,
                    std::shared_ptr<const Saved>* keep = nullptr);
  /// This executor as the Core walker's domain (core/walk.h).
  struct Callees;
  interp::Value call_step(const HostStep& s, const core::Instr& in, const HostFunction& h, std::vector<interp::Value>& env,
                          Kept* keeping, int depth);

  const elab::Program& prog_;
  const CompiledProgram& compiled_;
  const HostProgram& host_;
  kernel::KernelEngine& engine_;
  bool half_intermediates_ = false;
  /// By instance, by step: the values whose last reader it is.
  std::vector<std::vector<std::vector<int>>> released_after_;
  interp::EvalStats stats_;
  int64_t stored_bytes_ = 0;
  interp::EnvelopeGuard* guard_ = nullptr;
};

}  // namespace quire::compile

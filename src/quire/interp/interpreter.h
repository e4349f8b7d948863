#pragma once
// The reference interpreter: evaluates Core deterministically, one
// instruction at a time, with the kernels of runtime/kernels.h. Every later
// backend is checked against the bits it defines.
//
// Without a realization it computes in f64. Under one (realize/realization.h)
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
#include <memory>
#include <optional>
#include <string_view>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/core/kept_forward.h"
#include "quire/core/program.h"
#include "quire/interp/envelope_guard.h"
#include "quire/interp/launcher.h"
#include "quire/interp/value.h"
#include "quire/realize/realization.h"

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

/// How the reverse sweep of a vjp gets the forward values of the functions
/// the forward called (`--remat`). Both give the same bits; they trade memory
/// for work.
enum class Remat {
  /// Each function keeps its own values only: a callee's vjp evaluates the
  /// callee's forward again (a fold's, every copy's), so a step holds one
  /// function's values at a time per call depth.
  Recompute,
  /// A call's and a fold's forward values, with those of everything they
  /// call, are kept from the forward sweep until the reverse sweep's vjp of
  /// that call takes them instead of evaluating them again.
  Store,
};

/// The realized type of a value passed to a function (see precision::Carry):
/// what the realization's tables are keyed by.
precision::Carry carry_of(const Value& v, int depth = 0);

/// Calls nest at most this deep: they are acyclic, and this guards the invariant.
inline constexpr int kMaxCallDepth = 256;

/// The function a frame at call depth `depth` evaluates on `args` arguments:
/// EvalError if calls nest deeper than kMaxCallDepth, it did not elaborate,
/// or it takes another number of arguments.
const core::Function& frame_function(const elab::Program& prog, int function, size_t args, int depth);

/// The realization's table of `function` called in `context` with `args`
/// (nullptr without a realization; std::logic_error if it did not reach it).
const precision::FunctionRealization* realized_table(const precision::Realization* r, const elab::Program& prog,
                                                     int function, core::Numerics context,
                                                     const std::vector<Value>& args);

/// A run-time failure `e` at instruction `in` of `fn`, placed:
/// "FILE:LINE:COL: in SITE: what".
EvalError error_at(const elab::Program& prog, const core::Function& fn, const core::Instr& in, const std::exception& e);

/// "store", "recompute"; nullopt for anything else.
std::optional<Remat> parse_remat(std::string_view name);
const char* remat_name(Remat r);

/// What evaluations did since the last reset_stats(): the cost --remat trades.
struct EvalStats {
  int64_t evaluated = 0;          ///< instructions evaluated
  int64_t reused = 0;             ///< vjp instructions whose forward value was taken from a stored forward
  /// Callee forwards a reverse sweep evaluated again: a nested vjp frame that
  /// had no stored forward to take, and each fold copy a fold's vjp ran
  /// forward again. 0 under `store` (every one was kept).
  int64_t forwards_repeated = 0;
  int64_t stored_bytes_peak = 0;  ///< the most bytes of forward values kept at once for a reverse sweep
  /// Bytes of the values written at their sites, each at its storage type
  /// (reference_step.h's written_bytes): what a realization narrows. The
  /// executor writes a fused group's root only, so its count is the
  /// compiled program's and the interpreter's is every instruction's.
  int64_t written_bytes = 0;
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

  /// Checks every value stored at a guarded site against its range
  /// (envelope_guard.h); kept by reference, nullptr: none.
  void set_guard(EnvelopeGuard* guard) { guard_ = guard; }

  /// Computes launches through `launcher` (kept by reference; nullptr: one
  /// instruction at a time with the reference kernels). An evaluation whose
  /// values are kept for a reverse sweep (--remat store), or watched for
  /// non-finite values, runs each launch alone so that every value exists.
  void set_launcher(Launcher* launcher) { launcher_ = launcher; }

  /// Recompute unless set (the interpreter's own default; `quire run` and
  /// `quire train` set Store, their `--remat` default).
  void set_remat(Remat r) { remat_ = r; }
  Remat remat() const { return remat_; }
  const EvalStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Saved;
  /// The forward evaluations a frame keeps for its reverse sweep (Store), by
  /// callee and operand value numbers: the key a vjp call shares with the
  /// forward call it differentiates.
  using Kept = core::KeptForwards<Value, std::shared_ptr<const Saved>>;
  /// One function's forward evaluation: its values by number and what it kept.
  struct Saved {
    std::vector<Value> env;
    Kept kept;
    int64_t bytes = 0;      ///< of env's computed values, at their realized types
    int64_t* live = nullptr;  ///< the interpreter's count of bytes kept, given back on destruction
    ~Saved() {
      if (live) *live -= bytes;
    }
  };
  /// This interpreter as the Core walker's domain (core/walk.h).
  struct Callees;

  /// Evaluates a function. `reuse` (a stored forward of fn.primal) supplies
  /// a vjp's forward instructions instead of evaluating them; `keep`, when
  /// given, receives this evaluation's values for a later reverse sweep.
  Value eval(int function, const std::vector<Value>& args, const std::map<std::string, int64_t>& dims, int depth,
             core::Numerics context, const Saved* reuse = nullptr, std::shared_ptr<const Saved>* keep = nullptr);
  Value step(const core::Function& fn, const core::Instr& in, const std::vector<Value>& env,
             const std::map<std::string, int64_t>& dims, int depth, core::Numerics context,
             const precision::FunctionRealization* table, Kept* kept);
  const elab::Program& prog_;
  std::map<std::string, int64_t> dims_;
  const precision::Realization* realization_;
  bool watch_nonfinite_ = false;
  std::optional<NonFiniteSite> first_nonfinite_;
  EnvelopeGuard* guard_ = nullptr;
  Remat remat_ = Remat::Recompute;
  EvalStats stats_;
  int64_t stored_bytes_ = 0;  ///< bytes of forward values kept now
  Launcher* launcher_ = nullptr;
};

}  // namespace quire::interp

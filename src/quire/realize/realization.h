#pragma once
// The realization: a storage type, with its reason, for every real-valued
// site a run evaluates and for every parameter. It comes from a run policy
// (`--precision f64|f32|bf16|f16`) and the program's marks, innermost first:
//
//   - `precision(bf16|f16) { … }`: a region; its sites are stored in the half
//     under any policy, and its instructions read their float operands cast down.
//   - `numerics(high) { … }` (and the prelude's marks): an island; under a half
//     policy its sites are f32; under f32 or f64 nothing changes.
//   - `x as T`: T. `matmul(x, w, out = f32)`: the f32 accumulator is stored
//     under a half policy. `matmul(x, w, out = f64)`: the f64 accumulator is
//     stored under any policy but f64 (a half's operands still read down).
//   - `param … numerics high`: its reads, and the instructions that use them, are f32.
//   - `param … frozen`: stored in the type its readers read.
//   - otherwise the policy. Under f64 or f32 every site takes its type. Under
//     a half, products read their operands cast down to the half and store
//     the half; parameters keep f32 masters whose reads are cast down once; a
//     value computed from f32 values only (the data, an island's output)
//     stays f32 until it meets a half value, and then the result is the half.
//
// Because types flow from operands, a function's sites depend on the types of
// its arguments and on the form around its call: a realization holds one
// table per (function, form, argument types) the entry reaches.
//
// Requires: an elaborated program without errors. Produces: the Realization
// the typed interpreter evaluates under; its tables are the contract that
// interpreter checks at every call.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quire/core/program.h"
#include "quire/runtime/float_types.h"
#include "quire/runtime/tensor.h"

namespace quire::precision {

using runtime::FloatType;

/// A run's precision policy.
enum class Policy : uint8_t { F64, F32, BF16, F16 };
std::optional<Policy> parse_policy(std::string_view name);
const char* policy_name(Policy p);
/// The storage type activations take under the policy.
FloatType policy_type(Policy p);

/// Why a site or a parameter has its type.
enum class Reason : uint8_t {
  Policy,       ///< the run policy
  Island,       ///< inside `numerics(high) { … }`
  LibraryMark,  ///< inside a `numerics(high)` of the prelude
  Region,       ///< inside `precision(bf16|f16) { … }`
  ParamMark,    ///< reads a `numerics high` parameter
  Frozen,       ///< a frozen parameter, stored as its readers read it
  Master,       ///< a trained parameter's master copy
  Cast,         ///< an explicit `as T`
  OutRequest,   ///< `matmul(…, out = f32|f64)`: that accumulator is stored
  Carried,      ///< another site's value passed along (a call's or fold's result, a tuple element)
  Input,        ///< an argument of the entry, cast on entry
  Solved,       ///< the solver's decision (`quire solve`, read back with `--realize @file`)
};
const char* reason_name(Reason r);

/// The realized type of one site.
struct SiteType {
  FloatType storage = FloatType::F64;      ///< the type the value is stored in (rounded once on store)
  FloatType accumulator = FloatType::F64;  ///< reductions and contractions: the type each step rounds to
  bool read_down = false;                  ///< real operands are rounded to `read_as` before use
  bool weak = false;                       ///< a scalar constant: never pulls a result to a half, never read down
  Reason reason = Reason::Policy;
  std::string why;                         ///< one line, for the printout
  FloatType read_as = FloatType::F64;      ///< with read_down: the type operands are read in (the half)
  /// Products under `--product-step fma`: each step is one fused multiply-add
  /// rounded once to the accumulator (runtime::ProductStep::Fused). Set only
  /// where that is defined: an f64 or f32 accumulator whose operands are
  /// values of it.
  bool fma = false;
};

/// The realized type of a value passed between functions: a real tensor's
/// storage type, a tuple's elements, nothing for keys, trees and host scalars.
struct Carry {
  std::optional<FloatType> type;
  bool tuple = false;
  std::vector<Carry> elements;
  bool operator==(const Carry&) const = default;
};
/// "(f32, (bf16, f32), -)": the argument types a function is realized for.
std::string signature(const std::vector<Carry>& args);

/// The realization of one function in one form (the innermost numerics form
/// around its call) for one list of argument types.
struct FunctionRealization {
  int function = -1;
  core::Numerics context = core::Numerics::Default;
  std::string signature;  ///< of `args`
  std::vector<Carry> args;
  /// By value number (index 0 unused); nullopt for values that are not real tensors.
  std::vector<std::optional<SiteType>> values;
  Carry result;
};

struct ParamStorage {
  std::string path;
  FloatType stored = FloatType::F64;
  Reason reason = Reason::Master;
  std::string why;
  int64_t elements = 0;  ///< at the run's dimensions
  bool frozen = false;
  bool numerics_high = false;
};

struct Realization {
  Policy policy = Policy::F64;
  bool half_intermediates = false;
  bool fused_products = false;  ///< `--product-step fma` (RealizeOptions)
  int entry = -1;
  std::vector<FunctionRealization> functions;
  std::vector<ParamStorage> params;

  /// The table of `function` in `context` for these argument types (nullptr if the entry does not reach it).
  const FunctionRealization* find(int function, core::Numerics context, const std::string& signature) const;
  /// The first table of `function` in `context`, whatever its argument types.
  const FunctionRealization* find(int function, core::Numerics context) const;
  /// The type the entry's real arguments are cast to on entry.
  FloatType input_type() const;
  /// The stored type of the parameter at `path` (nullptr if there is none).
  const ParamStorage* param(const std::string& path) const;
  /// `params` by path, as realize() leaves it (param() searches linearly without it).
  std::map<std::string, size_t> param_index;
  /// Bytes the parameters take at rest, each at its stored type.
  int64_t param_bytes() const;
};

/// Storage types chosen per site and per parameter (the solver's decisions,
/// precision/solver.h), applied over a policy. A site is named as
/// core::site_name names it (`RMSNorm.apply/%4`); the decision holds in
/// every call of its function, and in the forward part of every vjp of it
/// (grad/vjp.h: a vjp's first instructions are its primal's). A parameter is
/// keyed by its path (`blocks.proj.w`); the sites that read it take its type.
struct Assignment {
  Policy policy = Policy::F64;
  std::map<std::string, FloatType> sites;
  std::map<std::string, FloatType> params;
  /// A narrowed sum or contraction accumulates in f32 unless named here with
  /// a wider accumulator (the solver's, where an f32 accumulation would
  /// overdraw the budget): by site, each also narrowed in `sites`.
  std::map<std::string, FloatType> accumulators;
};

struct RealizeOptions {
  Policy policy = Policy::F64;
  bool half_intermediates = false;  ///< reductions and contractions accumulate in the half itself
  /// Decisions over the policy (null: none). A narrowed reduction accumulates
  /// in f32; a parameter decision is its stored type, unless `keep_masters`.
  const Assignment* assignment = nullptr;
  /// Training: a parameter keeps its master type at rest and its decision
  /// applies where it is read (the reads are rounded to it once a step).
  bool keep_masters = false;
  /// `--product-step fma`: products step by fused multiply-add where their
  /// accumulator allows it (SiteType::fma); `separate` (false) rounds the
  /// product and the sum apart, as the reference always has.
  bool fused_products = false;
};

bool is_half(FloatType t);

/// The float type a cast to `t` names: f64, f32, bf16 or f16 as written, f32
/// for f32acc; nullopt for ℝ (the policy's type) and the integer kinds.
std::optional<FloatType> named_float_type(core::CastTarget t);
/// The element kind of a cast to i32, i64 or bool; nullopt for the real targets.
std::optional<runtime::ElemKind> cast_integer_kind(core::CastTarget t);

/// Realizes everything `entry` reaches. `dims` sizes the parameters (for bytes).
Realization realize(const elab::Program& prog, int entry, const RealizeOptions& options,
                    const std::map<std::string, int64_t>& dims);

std::string print_realization(const elab::Program& prog, const Realization& r);
nlohmann::ordered_json realization_json(const elab::Program& prog, const Realization& r);

}  // namespace quire::precision

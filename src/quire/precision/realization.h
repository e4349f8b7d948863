#pragma once
// The realization: a storage type, with its reason, for every real-valued
// site a run evaluates and for every parameter. It comes from a run policy
// (`--precision f64|f32|bf16|f16`) and the program's marks, innermost first:
//
//   - `precision(bf16|f16) { … }`: a region; its sites are stored in the half
//     under any policy, and its instructions read their float operands cast down.
//   - `numerics(high) { … }` (and the prelude's marks): an island; under a half
//     policy its sites are f32; under f32 or f64 nothing changes.
//   - `x as T`: T. `matmul(x, w, out = f32)`: the f32 accumulator is stored.
//   - `param … numerics high`: its reads, and the instructions that use them, are f32.
//   - `param … frozen`: stored in the type its readers read.
//   - otherwise the policy: f64, f32, or a half for activations and products
//     (trained parameters keep f32 masters whose reads are cast down once).
//
// A function's sites can be realized differently in different calling
// contexts (a function called inside a region computes in the half), so a
// realization holds one table per (function, context) the entry reaches.
//
// Requires: an elaborated program without errors. Produces: the Realization
// the typed interpreter evaluates under.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quire/elab/program.h"
#include "quire/runtime/float_types.h"

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
  OutRequest,   ///< `matmul(…, out = f32)`
  Carried,      ///< another site's value passed along (a call's or fold's result, a tuple element)
  Input,        ///< an argument of the entry, cast on entry
};
const char* reason_name(Reason r);

/// The realized type of one site.
struct SiteType {
  FloatType storage = FloatType::F64;      ///< the type the value is stored in (rounded once on store)
  FloatType accumulator = FloatType::F64;  ///< reductions and contractions: the type each step rounds to
  bool read_down = false;                  ///< operands wider than `storage` are rounded to it before use
  Reason reason = Reason::Policy;
  std::string why;                         ///< one line, for the printout
};

/// The realization of one function in one calling context.
struct FunctionRealization {
  int function = -1;
  core::Numerics context = core::Numerics::Default;
  /// By value number (index 0 unused); nullopt for values that are not real tensors.
  std::vector<std::optional<SiteType>> values;
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
  int entry = -1;
  std::vector<FunctionRealization> functions;
  std::vector<ParamStorage> params;

  const FunctionRealization* find(int function, core::Numerics context) const;
  /// Bytes the parameters take at rest, each at its stored type.
  int64_t param_bytes() const;
};

struct RealizeOptions {
  Policy policy = Policy::F64;
  bool half_intermediates = false;  ///< reductions and contractions accumulate in the half itself
};

/// Realizes everything `entry` reaches. `dims` sizes the parameters (for bytes).
Realization realize(const elab::Program& prog, int entry, const RealizeOptions& options,
                    const std::map<std::string, int64_t>& dims);

std::string print_realization(const elab::Program& prog, const Realization& r);
nlohmann::ordered_json realization_json(const elab::Program& prog, const Realization& r);

}  // namespace quire::precision

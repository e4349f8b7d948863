#pragma once
// The arguments of an entry function for `quire run`: its parameter tree, and
// every other argument either read from an .npz (each under its path: `x`,
// `batch.0`, `batch.1`) or drawn from the seed.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"
#include "quire/interp/value.h"

namespace quire::interp {

/// The entry's arguments. `params` fills a `params M` first argument. Without
/// `inputs_path`, real tensors are drawn from N(0, 1) under
/// derive_key(key_from_seed(seed), "input:" + path) and keys are that key;
/// integer tensors and host scalars without a default must come from the file.
std::vector<Value> entry_arguments(const elab::Program& prog, int function, const ParamMap* params,
                                   const std::map<std::string, int64_t>& dims, uint64_t seed,
                                   const std::optional<std::string>& inputs_path);

/// The leaves of a value under their paths (`batch.0`): tuples flatten, tensors stay.
void flatten_value(const Value& v, const std::string& path, std::vector<std::pair<std::string, runtime::Tensor>>& out);

/// Checks a value against an argument's declared type at this run's
/// dimensions: kind, element type and sizes (a `...` takes any leading axes;
/// a parameter tree needs every path of its model at its shape). EvalError
/// "WHAT: expected …, found …" otherwise.
void check_argument(const elab::Program& prog, const elab::Type& declared, const Value& v,
                    const std::map<std::string, int64_t>& dims, const std::string& what, int depth = 0);

/// The shape of a tensor type without `...` at this run's dimensions
/// (EvalError for `...`, an unbound dimension or a size below 1).
runtime::Shape concrete_shape(const elab::TensorType& t, const std::map<std::string, int64_t>& dims);
/// EvalError where `shape` (t's at `dims`) has more than elab::kMaxElements
/// elements, naming the dims t's sizes use: each dim is at most 2^40, but their
/// product can pass any bound and wrap int64.
void check_element_count(const elab::TensorType& t, const runtime::Shape& shape,
                         const std::map<std::string, int64_t>& dims);

}  // namespace quire::interp

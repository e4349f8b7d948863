#pragma once
// The run-time values of the reference interpreter: tensors, random keys,
// tuples, parameter trees and host scalars.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quire/runtime/float_types.h"
#include "quire/runtime/random.h"
#include "quire/runtime/tensor.h"

namespace quire::interp {

/// A parameter tree: leaf tensors keyed by their path relative to the tree
/// (`w`, `proj.w`, `blocks.norm.γ`). Stacked copies are leading axes of the leaves.
using ParamMap = std::map<std::string, runtime::Tensor>;

struct Value {
  enum class Kind { Tensor, Key, Tuple, Params, Host } kind = Kind::Tensor;
  runtime::Tensor tensor;
  /// A real tensor's storage type under the run's realization: its elements
  /// are values of this type (held as f64). F64 when no realization applies.
  runtime::FloatType type = runtime::FloatType::F64;
  runtime::Key key;
  std::vector<Value> elements;
  std::shared_ptr<const ParamMap> params;
  double host = 0;  ///< a host scalar (f64, nat, int, bool as 0/1)

  static Value of(runtime::Tensor t) {
    Value v;
    v.kind = Kind::Tensor;
    v.tensor = std::move(t);
    return v;
  }
  static Value of_key(runtime::Key k) {
    Value v;
    v.kind = Kind::Key;
    v.key = k;
    return v;
  }
  static Value of_host(double x) {
    Value v;
    v.kind = Kind::Host;
    v.host = x;
    return v;
  }
  static Value of_tuple(std::vector<Value> elements) {
    Value v;
    v.kind = Kind::Tuple;
    v.elements = std::move(elements);
    return v;
  }
  static Value of_params(std::shared_ptr<const ParamMap> p) {
    Value v;
    v.kind = Kind::Params;
    v.params = std::move(p);
    return v;
  }
};

}  // namespace quire::interp

#pragma once
// The run-time values of the exact reference: interp::Value with every real
// element a Big. Integer and boolean tensors stay runtime::Tensor (their
// values are exact already); keys, tuples and host scalars are as in Value.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quire/exact/big.h"
#include "quire/runtime/random.h"
#include "quire/runtime/tensor.h"

namespace quire::exact {

/// A dense row-major real tensor; invariant: elems.size() == element_count(shape).
struct BigTensor {
  runtime::Shape shape;
  std::vector<Big> elems;

  /// `fill` (+0 by default) at every element, at `bits`.
  static BigTensor filled(runtime::Shape shape, int bits);
  int64_t size() const { return runtime::element_count(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

/// A parameter tree as interp::ParamMap: leaves keyed by their path.
using BigParamMap = std::map<std::string, BigTensor>;

struct ExactValue {
  enum class Kind { Tensor, Key, Tuple, Params, Host } kind = Kind::Tensor;
  /// A tensor is real (`real`) or integer/boolean (`other`, never of kind Real).
  bool is_real = true;
  BigTensor real;
  runtime::Tensor other;
  runtime::Key key;
  std::vector<ExactValue> elements;
  std::shared_ptr<const BigParamMap> params;
  double host = 0;  ///< a host scalar: f64 by the language's definition, as in interp::Value

  static ExactValue of(BigTensor t) {
    ExactValue v;
    v.real = std::move(t);
    return v;
  }
  /// An integer or boolean tensor as it is; a real one (f64) converted exactly.
  static ExactValue of(const runtime::Tensor& t, int bits);
  static ExactValue of_key(runtime::Key k) {
    ExactValue v;
    v.kind = Kind::Key;
    v.key = k;
    return v;
  }
  static ExactValue of_host(double x) {
    ExactValue v;
    v.kind = Kind::Host;
    v.host = x;
    return v;
  }
  static ExactValue of_tuple(std::vector<ExactValue> elements) {
    ExactValue v;
    v.kind = Kind::Tuple;
    v.elements = std::move(elements);
    return v;
  }
  static ExactValue of_params(std::shared_ptr<const BigParamMap> p) {
    ExactValue v;
    v.kind = Kind::Params;
    v.params = std::move(p);
    return v;
  }
};

/// Every element of an f64 tensor exactly (an integer tensor's rounded at N bits: exact for N ≥ 63).
BigTensor to_big(const runtime::Tensor& t, int bits);
/// Every element rounded to the nearest double.
runtime::Tensor to_f64(const BigTensor& t);

}  // namespace quire::exact

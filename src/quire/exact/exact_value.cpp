#include "quire/exact/exact_value.h"

namespace quire::exact {

BigTensor BigTensor::filled(runtime::Shape shape, int bits) {
  BigTensor t;
  t.elems.assign(static_cast<size_t>(runtime::element_count(shape)), Big(bits));
  t.shape = std::move(shape);
  return t;
}

ExactValue ExactValue::of(const runtime::Tensor& t, int bits) {
  ExactValue v;
  if (t.is_real()) {
    v.real = to_big(t, bits);
  } else {
    v.is_real = false;
    v.other = t;
  }
  return v;
}

BigTensor to_big(const runtime::Tensor& t, int bits) {
  BigTensor r;
  r.shape = t.shape;
  r.elems.reserve(t.is_real() ? t.reals.size() : t.ints.size());
  if (t.is_real())
    for (double x : t.reals) r.elems.emplace_back(x, bits);
  else
    for (int64_t x : t.ints) r.elems.push_back(Big::from_int(x, bits));
  return r;
}

runtime::Tensor to_f64(const BigTensor& t) {
  runtime::Tensor r = runtime::Tensor::real(t.shape);
  for (size_t i = 0; i < t.elems.size(); ++i) r.reals[i] = t.elems[i].to_double();
  return r;
}

}  // namespace quire::exact

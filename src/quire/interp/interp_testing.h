#pragma once
// Helpers shared by the interpreter's unit tests: tensors from literals, a
// program elaborated from text and called by function name, and bit-exact
// comparison of reals.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "quire/elab/elab_testing.h"
#include "quire/interp/interpreter.h"
#include "quire/interp/params.h"

namespace quire::interp::testing {

inline runtime::Tensor reals(runtime::Shape shape, std::vector<double> values) {
  runtime::Tensor t = runtime::Tensor::real(std::move(shape));
  EXPECT_EQ(t.reals.size(), values.size());
  t.reals = std::move(values);
  return t;
}

inline runtime::Tensor ints(runtime::ElemKind kind, runtime::Shape shape, std::vector<int64_t> values) {
  runtime::Tensor t = runtime::Tensor::integer(kind, std::move(shape));
  EXPECT_EQ(t.ints.size(), values.size());
  t.ints = std::move(values);
  return t;
}

/// Same bits (any NaN matches any NaN).
inline ::testing::AssertionResult same_bits(double got, double want) {
  if ((std::isnan(got) && std::isnan(want)) || std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " (0x" << std::hex << std::bit_cast<uint64_t>(got)
                                       << "), want " << want << " (0x" << std::bit_cast<uint64_t>(want) << ")";
}

/// Expects a real tensor of this shape whose elements have exactly these bits.
inline void expect_reals(const runtime::Tensor& got, const runtime::Shape& shape, const runtime::RealStorage& want) {
  ASSERT_EQ(got.kind, runtime::ElemKind::Real);
  ASSERT_EQ(got.shape, shape);
  ASSERT_EQ(got.reals.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(got.reals[i], want[i])) << "element " << i;
}

/// Expects reals within a relative tolerance (for library functions whose
/// last bit an independent formula need not reproduce).
inline void expect_near(const runtime::Tensor& got, const runtime::Shape& shape, const runtime::RealStorage& want,
                        double rel = 1e-15) {
  ASSERT_EQ(got.kind, runtime::ElemKind::Real);
  ASSERT_EQ(got.shape, shape);
  ASSERT_EQ(got.reals.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.reals[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << "element " << i;
}

inline void expect_ints(const runtime::Tensor& got, runtime::ElemKind kind, const runtime::Shape& shape,
                        const std::vector<int64_t>& want) {
  ASSERT_EQ(got.kind, kind);
  ASSERT_EQ(got.shape, shape);
  EXPECT_EQ(got.ints, want);
}

/// A program elaborated from text, whose functions are called by name.
struct Program {
  std::unique_ptr<elab::testing::Elaborated> e;
  std::map<std::string, int64_t> dims;

  explicit Program(const std::string& text, std::map<std::string, int64_t> d = {})
      : e(elab::testing::elaborate_text(text)), dims(std::move(d)) {
    EXPECT_TRUE(e->ok()) << e->rendered();
  }
  const elab::Program& prog() const { return *e->prog; }
  int index(const std::string& name) const {
    int f = e->prog->find_function(name);
    EXPECT_GE(f, 0) << "no function " << name;
    return f;
  }
  Value call(const std::string& name, const std::vector<Value>& args) const {
    Interpreter interp(*e->prog, dims);
    return interp.call(index(name), args);
  }
  /// Calls with every argument a tensor.
  runtime::Tensor operator()(const std::string& name, const std::vector<runtime::Tensor>& args) const {
    std::vector<Value> vs;
    for (const runtime::Tensor& t : args) vs.push_back(Value::of(t));
    return call(name, vs).tensor;
  }
  /// The parameters of a module's instance without dimensions, from `seed`.
  ParamMap params(const std::string& module, uint64_t seed = 0) const {
    for (size_t m = 0; m < e->prog->modules.size(); ++m)
      if (e->prog->modules[m].name == module)
        return init_params(*e->prog, elab::ParamsType{static_cast<int>(m), {}, {}}, seed, dims);
    ADD_FAILURE() << "no module " << module;
    return {};
  }
};

inline Value tree(ParamMap p) { return Value::of_params(std::make_shared<const ParamMap>(std::move(p))); }

}  // namespace quire::interp::testing

// Broadcasting (type.h's align) and the printing of types.

#include "quire/core/type.h"

#include <gtest/gtest.h>

namespace quire::elab {
namespace {

Axis named(const std::string& name, int64_t size) { return {name, Size::constant(size)}; }
Axis pos(int64_t size) { return {"", Size::constant(size)}; }

TensorType tt(std::vector<Axis> axes, bool rest = false, Elem elem = Elem::Real) {
  TensorType t;
  t.elem = elem;
  t.rest = rest;
  t.axes = std::move(axes);
  return t;
}

std::string show(const TensorType& t) { return TypePrinter{}.tensor(t); }

/// Aligns and returns the result's printout, or "error: …".
std::string aligned(const std::vector<TensorType>& ops, std::vector<OperandAlignment>* maps = nullptr) {
  std::vector<const TensorType*> ptrs;
  for (const TensorType& t : ops) ptrs.push_back(&t);
  std::string error;
  auto a = align(ptrs, error);
  if (!a) return "error: " + error;
  if (maps) *maps = a->operands;
  return show(a->result);
}

TEST(Align, NamedAxesAlignByNameInAnyOrder) {
  std::vector<OperandAlignment> maps;
  EXPECT_EQ(aligned({tt({named("a", 2), named("b", 3)}), tt({named("b", 3), named("a", 2)})}, &maps), "ℝ[a: 2, b: 3]");
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].map, (std::vector<int>{0, 1}));
  EXPECT_EQ(maps[1].map, (std::vector<int>{1, 0}));  // result a ← operand axis 1
}

TEST(Align, ANamedAxisBroadcastsOverTheOthers) {
  std::vector<OperandAlignment> maps;
  // γ : ℝ[model: 4] against x : ℝ[batch: 2, model: 4]: aligns on `model`.
  EXPECT_EQ(aligned({tt({named("model", 4)}), tt({named("batch", 2), named("model", 4)})}, &maps),
            "ℝ[batch: 2, model: 4]");
  EXPECT_EQ(maps[0].map, (std::vector<int>{-1, 0}));
  // A named axis of the short operand that the frame has first: still by name.
  EXPECT_EQ(aligned({tt({named("batch", 2), named("model", 4)}), tt({named("batch", 2)})}, &maps),
            "ℝ[batch: 2, model: 4]");
  EXPECT_EQ(maps[1].map, (std::vector<int>{0, -1}));
}

TEST(Align, PositionalAxesAlignFromTheRight) {
  std::vector<OperandAlignment> maps;
  EXPECT_EQ(aligned({tt({pos(2), pos(3)}), tt({pos(3)})}, &maps), "ℝ[2, 3]");
  EXPECT_EQ(maps[1].map, (std::vector<int>{-1, 0}));
  EXPECT_EQ(aligned({tt({pos(3)}), tt({pos(2), pos(3)})}), "ℝ[2, 3]");
  EXPECT_EQ(aligned({tt({}), tt({pos(2), pos(3)})}), "ℝ[2, 3]");  // a scalar
  // A positional axis lines up with a named one and takes its name.
  EXPECT_EQ(aligned({tt({pos(2), pos(4)}), tt({named("model", 4)})}), "ℝ[2, model: 4]");
}

TEST(Align, SizeOneStretches) {
  EXPECT_EQ(aligned({tt({pos(1), pos(3)}), tt({pos(2), pos(1)})}), "ℝ[2, 3]");
  EXPECT_EQ(aligned({tt({named("a", 1)}), tt({named("a", 5)})}), "ℝ[a: 5]");
  EXPECT_EQ(aligned({tt({named("a", 5)}), tt({named("a", 1)})}), "ℝ[a: 5]");
  // Three operands (where): the frame's 1 gives way to the first larger size.
  EXPECT_EQ(aligned({tt({pos(1)}), tt({pos(5)}), tt({pos(1)})}), "ℝ[5]");
}

TEST(Align, RestAlignsWithRest) {
  std::vector<OperandAlignment> maps;
  // x / mean(axis model, x): ℝ[..., model: 4] with ℝ[...].
  EXPECT_EQ(aligned({tt({named("model", 4)}, true), tt({}, true)}, &maps), "ℝ[..., model: 4]");
  EXPECT_TRUE(maps[0].rest);
  EXPECT_TRUE(maps[1].rest);
  EXPECT_EQ(maps[1].map, (std::vector<int>{-1}));
  // `...` with a fixed operand: the result keeps `...`.
  EXPECT_EQ(aligned({tt({named("model", 4)}, true), tt({named("model", 4)})}, &maps), "ℝ[..., model: 4]");
  EXPECT_FALSE(maps[1].rest);
  EXPECT_EQ(aligned({tt({}), tt({pos(4)}, true)}), "ℝ[..., 4]");
}

TEST(Align, SymbolicSizesMustBeEqual) {
  Axis b{"batch", Size::symbol("B")};
  EXPECT_EQ(aligned({tt({b, named("m", 2)}), tt({b, named("m", 2)})}), "ℝ[batch: B, m: 2]");
  bool ok = true;
  Axis two_b{"batch", Size::add(Size::symbol("B"), Size::symbol("B"), ok)};
  Axis b_times_2{"batch", Size::mul(Size::constant(2), Size::symbol("B"), ok)};
  EXPECT_EQ(aligned({tt({two_b}), tt({b_times_2})}), "ℝ[batch: 2·B]");
  EXPECT_EQ(aligned({tt({b}), tt({Axis{"batch", Size::symbol("C")}})}),
            "error: axis `batch` (size C) does not match axis `batch` (size B)");
}

TEST(Align, ErrorsNameBothAxesAndBothSizes) {
  EXPECT_EQ(aligned({tt({named("batch", 2), named("model", 4)}), tt({named("batch", 2), named("hidden", 4)})}),
            "error: axis `model` (size 4) cannot align with axis `hidden` (size 4)");
  EXPECT_EQ(aligned({tt({pos(2), pos(3)}), tt({pos(4)})}),
            "error: positional axis 0 (size 4) does not match positional axis 1 (size 3)");
  EXPECT_EQ(aligned({tt({named("a", 2)}), tt({named("a", 3)})}),
            "error: axis `a` (size 3) does not match axis `a` (size 2)");
  EXPECT_EQ(aligned({tt({pos(2)}), tt({named("b", 3)})}),
            "error: axis `b` (size 3) does not match positional axis 0 (size 2)");
}

TEST(Align, AnAxisNamedByOneOperandCannotAlignWithAnotherName) {
  // where(c : bool[2, 3], x : ℝ[c: 3], y : ℝ[d: 3]): x names the frame's axis 1 `c`.
  EXPECT_EQ(aligned({tt({pos(2), pos(3)}, false, Elem::Bool), tt({named("c", 3)}), tt({named("d", 3)})}),
            "error: axis `c` (size 3) cannot align with axis `d` (size 3)");
  EXPECT_EQ(aligned({tt({pos(2), pos(3)}, false, Elem::Bool), tt({named("c", 3)}), tt({named("c", 1)})}),
            "bool[2, c: 3]");
  // Two operands naming two positional axes alike.
  EXPECT_EQ(aligned({tt({pos(2), pos(3)}, false, Elem::Bool), tt({named("c", 2), pos(1)}), tt({named("c", 3)})}),
            "error: the operands name positional axes 0 and 1 both `c`");
}

TEST(Align, AStretchedAxisIsReportedWithItsSize) {
  // ℝ[1] + ℝ[5] + ℝ[6]: the result axis is 5 by the time ℝ[6] arrives.
  std::string r = aligned({tt({pos(1)}), tt({pos(5)}), tt({pos(6)})});
  EXPECT_NE(r.find("size 6"), std::string::npos) << r;
  EXPECT_NE(r.find("size 5"), std::string::npos) << r;
}

TEST(Align, ResultTakesTheFirstOperandsElement) {
  std::string error;
  TensorType a = tt({pos(2)}, false, Elem::I32), b = tt({pos(2)});
  auto r = align({&a, &b}, error);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result.elem, Elem::I32);
}

TEST(TypePrinter, PrintsAsTheLanguageWrites) {
  TypePrinter p;
  p.module_names = {"Linear", "Block"};
  EXPECT_EQ(p(Type::real_scalar()), "ℝ[]");
  EXPECT_EQ(p(Type::make_tensor(tt({named("batch", 2), pos(4)}, true, Elem::I32))), "i32[..., batch: 2, 4]");
  EXPECT_EQ(p(Type::make_key()), "key");
  EXPECT_EQ(p(Type::make_scalar(ScalarKind::Nat)), "nat");
  EXPECT_EQ(p(Type::make_tuple({Type::real_scalar(), Type::make_key()})), "(ℝ[], key)");
  ParamsType lin{0, {Size::constant(4), Size::symbol("D")}, {}};
  EXPECT_EQ(p(Type::make_params(lin)), "params Linear{4, D}");
  ParamsType stacked{1, {}, {Size::constant(2), Size::constant(3)}};
  EXPECT_EQ(p.params(stacked), "stack{2}(stack{3}(Block))");
}

}  // namespace
}  // namespace quire::elab

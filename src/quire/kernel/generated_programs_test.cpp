// Random programs (generated_programs_testing.h) and their vjps through the kernel
// stages: fusion keeps its promises (fusion.h); every layout of every kernel
// gives the kernel's bits; and the kernel engine on the kernel interpreter
// gives the reference interpreter's bits: each function on arguments with
// special values, each tower (parameters, a stack folded) on its initial
// parameters, and their vjps on finite values (forward values recomputed,
// and stored), under every policy, unplanned and with every kernel at its
// widest layout.

#include "quire/kernel/generated_programs_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "quire/kernel/fusion.h"
#include "quire/kernel/kernel_interpreter.h"
#include "quire/kernel/kernel_testing.h"
#include "quire/kernel/layout.h"

namespace quire::kernel {
namespace {

using testing::every_policy;
using testing::expect_same;
using testing::label;

/// `count` generated functions (or towers) and their vjps: the kernel
/// engine's bits against the reference interpreter's, as the file's head says.
void expect_reference_bits(bool towers, int count) {
  const machine::Profile eager = testing::eager_profile();
  InterpretingRunner runner;
  const int64_t launches = testing::expect_generated_reference_bits(
      runner, towers, count, every_policy(), {nullptr, &eager}, {interp::Remat::Recompute, interp::Remat::Store});
  EXPECT_GT(launches, 0) << "the programs' operations run as kernels";
}

/// Every promise of fusion.h on one function: each launch is either a
/// member of a group that is not its root or stored with one reason; a
/// member is not the result and all its element readers are in its group; a
/// group holds at most kMaxGroupSteps steps, element-wise ones after at most
/// one product; a named reader reads the value and is of the reason's kind;
/// an unread value has no reader; the counts add up.
void expect_fusion_promises(const core::Function& fn, const FunctionFusion& ff) {
  std::map<int, const core::Instr*> instr;
  std::map<int, std::vector<const core::Instr*>> readers;
  for (const core::Instr& in : fn.body) {
    instr[in.id] = &in;
    for (size_t k = 0; k < in.args.size(); ++k)
      if (reads_elements(in, k)) readers[in.args[k]].push_back(&in);
  }
  std::map<int, const StoredValue*> stored;
  for (const StoredValue& s : ff.stored) {
    EXPECT_TRUE(stored.emplace(s.value, &s).second) << fn.value_name(s.value) << " is stored twice";
    if (s.group >= 0) {
      EXPECT_EQ(ff.groups.at(static_cast<size_t>(s.group)).root(), s.value);
    }
  }
  int launches = 0, alone = 0;
  for (const core::Instr& in : fn.body) {
    const std::string name = fn.value_name(in.id);
    const int g = ff.group_of.at(static_cast<size_t>(in.id));
    if (launch_kind(in) == LaunchKind::None) {
      EXPECT_EQ(g, -1) << name;
      EXPECT_FALSE(stored.count(in.id)) << name;
      continue;
    }
    ++launches;
    const bool member = g >= 0 && ff.groups.at(static_cast<size_t>(g)).root() != in.id;
    EXPECT_NE(member, stored.count(in.id) == 1) << name << ": a member, or stored";
    if (stored.count(in.id) && g < 0) ++alone;
    if (member) {
      EXPECT_NE(in.id, fn.result_value) << name;
      for (const core::Instr* r : readers[in.id]) EXPECT_EQ(ff.group_of.at(static_cast<size_t>(r->id)), g) << name;
    }
  }
  for (const FusionGroup& group : ff.groups) {
    EXPECT_LE(group.steps.size(), static_cast<size_t>(kMaxGroupSteps));
    for (size_t i = 0; i < group.steps.size(); ++i) {
      const LaunchKind kind = launch_kind(*instr.at(group.steps[i]));
      EXPECT_EQ(kind, i == 0 && group.epilogue ? LaunchKind::Product : LaunchKind::ElementWise)
          << fn.value_name(group.steps[i]);
    }
  }
  for (const StoredValue& s : ff.stored) {
    const std::vector<const core::Instr*>& r = readers[s.value];
    if (s.reason == MemoryReason::Unread) {
      EXPECT_TRUE(r.empty()) << fn.value_name(s.value);
    }
    if (s.reader > 0) {
      EXPECT_TRUE(std::any_of(r.begin(), r.end(), [&](const core::Instr* in) { return in->id == s.reader; }) ||
                  std::count(instr.at(s.reader)->args.begin(), instr.at(s.reader)->args.end(), s.value) > 0)
          << fn.value_name(s.value) << " is not read by the reader its reason names";
      static const std::map<MemoryReason, LaunchKind> kReaderKind = {
          {MemoryReason::ReadByReduction, LaunchKind::Reduction},   {MemoryReason::ReadByProduct, LaunchKind::Product},
          {MemoryReason::ReadByMovement, LaunchKind::DataMovement}, {MemoryReason::ReadByDraw, LaunchKind::Draw},
          {MemoryReason::OtherShape, LaunchKind::ElementWise},
      };
      if (auto it = kReaderKind.find(s.reason); it != kReaderKind.end()) {
        EXPECT_EQ(launch_kind(*instr.at(s.reader)), it->second) << fn.value_name(s.value);
      }
    }
  }
  EXPECT_EQ(ff.launches, launches);
  EXPECT_EQ(ff.fused_launches, static_cast<int>(ff.groups.size()) + alone);
  EXPECT_LE(ff.fused_launches, ff.launches);
}

TEST(GeneratedPrograms, DrawEveryOperationThatTakesArgumentsOfItsOwn) {
  // The first 200 programs, which the suites run (a fifth of them under the
  // sanitizers), meet each of them: a construct the generator stopped
  // drawing would go untested silently. Only their sources are read.
  std::map<std::string, int> seen = {{"gather(", 0}, {"pick(", 0}, {"one_hot(", 0}, {"scan(", 0}, {"slice(", 0},
                                     {"concat(", 0}, {"merge(", 0}, {"split(", 0}};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::string source = testing::generate_program(seed).source;
    for (auto& [what, count] : seen) count += source.find(what) != std::string::npos ? 1 : 0;
  }
  for (const auto& [what, count] : seen) EXPECT_GT(count, 0) << what << " in none of 200 generated programs";
}

TEST(GeneratedPrograms, KeepFusionsPromises) {
  for (bool towers : {false, true})
    testing::for_each_generated_case(towers, towers ? 60 : 200, [](const testing::GeneratedCase& c) {
      for (int entry : {c.f, c.vjp}) {
        const Fusion fusion = fuse(*c.e->prog, entry, {});
        ASSERT_TRUE(fusion.launches && fusion.fused_launches) << fusion.unknown;
        EXPECT_LE(*fusion.fused_launches, *fusion.launches);
        for (const FunctionFusion& ff : fusion.functions) {
          SCOPED_TRACE(c.e->prog->functions[static_cast<size_t>(ff.function)].name);
          expect_fusion_promises(c.e->prog->functions[static_cast<size_t>(ff.function)], ff);
        }
      }
    });
}

/// Runs each kernel as lowered and at every point of its layout space but
/// the packed product's (sgemm's own tests cover it), expecting the same
/// bits at every point.
class EveryLayoutRunner : public KernelRunner {
 public:
  runtime::Tensor run(int, const Kernel& k, const std::vector<const runtime::Tensor*>& inputs) override {
    const runtime::Tensor want = run_kernel(k, inputs);
    for (const RankedLayout& r : plan_kernel(k, profile_, 2).ranked) {
      if (r.layout.pack) continue;
      Kernel laid = k;
      apply_layout(laid, r.layout);
      ++points_;
      reordered_ += r.layout.tile > 1 || r.layout.swap;
      expect_same(interp::Value::of(run_kernel(laid, inputs)), interp::Value::of(want),
                  k.title + " at " + layout_text(r.layout));
    }
    return want;
  }
  int points_ = 0, reordered_ = 0;

 private:
  machine::Profile profile_ = machine::shipped_profile();
};

TEST(GeneratedPrograms, GiveTheirKernelsBitsAtEveryLayout) {
  EveryLayoutRunner runner;
  precision::RealizeOptions f32;
  f32.policy = precision::Policy::F32;
  for (bool towers : {false, true})
    testing::for_each_generated_case(towers, towers ? 30 : 100, [&](const testing::GeneratedCase& c) {
      testing::run_both(*c.e->prog, c.f, c.specials, {}, f32, runner);
      testing::run_both(*c.e->prog, c.vjp, c.finite, {}, f32, runner);
    });
  EXPECT_GT(runner.reordered_, 0) << "some nests are reordered or tiled";
  EXPECT_GT(runner.points_, 0);
}

TEST(GeneratedPrograms, HaveTheReferenceBitsOnTheKernelInterpreter) { expect_reference_bits(false, 200); }

TEST(GeneratedPrograms, TowersAndTheirGradientsHaveTheReferenceBitsOnTheKernelInterpreter) {
  expect_reference_bits(true, 60);
}

}  // namespace
}  // namespace quire::kernel

#pragma once
// Fusion groups: which launches of Core share one loop nest, and why every
// other value reaches memory (DESIGN.md §4, docs/backends.md#fusion); their
// printout is fusion_print.h.
//
// A *launch* is an instruction that computes on tensor data at run time:
// element-wise operations, reductions, products (dot, contract and their
// reverse-sweep counterparts), data movement (restructuring and its
// cotangents, expand, zeros_like, one_hot) and draws. Parameter reads, tuples,
// parameter trees, constants and host scalars (`real` of a host value: a
// scalar a kernel takes as an argument) are not launches; calls and folds are
// not either: their callees' launches count.
//
// Each function the entry reaches is grouped on its own, statically, walking
// its body from the last instruction back, so that every reader of a value is
// placed before the value is:
//
//   - An element-wise value v joins the group of its readers when every
//     reader is an element-wise instruction of v's shape (the same static
//     tensor axes and `...`), all of them are in that one group, v is not the
//     function's result, and the group holds fewer than kMaxGroupSteps steps.
//     Otherwise v starts a group of its own (a group of one step: "alone").
//   - A product joins the same way, as its group's first step: the group
//     becomes the product's epilogue, run on each result element once the
//     product has summed it. A group takes at most one product; the product's
//     operands are the group's inputs.
//   - Any other launch reaches memory.
//
// A group's *inputs* are the values its steps read that it does not compute:
// arguments, parameters, constants, scalars broadcast into it (an ℝ[] read by
// a group of another shape is an input, never a member) and other launches'
// stored results. Only its root (its last step) is stored.
//
// For every launch whose value reaches memory (a group's root, or a launch in
// no group) one MemoryReason says why, the first that applies of: the
// function's result (itself or inside the tuple or tree it returns); a reader
// that no group can hold with it, the first in body order (a call, a fold, a
// reduction, a product, data movement, a draw, a tuple, an element-wise
// reader of another shape); nothing reads it; its readers are in several
// groups; the reader's group is full; the reader's group already has a
// product; and, for a launch that is not element-wise, that no group holds it
// (its readers would have taken it).
//
// Launch counts are over one call of the entry: each function's launches
// times the number of times the entry evaluates it, calls and fold copies at
// the run's dimensions. A vjp is counted as its Core is written: its forward
// part in full, as `--remat recompute` runs it (`quire run` and `quire train`
// default to `store`, which takes a call's forward values from the forward
// sweep instead; the compiled host program counts either, compile/host_program.h).
//
// Requires: an elaborated program without errors (for a gradient, the entry's
// vjp built by grad::vjp). Keeps: the program unchanged; nothing here depends
// on the realization, the stage before it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "quire/core/program.h"

namespace quire::kernel {

/// The most steps one group holds. A group is one loop nest whose steps stay
/// in registers; past 16 operations a nest's live values outgrow the 16 to 32
/// vector registers of the machines quire targets, and a longer expression
/// saves one stored intermediate at the cost of spilling the rest.
inline constexpr int kMaxGroupSteps = 16;

/// What an instruction does at run time, for fusion.
enum class LaunchKind : uint8_t {
  None,          ///< not a launch: structure, constants, parameter reads, calls, folds
  ElementWise,   ///< one element at a time: fusion's unit (expand among them: a broadcast read)
  Reduction,     ///< sums/maxes over axes (sum_to and gather_grad included)
  Product,       ///< dot, contract, contract_grad_a/b
  DataMovement,  ///< copies: transpose, concat, slice, gather, zeros_like, …
  Draw,          ///< uniform, normal, bernoulli
};
LaunchKind launch_kind(const core::Instr& in);
const char* launch_kind_name(LaunchKind k);  ///< "element-wise", "a reduction", …

/// Whether `in` reads the elements of its operand k: every operand but the
/// second of `expand` (a reduction's cotangent repeated along the axes it
/// removed), whose shape alone it takes. Only element reads count as
/// readers for fusion; the shape's value is still an input of the group.
bool reads_elements(const core::Instr& in, size_t k);

/// Why a value reaches memory: a closed list (docs/backends.md#fusion).
enum class MemoryReason : uint8_t {
  Result,      ///< the function's result, or a part of the tuple or tree it returns
  ReadByCall,  ///< a call reads it
  ReadByFold,  ///< a fold (or fold_vjp) reads it
  ReadByReduction,
  ReadByProduct,   ///< a product reads its operands from memory
  ReadByMovement,  ///< data movement reads it
  ReadByDraw,
  ReadByStructure,  ///< a tuple or parameter tree that the function does not return
  OtherShape,       ///< an element-wise reader of another shape
  Unread,           ///< nothing reads it
  SeveralGroups,    ///< its readers are in more than one group
  SizeLimit,        ///< its reader's group holds kMaxGroupSteps steps
  ProductTaken,     ///< a product: its reader's group is already another product's epilogue
  NotElementWise,   ///< not element-wise, and nothing else stops it: no group holds it
};
/// "result", "read by a call", …: the JSON key.
const char* memory_reason_key(MemoryReason r);

/// One loop nest of element-wise steps, possibly headed by a product.
struct FusionGroup {
  std::vector<int> steps;   ///< member values: a product first, then body order; the last is the root, the one stored
  std::vector<int> inputs;  ///< values read from memory, in the order the steps first read them
  bool epilogue = false;    ///< steps[0] is a product, the rest its epilogue
  int root() const { return steps.back(); }
};

/// A launch whose value reaches memory.
struct StoredValue {
  int value = 0;
  int group = -1;  ///< its group (index into FunctionFusion::groups), -1 for a launch no group holds
  MemoryReason reason = MemoryReason::Result;
  int reader = 0;  ///< the reader the reason names, 0 where it names none
};

struct FunctionFusion {
  int function = -1;
  int lets = 0;            ///< instructions in the body
  int launches = 0;        ///< without fusion
  int fused_launches = 0;  ///< with: one per group, one per launch no group holds
  /// Every group, one-step groups included, by the body order of their roots.
  std::vector<FusionGroup> groups;
  /// By value number: the group holding it, -1 for none.
  std::vector<int> group_of;
  /// In body order.
  std::vector<StoredValue> stored;
  /// How many times one call of the entry evaluates this function; nullopt
  /// when a fold's count is unknown at the run's dimensions.
  std::optional<int64_t> evaluations;

  /// Groups of two steps or more (those printed).
  int fused_groups() const;
};

struct Fusion {
  int entry = -1;
  std::map<std::string, int64_t> dims;
  /// Callees first, the entry last (core::reachable_functions).
  std::vector<FunctionFusion> functions;
  /// Over one call of the entry; nullopt when `unknown` says why not.
  std::optional<int64_t> launches, fused_launches;
  std::string unknown;  ///< "the fold Tower.apply/%4 runs L copies: give --dim L=N"

  const FunctionFusion* find(int function) const;
};

/// Groups every function `entry` reaches and counts their launches over one
/// call of it at `dims` (the run's --dim values; folds are counted where
/// their counts evaluate).
Fusion fuse(const elab::Program& prog, int entry, const std::map<std::string, int64_t>& dims);

}  // namespace quire::kernel

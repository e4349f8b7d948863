#pragma once
// The one walker over Core's structure: a call, a fold, a fold's vjp, a tuple
// and a tuple's element (STYLE.md §12). Every evaluator and analysis of Core
// runs these operations here and supplies only its domain: the reference
// interpreter (interp/), the exact one (exact/), the realizer (realize/), the
// bounds walk (precision/bounds.cpp) and the host program's builder
// (compile/build_host.cpp). Each walks the other operations itself, and
// finishes a structural one as it needs (the bounds walk takes a call's
// magnitudes from the envelope, the realizer records why a site has its type).
//
// What the walk does, for an instruction `in` of a function under `dims`:
//   call        in.callee on the operands, under the callee's dims.
//   fold        copies i = 0 … n−1 of in.callee on (θᵢ, carried), θᵢ copy i
//               of the stacked parameter tree (operand 0), carried starting at
//               operand 1; the value is the last carried.
//   fold_vjp    the fold forward keeping each copy's input, then each copy's
//               vjp (function in.integer) from the last copy back on
//               (θᵢ, inputᵢ, ct), ct starting at operand 2 and threaded
//               through element 2 of each vjp's result; the value is the tuple
//               (carried, ct, the copies' parameter gradients, element 1 of
//               each vjp's result, stacked).
//   tuple, tuple_get   as written.
// Under `--remat store` (a non-null `kept`) a frame keeps the forwards of its
// calls and folds; a vjp call, and a fold_vjp, take the kept forward of the
// call or fold they differentiate instead of evaluating it again.
//
// A domain D supplies:
//   using Value;    its value, copyable
//   using Dims;     what a callee runs under (NoDims where the domain has none)
//   using Forward;  one kept forward evaluation (NoForward where it keeps none)
//   Dims callee_dims(const Instr& in, const Dims& caller);
//       in.callee's dims (a fold_vjp's vjp runs under the same)
//   int64_t copies(const Instr& in, const Dims& caller);
//       the copies of a fold or fold_vjp the walk runs
//   Value evaluate(const Evaluation<Forward>& e, std::vector<Value> args, const Dims& dims);
//       e.function on `args` (one call level deeper than `in`)
//   Value copy_of(const Value& stacked, int64_t i);
//       θᵢ, copy i of a stacked parameter tree
//   Value stack(const Value& stacked, std::vector<Value> grads);
//       a fold_vjp's parameter gradient: grads[i] is copy i's, in `stacked`'s shape
//   Value tuple(std::vector<Value> elements);
//   Value element(const Value& tuple, size_t k);
// a domain that keeps forwards (Forward is not NoForward) also
//   const elab::Program& program() const;
// and a domain may supply
//   bool settled(const Value& before, const Value& after);
//       a fold stops once a copy leaves the carried value as it found it (the
//       realizer's types reach their fixed point; later copies would repeat it)
// Operands are read through `arg(k)` → const Value&, the domain's own view of
// operand k (the bounds walk's is rounded down where its site reads down).

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "quire/core/ir.h"
#include "quire/core/kept_forward.h"
#include "quire/core/program.h"
#include "quire/core/size.h"

namespace quire::core {

/// A domain that keeps no forwards, or whose callees need no dims.
struct NoForward {};
struct NoDims {};

/// Why the walk evaluates a function.
enum class CallRole : uint8_t {
  Call,        ///< a call's callee
  FoldCopy,    ///< copy `copy` of a fold
  VjpForward,  ///< copy `copy` of a fold_vjp's forward (not asked for when a kept forward supplies it)
  VjpCopy,     ///< the vjp of copy `copy`, in a fold_vjp's reverse sweep
};

/// One evaluation the walk asks of its domain.
template <class Forward>
struct Evaluation {
  int function = -1;
  CallRole role = CallRole::Call;
  int64_t copy = 0;
  const Forward* reuse = nullptr;  ///< a vjp: the kept forward whose values its forward instructions take
  Forward* keep = nullptr;         ///< receives this evaluation's forward, for a later reverse sweep
};

/// The dimensions a called function runs under: `run`'s, with the callee's
/// own (a module's dimensions, or inferred size parameters) bound to the
/// instruction's sizes evaluated in the caller's dimensions by `size_at`
/// (→ std::optional<int64_t>; a size without a value leaves its dimension
/// unbound). A call's sizes bind from the first; a fold's and a fold_vjp's
/// from the second (sizes[0] is the count).
template <class SizeAt>
std::map<std::string, int64_t> callee_dims(const Function& callee, const Instr& in,
                                           const std::map<std::string, int64_t>& run, SizeAt&& size_at) {
  std::map<std::string, int64_t> dims = run;
  const size_t first = in.op == Op::Call ? 0 : 1;
  for (size_t k = first; k < in.sizes.size() && k - first < callee.dims.size(); ++k) {
    const std::string& name = callee.dims[k - first];
    if (std::optional<int64_t> v = size_at(in.sizes[k]))
      dims[name] = *v;
    else
      dims.erase(name);
  }
  return dims;
}

template <class D>
using KeptOf = KeptForwards<typename D::Value, typename D::Forward>;

namespace walk_detail {

template <class D>
inline constexpr bool kKeeps = !std::is_same_v<typename D::Forward, NoForward>;

template <class D>
inline constexpr bool kSettles =
    requires(D& d, const typename D::Value& v) { static_cast<bool>(d.settled(v, v)); };

template <class D, class Arg>
typename D::Value call(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims, KeptOf<D>* kept) {
  using Value = typename D::Value;
  const typename D::Dims callee_dims = d.callee_dims(in, dims);
  std::vector<Value> args;
  args.reserve(in.args.size());
  for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(k));
  Evaluation<typename D::Forward> e{in.callee, CallRole::Call};
  if constexpr (kKeeps<D>) {
    if (kept) {
      if (const int primal = d.program().functions.at(static_cast<size_t>(in.callee)).primal; primal >= 0) {
        // A vjp: its operands are the forward call's, then the cotangent.
        const std::vector<int> forward(in.args.begin(), in.args.end() - 1);
        if (auto it = kept->calls.find({primal, forward}); it != kept->calls.end()) e.reuse = &it->second;
        return d.evaluate(e, std::move(args), callee_dims);
      }
      typename D::Forward saved{};
      e.keep = &saved;
      Value result = d.evaluate(e, std::move(args), callee_dims);
      kept->calls[{in.callee, in.args}] = std::move(saved);
      return result;
    }
  }
  return d.evaluate(e, std::move(args), callee_dims);
}

template <class D, class Arg>
typename D::Value fold(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims, KeptOf<D>* kept) {
  using Value = typename D::Value;
  using Fold = typename KeptOf<D>::Fold;
  const typename D::Dims callee_dims = d.callee_dims(in, dims);
  const int64_t copies = d.copies(in, dims);
  const Value& stacked = arg(0);
  Value carried = arg(1);
  std::shared_ptr<Fold> saved = kKeeps<D> && kept ? std::make_shared<Fold>() : nullptr;
  for (int64_t i = 0; i < copies; ++i) {
    Evaluation<typename D::Forward> e{in.callee, CallRole::FoldCopy, i};
    if (saved) {
      saved->inputs.push_back(carried);
      saved->copies.emplace_back();
      e.keep = &saved->copies.back();
    }
    Value next = d.evaluate(e, {d.copy_of(stacked, i), carried}, callee_dims);
    if constexpr (kSettles<D>) {
      const bool fixed = d.settled(carried, next);
      carried = std::move(next);
      if (fixed) break;
    } else {
      carried = std::move(next);
    }
  }
  if (saved) {
    saved->result = carried;
    kept->folds[{in.callee, in.args}] = std::move(saved);
  }
  return carried;
}

template <class D, class Arg>
typename D::Value fold_vjp(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims, KeptOf<D>* kept) {
  using Value = typename D::Value;
  const typename D::Dims callee_dims = d.callee_dims(in, dims);
  const int64_t copies = std::max<int64_t>(d.copies(in, dims), 0);
  const size_t n = static_cast<size_t>(copies);
  const Value& stacked = arg(0);
  std::vector<Value> thetas;
  for (int64_t i = 0; i < copies; ++i) thetas.push_back(d.copy_of(stacked, i));
  const typename KeptOf<D>::Fold* saved = nullptr;
  if (kKeeps<D> && kept)
    if (auto it = kept->folds.find({in.callee, {in.args.at(0), in.args.at(1)}}); it != kept->folds.end())
      saved = it->second.get();
  std::vector<Value> inputs;
  Value carried = arg(1);
  if (saved) {
    inputs = saved->inputs;
    carried = saved->result;
  } else {
    for (int64_t i = 0; i < copies; ++i) {
      inputs.push_back(carried);
      carried = d.evaluate({in.callee, CallRole::VjpForward, i}, {thetas[static_cast<size_t>(i)], carried}, callee_dims);
    }
  }
  Value ct = arg(2);
  std::vector<Value> grads(n);
  for (size_t i = n; i-- > 0;) {
    const Evaluation<typename D::Forward> e{static_cast<int>(in.integer), CallRole::VjpCopy, static_cast<int64_t>(i),
                                            saved ? &saved->copies.at(i) : nullptr};
    Value r = d.evaluate(e, {thetas[i], inputs[i], ct}, callee_dims);
    grads[i] = d.element(r, 1);
    ct = d.element(r, 2);
  }
  Value gradient = d.stack(stacked, std::move(grads));
  return d.tuple({std::move(carried), std::move(ct), std::move(gradient)});
}

}  // namespace walk_detail

/// A tuple or a tuple's element: `in` is MakeTuple or TupleGet.
template <class D, class Arg>
typename D::Value walk_tuple(D& d, const Instr& in, const Arg& arg) {
  if (in.op == Op::TupleGet) return d.element(arg(0), static_cast<size_t>(in.integer));
  if (in.op != Op::MakeTuple)
    throw std::logic_error(fmt::format("internal: `{}` is not a tuple operation", op_info(in.op).spelling));
  std::vector<typename D::Value> elements;
  elements.reserve(in.args.size());
  for (size_t k = 0; k < in.args.size(); ++k) elements.push_back(arg(k));
  return d.tuple(std::move(elements));
}

/// The value of a structural instruction (Call, Fold, FoldVjp, MakeTuple,
/// TupleGet) of a function running under `dims`. `kept`: the frame's kept
/// forwards when it keeps them for a reverse sweep, else null.
template <class D, class Arg>
typename D::Value walk_structural(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims,
                                  KeptOf<D>* kept = nullptr) {
  if (in.op == Op::Call) return walk_detail::call(d, in, arg, dims, kept);
  if (in.op == Op::Fold) return walk_detail::fold(d, in, arg, dims, kept);
  if (in.op == Op::FoldVjp) return walk_detail::fold_vjp(d, in, arg, dims, kept);
  return walk_tuple(d, in, arg);
}

}  // namespace quire::core

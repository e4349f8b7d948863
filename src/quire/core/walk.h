#pragma once
// The one walker over Core's structure (STYLE.md §12): calls, folds, a fold's
// vjp and tuples. The reference and exact interpreters, the realizer, the
// bounds walk, the host program's builder and its executor run these
// operations here and supply only their domain's pieces; each steps through
// the other operations itself, and finishes a structural one as it needs.
//
// For an instruction `in` of a function running under `dims`:
//   call       in.callee on the operands, under the callee's dims.
//   fold       copies i = 0 … n−1 of in.callee on (θᵢ, carried, eᵢ…): θᵢ copy
//              i of the stacked parameter tree (operand 0), carried from
//              operand 1, eᵢ the fold's further operands as copy i sees them
//              (for_copy: a key becomes copy_key(k, i), the rest stay); the
//              value is the last carried.
//   fold_vjp   operands (θ, x, e…, ct): the fold forward keeping each copy's
//              input, then from the last copy back its vjp (VjpOf's function)
//              on (θᵢ, inputᵢ, eᵢ…, ct), ct from the last operand and then
//              each vjp's element 2; the value is (carried, ct, the vjps'
//              elements 1 stacked). The further operands take no cotangent
//              (elaboration admits only keys, booleans, integers and host
//              scalars there).
//   tuple, tuple_get as written.
// `kept` (`--remat store`): a frame keeps its calls' and folds' forwards, and
// a vjp call or a fold_vjp takes the one it differentiates instead of
// evaluating it again.
//
// A domain D supplies (Value copyable; Dims NoDims and Forward NoForward
// where it has none):
//   using Value, Dims, Forward;
//   Dims callee_dims(const Instr& in, const Dims& caller);  // in.callee's, a fold_vjp's vjp's too
//   int64_t copies(const Instr& in, const Dims& caller);    // a fold's copies to run
//   Value evaluate(const Evaluation<Forward>&, std::vector<Value> args, const Dims&);  // one call deeper
//   Value copy_of(const Value& stacked, int64_t i);         // θᵢ
//   Value for_copy(const Value& operand, int64_t i);        // a fold's further operand, as copy i sees it
//   Value stack(const Value& stacked, const std::vector<Value>& grads);  // grads[i]: copy i's
//   Value tuple(std::vector<Value> elements);
//   Value element(const Value& tuple, size_t k);
//   const elab::Program& program() const;                   // only if it keeps forwards
// and may supply
//   bool settled(const Value& before, const Value& after);  // a fold stops at a fixed point
// Operands are read through `arg(k)` → const Value&: the domain's view of
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

struct NoForward {};
struct NoDims {};

/// Why the walk evaluates a function.
enum class CallRole : uint8_t {
  Call,        ///< a call's callee
  FoldCopy,    ///< copy `copy` of a fold
  VjpForward,  ///< copy `copy` of a fold_vjp's forward, evaluated again (not when a kept forward supplies it)
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
/// own (a module's, or inferred size parameters) bound to the instruction's
/// sizes by `size_at` (a size → std::optional<int64_t>, evaluated in the
/// caller's dimensions; nullopt leaves the dimension unbound). A call's sizes
/// bind from the first; a fold's and a fold_vjp's from the second (sizes[0]
/// is the count).
template <class SizeAt>
std::map<std::string, int64_t> callee_dims(const Function& callee, const Instr& in,
                                           const std::map<std::string, int64_t>& run, SizeAt&& size_at) {
  std::map<std::string, int64_t> dims = run;
  const size_t first = in.op == Op::Call ? 0 : 1;
  for (size_t k = first; k < in.sizes.size() && k - first < callee.dims.size(); ++k) {
    if (std::optional<int64_t> v = size_at(in.sizes[k]))
      dims[callee.dims[k - first]] = *v;
    else
      dims.erase(callee.dims[k - first]);
  }
  return dims;
}

template <class D>
using KeptOf = KeptForwards<typename D::Value, typename D::Forward>;

namespace walk_detail {

template <class D>
inline constexpr bool kKeeps = !std::is_same_v<typename D::Forward, NoForward>;
template <class D>
inline constexpr bool kSettles = requires(D& d, const typename D::Value& v) {
  static_cast<bool>(d.settled(v, v));
};

template <class Value, class... Parts>
std::vector<Value> values(Parts&&... parts) {
  std::vector<Value> out;
  out.reserve(sizeof...(Parts));
  (out.push_back(std::forward<Parts>(parts)), ...);
  return out;
}

template <class D, class Arg>
typename D::Value call(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims, KeptOf<D>* kept) {
  const typename D::Dims callee_dims = d.callee_dims(in, dims);
  std::vector<typename D::Value> args;
  args.reserve(in.args.size());
  for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(k));
  Evaluation<typename D::Forward> e{in.callee};
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
      typename D::Value result = d.evaluate(e, std::move(args), callee_dims);
      kept->calls[{in.callee, in.args}] = std::move(saved);
      return result;
    }
  }
  return d.evaluate(e, std::move(args), callee_dims);
}

/// The operands of copy i of a fold (or of its vjp): θᵢ, the carried value,
/// the fold's further operands `first` … `last` − 1 as copy i sees them, then
/// the cotangent if given.
template <class D, class Arg>
std::vector<typename D::Value> copy_operands(D& d, const Arg& arg, size_t first, size_t last, int64_t i,
                                             typename D::Value theta, typename D::Value carried,
                                             std::optional<typename D::Value> ct = std::nullopt) {
  std::vector<typename D::Value> out;
  out.reserve(last - first + 3);
  out.push_back(std::move(theta));
  out.push_back(std::move(carried));
  for (size_t k = first; k < last; ++k) out.push_back(d.for_copy(arg(k), i));
  if (ct) out.push_back(std::move(*ct));
  return out;
}

template <class D, class Arg>
typename D::Value fold(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims, KeptOf<D>* kept) {
  using Value = typename D::Value;
  const typename D::Dims callee_dims = d.callee_dims(in, dims);
  const int64_t copies = d.copies(in, dims);
  const Value& stacked = arg(0);
  Value carried = arg(1);
  const size_t operands = in.args.size();
  auto saved = kKeeps<D> && kept ? std::make_shared<typename KeptOf<D>::Fold>() : nullptr;
  for (int64_t i = 0; i < copies; ++i) {
    Evaluation<typename D::Forward> e{in.callee, CallRole::FoldCopy, i};
    if (saved) {
      saved->inputs.push_back(carried);
      saved->copies.emplace_back();
      e.keep = &saved->copies.back();
    }
    if constexpr (kSettles<D>) {
      Value next = d.evaluate(e, copy_operands(d, arg, 2, operands, i, d.copy_of(stacked, i), carried), callee_dims);
      const bool fixed = d.settled(carried, next);
      carried = std::move(next);
      if (fixed) break;
    } else {
      carried =
          d.evaluate(e, copy_operands(d, arg, 2, operands, i, d.copy_of(stacked, i), std::move(carried)), callee_dims);
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
  const size_t copies = static_cast<size_t>(std::max<int64_t>(d.copies(in, dims), 0));
  const Value& stacked = arg(0);
  std::vector<Value> thetas;
  for (size_t i = 0; i < copies; ++i) thetas.push_back(d.copy_of(stacked, static_cast<int64_t>(i)));
  // Operands: θ, x, the further operands, the cotangent last.
  const size_t last = in.args.size() - 1;
  const typename KeptOf<D>::Fold* saved = nullptr;
  if (kKeeps<D> && kept)
    if (auto it = kept->folds.find({in.callee, std::vector<int>(in.args.begin(), in.args.end() - 1)});
        it != kept->folds.end())
      saved = it->second.get();
  std::vector<Value> inputs;
  Value carried = arg(1);
  if (saved) {
    inputs = saved->inputs;
    carried = saved->result;
  } else {
    for (size_t i = 0; i < copies; ++i) {
      inputs.push_back(carried);
      const auto copy = static_cast<int64_t>(i);
      carried = d.evaluate({in.callee, CallRole::VjpForward, copy},
                           copy_operands(d, arg, 2, last, copy, thetas[i], std::move(carried)), callee_dims);
    }
  }
  Value ct = arg(last);
  std::vector<Value> grads(copies);
  for (size_t i = copies; i-- > 0;) {
    const auto copy = static_cast<int64_t>(i);
    Value r = d.evaluate({in.attr<attr::VjpOf>().function, CallRole::VjpCopy, copy, saved ? &saved->copies.at(i) : nullptr},
                         copy_operands(d, arg, 2, last, copy, thetas[i], std::move(inputs[i]), std::move(ct)),
                         callee_dims);
    grads[i] = d.element(r, 1);
    ct = d.element(r, 2);
  }
  Value gradient = d.stack(stacked, grads);
  return d.tuple(values<Value>(std::move(carried), std::move(ct), std::move(gradient)));
}

}  // namespace walk_detail

/// A tuple or a tuple's element: `in` is MakeTuple or TupleGet.
template <class D, class Arg>
typename D::Value walk_tuple(D& d, const Instr& in, const Arg& arg) {
  if (in.op == Op::TupleGet) return d.element(arg(0), static_cast<size_t>(in.attr<attr::Element>().index));
  if (in.op != Op::MakeTuple)
    throw std::logic_error(fmt::format("internal: `{}` is not a tuple operation", op_info(in.op).spelling));
  std::vector<typename D::Value> elements;
  elements.reserve(in.args.size());
  for (size_t k = 0; k < in.args.size(); ++k) elements.push_back(arg(k));
  return d.tuple(std::move(elements));
}

/// The value of a Call, Fold, FoldVjp, MakeTuple or TupleGet of a function
/// running under `dims`; `kept`: the frame's kept forwards, or null.
template <class D, class Arg>
typename D::Value walk_structural(D& d, const Instr& in, const Arg& arg, const typename D::Dims& dims,
                                  KeptOf<D>* kept = nullptr) {
  if (in.op == Op::Call) return walk_detail::call(d, in, arg, dims, kept);
  if (in.op == Op::Fold) return walk_detail::fold(d, in, arg, dims, kept);
  if (in.op == Op::FoldVjp) return walk_detail::fold_vjp(d, in, arg, dims, kept);
  return walk_tuple(d, in, arg);
}

}  // namespace quire::core

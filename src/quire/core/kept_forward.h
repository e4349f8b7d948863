#pragma once
// The forward evaluations a frame keeps for its reverse sweep (`--remat
// store`), keyed by the call that computed them: (callee, operand value
// numbers). A vjp's forward instructions are its primal's, one for one, each
// under its own number (one more argument, the cotangent, shifts them), so a
// vjp that reuses a kept forward looks its callees' kept forwards up under its
// own numbers (for_vjp). The Core walker (core/walk.h) fills and reads them
// for the reference interpreter and the host program's builder; the executor
// (compile/executor.h) keeps its run's forwards in them too.

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "quire/core/ir.h"

namespace quire::core {

/// A kept forward's key: the callee and its operands' value numbers.
using KeptKey = std::pair<int, std::vector<int>>;

/// A frame's kept forwards. `Forward` is one kept evaluation of a function
/// (the interpreter's saved values, the builder's instance number).
template <class Value, class Forward>
struct KeptForwards {
  /// A fold's forward: each copy's input and kept evaluation, and its result.
  struct Fold {
    std::vector<Value> inputs;
    std::vector<Forward> copies;
    Value result;
  };
  std::map<KeptKey, Forward> calls;
  std::map<KeptKey, std::shared_ptr<const Fold>> folds;

  /// These forwards, kept by a frame of `primal`, keyed in `vjp`'s numbering,
  /// where the vjp's calls and folds look them up.
  KeptForwards for_vjp(const Function& primal, const Function& vjp) const {
    std::map<int, int> to_vjp;  // the primal's instruction values → the vjp's; the arguments keep theirs
    for (size_t k = 0; k < primal.body.size() && k < vjp.body.size(); ++k) to_vjp[primal.body[k].id] = vjp.body[k].id;
    auto renumbered = [&](KeptKey key) {
      for (int& a : key.second)
        if (auto it = to_vjp.find(a); it != to_vjp.end()) a = it->second;
      return key;
    };
    KeptForwards out;
    for (const auto& [key, forward] : calls) out.calls.emplace(renumbered(key), forward);
    for (const auto& [key, fold] : folds) out.folds.emplace(renumbered(key), fold);
    return out;
  }
};

}  // namespace quire::core

#pragma once
// The forward values a frame keeps for its reverse sweep (`--remat store`)
// are keyed by the call that computed them: (callee, operand value numbers).
// A vjp's forward instructions are its primal's, one for one, each under its
// own number (one more argument, the cotangent, shifts them), so a vjp that
// reuses a kept forward looks its callees' kept forwards up under its own
// numbers. The reference interpreter, the host program's walk
// (compile/build_host.cpp) and the executor (compile/executor.h) all
// renumber them here.

#include <map>
#include <utility>
#include <vector>

#include "quire/core/ir.h"

namespace quire::interp {

/// A kept forward's key: the callee and its operands' value numbers.
using KeptKey = std::pair<int, std::vector<int>>;

/// The primal's instruction values mapped to the vjp's (the arguments keep theirs).
inline std::map<int, int> vjp_numbers(const core::Function& primal, const core::Function& vjp) {
  std::map<int, int> to_vjp;
  for (size_t k = 0; k < primal.body.size() && k < vjp.body.size(); ++k) to_vjp[primal.body[k].id] = vjp.body[k].id;
  return to_vjp;
}

/// `kept` with every key's operands in the vjp's numbering, added to `out`.
template <class T>
void renumber_into(const std::map<KeptKey, T>& kept, const std::map<int, int>& to_vjp, std::map<KeptKey, T>& out) {
  for (const auto& [key, saved] : kept) {
    std::vector<int> operands = key.second;
    for (int& a : operands)
      if (auto it = to_vjp.find(a); it != to_vjp.end()) a = it->second;
    out.emplace(KeptKey{key.first, std::move(operands)}, saved);
  }
}

}  // namespace quire::interp

#pragma once
// The orthogonalization of Muon's updates: the prelude's `newton_schulz` and
// `newton_schulz_tall` (prelude/optim.qr), evaluated by quire itself, so that
// what the iteration computes is stated once, in the prelude's lines, and
// `quire run` on those functions gives the optimizer's bits.
//
// A generic function is not an entry, so this elaborates a small program of
// its own that calls them at the concrete sizes `dim L R C`:
//
//   fn wide(g : ℝ[copies: L, i: R, j: C]) -> … = newton_schulz(g, a, b, c, eps)
//   fn tall(g : ℝ[copies: L, i: R, j: C]) -> … = newton_schulz_tall(g, a, b, c, eps)
//
// (the coefficients and eps written as literals that read back as the same
// doubles), and realizes each call under the policy of the run's master type
// (f64 for an f64 master, f32 otherwise): the iteration is a bf16 region under
// either, its islands f32 under f32 and f64 under f64. Each (function, L, R,
// C, master) is compiled once, the first time it is asked for, and run by the
// executor on the backend given (Interp: the reference interpreter itself);
// every backend gives the reference interpreter's bits.
//
// Requires: g of shape [L, R, C] (L matrices of R rows and C columns, L ≥ 1).
// Keeps: the result's values f32 numbers (held as doubles).

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "quire/core/program.h"
#include "quire/kernel/engine.h"
#include "quire/runtime/float_types.h"
#include "quire/runtime/tensor.h"

namespace quire::train {

/// The iteration's settings: PyTorch's ns_coefficients (a, b, c) and eps.
/// (Its five steps are written out in the prelude.)
struct NewtonSchulzSettings {
  double a = 3.4445;
  double b = -4.7750;
  double c = 2.0315;
  double eps = 1e-7;
};

/// Which of the prelude's two forms to evaluate.
enum class NewtonSchulzForm {
  Wide,  ///< newton_schulz: Gram matrices over the rows (R × R)
  Tall,  ///< newton_schulz_tall: on the transposes (Gram matrices C × C)
};

class NewtonSchulz {
 public:
  /// Elaborates the calling program (std::logic_error if the prelude does not
  /// elaborate it cleanly: an internal error, never a user's).
  explicit NewtonSchulz(NewtonSchulzSettings settings, kernel::Backend backend = kernel::Backend::Interp,
                        int threads = 1);
  ~NewtonSchulz();
  NewtonSchulz(const NewtonSchulz&) = delete;
  NewtonSchulz& operator=(const NewtonSchulz&) = delete;

  /// The orthogonalized matrices of g : [L, R, C], same shape, f32 values.
  runtime::Tensor operator()(NewtonSchulzForm form, const runtime::Tensor& g, runtime::FloatType master);

  /// The source of the calling program (for tests and messages).
  const std::string& source() const { return source_; }

 private:
  struct Compiled;
  using Key = std::tuple<NewtonSchulzForm, int64_t, int64_t, int64_t, runtime::FloatType>;

  std::string source_;
  std::unique_ptr<elab::Program> prog_;
  kernel::Backend backend_;
  int threads_;
  std::map<Key, std::unique_ptr<Compiled>> compiled_;
};

}  // namespace quire::train

#pragma once
// Library kernels: prelude functions whose whole body runs as one fused
// runtime kernel that gives exactly the bits of its lines. Today the
// prelude's `attention`, `causal_attention` and `causal_self_attention` and
// their vjps, under f32 sites with `--product-step fma` (runtime/attention.h):
// one pass over blocks of query rows each way, the T × S scores never stored,
// the keys a causal mask hides never computed, the heads of a fused qkv read
// and written in place, the dropout's draws made where they are used; and
// `layer_norm` and `dropout_add_layer_norm` (the dropout, the residual add and
// the norm of the sum) and their vjps, one pass over the rows each way
// (runtime/layer_norm.h).
//
// The host program (build_host.h) runs an instance of such a function as one
// HostStep::Kind::Library step when the compile asks for library kernels
// (CompileRequest::library_kernels) and every site the kernel stands for,
// the callees' included, is f32 with fused product steps; otherwise it runs
// the lines, and says why not (HostFunction::library_why_not).

#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quire/interp/interpreter.h"
#include "quire/realize/realization.h"
#include "quire/runtime/attention.h"

namespace quire::compile {

enum class LibraryKernel : uint8_t {
  None,
  Attention,               ///< attention(q, k, v)
  CausalAttention,         ///< causal_attention(q, k, v)
  AttentionVjp,            ///< attention.vjp(q, k, v, ct) → (out, dq, dk, dv)
  CausalAttentionVjp,      ///< causal_attention.vjp(q, k, v, ct)
  CausalSelfAttention,     ///< causal_self_attention(qkv, heads, p, k): GPT-2's fused qkv, dropout on the weights
  CausalSelfAttentionVjp,  ///< causal_self_attention.vjp(qkv, heads, p, k, ct) → (out, dqkv)
  LayerNorm,               ///< layer_norm(x, γ, β, eps) (runtime/layer_norm.h)
  LayerNormVjp,            ///< layer_norm.vjp(x, γ, β, eps, ct) → (y, dx, dγ, dβ)
  DropoutAddLayerNorm,     ///< dropout_add_layer_norm(k, y, p, x, γ, β, eps) → (s, n)
  DropoutAddLayerNormVjp,  ///< dropout_add_layer_norm.vjp(…, (ct_s, ct_n)) → ((s, n), dy, dx, dγ, dβ)
};
/// The function's name: "attention", "causal_attention.vjp", … ("none").
const char* library_kernel_name(LibraryKernel k);

struct LibraryChoice {
  LibraryKernel kernel = LibraryKernel::None;
  /// For a library function that runs its lines: why ("" otherwise).
  std::string why_not;
};

/// The library kernel of `function` (a prelude function or its vjp), or None.
LibraryKernel library_kernel_of(const elab::Program& prog, int function);

/// Why the realization's types keep `function` from its library kernel ("":
/// they do not): every table of it, of its vjp and of their callees must be
/// f32 with fused product steps.
std::string library_types_block(const elab::Program& prog, int function, const precision::Realization* r);

/// A realized table of a function that has a library kernel, and why the
/// types keep it from the kernel ("": they do not).
struct LibraryVerdict {
  const precision::FunctionRealization* table = nullptr;
  std::string why_not;
};
/// Every such table the realization holds, in its order.
std::vector<LibraryVerdict> library_plan(const elab::Program& prog, const precision::Realization& r);

/// A `layer_norm(x + dropout(k, y, p), …)` written out in a program's own
/// function: three passes each way (the dropout, the add and the norm) where
/// `dropout_add_layer_norm` would run one. `value` is the layer_norm call's.
struct ResidualNormHint {
  int function = -1;
  int value = 0;
};
inline constexpr const char* kResidualNormHint =
    "layer_norm(x + dropout(k, y, p), γ, β) runs the dropout, the add and the norm apart; "
    "`let (s, n) = dropout_add_layer_norm(k, y, p, x, γ, β)` runs them as one pass each way";
/// Every such call in the realized functions outside the prelude, in order.
std::vector<ResidualNormHint> residual_norm_hints(const elab::Program& prog, const precision::Realization& r);

/// `quire dump --stage realize`'s remarks on library_plan: each table with
/// the kernel or why its lines run, then each residual norm hint ("" when
/// there is neither); and the same as JSON (an array, possibly empty).
std::string print_library_plan(const elab::Program& prog, const precision::Realization& r);
nlohmann::ordered_json library_plan_json(const elab::Program& prog, const precision::Realization& r);

/// Whether an instance of `function` on `args` (kinds, types and shapes
/// only) under `table` runs as a library kernel. `r` is the whole
/// realization (its callees' tables are checked too).
LibraryChoice choose_library_kernel(const elab::Program& prog, int function, const std::vector<interp::Value>& args,
                                    const precision::FunctionRealization* table, const precision::Realization* r);

/// An attention kernel's shape on arguments of these shapes (q, k, v first;
/// qkv and heads for causal_self_attention).
runtime::AttentionShape library_attention_shape(LibraryKernel k, const std::vector<runtime::Shape>& args);

/// What one launch computes, for the listing: "8 heads, T = 70, …" or "512 rows of 64".
std::string library_launch_text(LibraryKernel k, const std::vector<runtime::Shape>& args);

/// The shapes of what the kernel returns, flattened: the forward's result,
/// or the vjp's (out, dq, dk, dv), or (out, dqkv), or (s, n, dy, dx, dγ, dβ).
/// Every one is f32.
std::vector<runtime::Shape> library_result_shapes(LibraryKernel k, const std::vector<runtime::Shape>& args);

/// How many of library_result_shapes' first shapes the function itself
/// returns: 2 for dropout_add_layer_norm's (s, n), 1 otherwise.
size_t library_result_leaves(LibraryKernel k);

/// The kernel's result as its function returns it, from its parts in
/// library_result_shapes' order: the function's own result (a tuple where it
/// has several parts), then for a vjp each cotangent, together a tuple.
/// `tuple` makes a tuple of V.
template <typename V, typename Tuple>
V library_result(LibraryKernel k, std::vector<V> parts, const Tuple& tuple) {
  const size_t own = library_result_leaves(k);
  if (own > 1) {
    std::vector<V> first(std::make_move_iterator(parts.begin()), std::make_move_iterator(parts.begin() + own));
    parts.erase(parts.begin(), parts.begin() + own);
    parts.insert(parts.begin(), tuple(std::move(first)));
  }
  return parts.size() == 1 ? std::move(parts[0]) : tuple(std::move(parts));
}

/// Runs the kernel on `args` (its function's: f32 tensors, and for
/// causal_self_attention the heads, p and the key) on at most `threads` threads.
interp::Value run_library_kernel(LibraryKernel k, const std::vector<const interp::Value*>& args, int threads);

/// Bytes the kernel holds while it runs beyond its result (its block scratch).
int64_t library_scratch_bytes(LibraryKernel k, const std::vector<runtime::Shape>& args, int threads);

}  // namespace quire::compile

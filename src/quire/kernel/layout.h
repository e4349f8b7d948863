#pragma once
// The layout plan: for each kernel, the points of its layout space, each
// point's predicted time under a machine profile's cost model, and the point
// taken (docs/backends.md#the-layout-plan).
//
// A layout is how a nest runs, never what it computes: vector lanes on one of
// its independent loops (each lane one iteration, so every element is
// computed by the same operations in the same order), a split of its
// split loop (kernel_ir.h) over worker threads, and for a product that can
// be packed (kernel_ir.h, PackedProduct: an f32 `--product-step fma` site),
// whether it runs as a packed matrix multiply (register tiles, k-blocks,
// packed panels) ahead of the nest. Each C element is still its one chain
// in increasing k, so any point gives the kernel interpreter's bits; the
// plan only chooses speed.
//
// The cost model, with the profile's fitted constants (machine/profile.h):
//
//   launch = λ                                   what any launch costs
//   spawn  = spawn_seconds if split > 1          waking the workers
//   fresh  = output bytes · fresh_seconds        the output's allocation, before the launch
//   work   = ops · op_seconds / lanes' / split   lanes' = lane_speedup if vectorized, else 1
//   loads  = (elements moved − gathered) · load_seconds / lanes' / split + gathered · load_seconds / split
//   calls  = library calls · call_seconds / split  (exp, log, tanh, erf, pow: scalar calls, never vectorized)
//   traffic = (bytes + strided loads from buffers beyond L1 · line / lanes) / bandwidth of the level the working set
//   fits in:
//             L2 (per core: divided by split), L3 or memory (shared: not divided)
//   product = 2·batch·m·n′·k / (packed_flops · split)  a packed point's product (n′: n in whole tiles),
//             at the rate calibration measured (and one more spawn when split)
//   time = launch + spawn + fresh + product + ‖(work, loads, calls, traffic)‖_p
//   and a split point takes the unsplit point's terms where those are less
//   (bound by spawn): the caller runs every part itself when the workers
//   come late
//
// Requires: a profile with a layout model (version 2). Keeps: deterministic
// plans: the same kernel and profile give the same layout.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "quire/kernel/kernel_ir.h"
#include "quire/machine/profile.h"

namespace quire::kernel {

/// What the cost model reads off a kernel.
struct NestFacts {
  int64_t ops = 0;          ///< floating-point operations (kernel_flops)
  int64_t moved = 0;        ///< elements loaded and stored, counted per access (a load repeated in one loop body once: a register holds it)
  int64_t bytes = 0;        ///< distinct bytes read and written (its buffers, 8 a real element as held)
  /// Loads stepping by more than one element along their innermost loop:
  /// (the buffer's bytes, how many), per buffer read so.
  std::vector<std::pair<int64_t, int64_t>> strided;
  /// Loads stepping by more than one element along the innermost independent
  /// loop, where lanes go: each lane loads its own element (a gather).
  int64_t gathered = 0;
  int64_t calls = 0;        ///< evaluations of a library function (exp, log, tanh, erf, pow and those built on them)
  int64_t fresh = 0;        ///< bytes of the output, allocated for each launch
  int64_t split_extent = 0;   ///< iterations of the split loop (0: none)
  std::vector<int64_t> independent;  ///< extents of the nested independent loops, outermost first
};
NestFacts nest_facts(const Kernel& k);

struct Layout {
  int lanes = 1;  ///< vector lanes on the innermost independent loop (1: scalar)
  int split = 1;  ///< threads dividing the split loop (1: none), and a packed product's rows
  bool pack = false;  ///< the product runs packed ahead of the nest (the packed variant of the kernel)
  bool swap = false;  ///< a fold nest's two innermost independent loops interchanged: order JI (nest_order.h)
  int tile = 1;       ///< iterations of the outer of those loops computed together (nest_order.h; 1: none)
  bool operator==(const Layout&) const = default;
};
/// "lanes 8, split 2" / "lanes 1, split none" / "packed product, lanes 8, split 2" /
/// "tile 4, order JI, lanes 8, split none"
std::string layout_text(const Layout& l);

struct CostTerms {
  double launch = 0, spawn = 0, fresh = 0, product = 0, work = 0, loads = 0, calls = 0, l2 = 0, l3 = 0, mem = 0;
  double total = 0;
  const char* bound_by = "";  ///< the largest term's name
};
/// `product_flops`: a packed point's product (2·batch·m·n·k; 0 otherwise).
CostTerms predict(const NestFacts& f, const Layout& l, const machine::Profile& p, double product_flops = 0);

/// Every point of a kernel's space: lanes 1 and the profile's vector lanes
/// (vector_bytes / 8, the lanes of the f64 elements a kernel holds) where one
/// of its nested independent loops is at least that long; split none and
/// 2 … cores where it has a split loop at least that long.
std::vector<Layout> layout_space(const NestFacts& f, const machine::Profile& p);

struct RankedLayout {
  Layout layout;
  CostTerms cost;
};
struct KernelPlan {
  NestFacts facts;
  std::optional<NestFacts> packed_facts;  ///< of the packed variant, when it was offered
  std::vector<RankedLayout> ranked;  ///< every point, fastest first (ties: fewer lanes, then less split)
  int undecided = 0;                 ///< points within 1 + u of the best
  const Layout& chosen() const { return ranked.front().layout; }
};
/// Plans `k` under `p`, at most `threads` threads; with `packed` (the same
/// launch with its product packed, lower.h) its points join the space, where
/// the profile has measured a packed product's rate. A fold nest
/// (nest_order.h) also offers each loop order and tile, each costed on the
/// facts of its own reordered nest. std::invalid_argument
/// when the profile has no layout model.
KernelPlan plan_kernel(const Kernel& k, const machine::Profile& p, int threads, const Kernel* packed = nullptr);

/// The columns of sgemm's register tile on the machine `profile` describes,
/// by its widest vector register: 32 for 64 bytes (AVX-512), 16 for 32
/// (AVX2), 12 for 16 on aarch64 (NEON), else 1 (runtime/gemm.h).
int64_t product_tile_columns(const machine::Profile& profile);

/// 2·batch·m·n′·k: the floating-point operations the packed product
/// performs on the profile's machine, n′ being n rounded up to its register
/// tile (product_tile_columns).
double packed_flops(const PackedProduct& p, const machine::Profile& profile);

/// The kernel with its layout: its loops reordered and tiled
/// (nest_order.h), lanes marked on its innermost independent loop, the
/// split recorded (Kernel::split). A packed layout applies to the
/// packed variant, which the caller runs in place of the plain kernel.
void apply_layout(Kernel& k, const Layout& l);

/// The loop `lanes` vector lanes apply to: the innermost of the kernel's
/// nested independent loops that has at least `lanes` iterations (an inner
/// loop too short to fill the lanes gives way to the one around it), or
/// nullptr.
Stmt* lane_loop(Kernel& k, int lanes);

}  // namespace quire::kernel

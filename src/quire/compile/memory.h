#pragma once
// memory: what one call of an entry needs, counted from its compiled program
// (compile.h) at its dimensions and realized types, never a process's
// resident size (`quire memory`, docs/memory.md).
//
// The count walks the host program as the executor (executor.h) runs it,
// without running anything: a frame holds a value from the step that stores
// it to its last reader (HostBuffer::first_write, last_read), at its
// buffer's bytes; a call's frame sits on top of its caller's live values; a
// fold runs its copies one after the other; under `--remat store` a kept
// frame (the forward of a callee or a fold copy that a reverse sweep will
// reuse) releases nothing, and its values stay live until the frame that
// kept it returns. The entry's arguments, which its caller holds, are
// counted apart (the inputs).
//
// What counts 0: a parameter tree (θ, a fold copy's slice of it, a
// gradient tree: HostBuffer::bytes is a tensor's alone), a tuple (its
// elements count in their own slots while those are held), a key, a host
// scalar, the carried value of a fold between two copies (it is then an
// argument of the next copy's frame). Requires: the program the compiled
// program was built from. memory_test.cpp holds the count equal to the
// executor's measurement (EvalStats::live_bytes_peak).

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/compile/memory_placement.h"

namespace quire::compile {

/// One frame on the way down to the peak, outermost first.
struct PeakFrame {
  int instance = -1;  ///< the host program's instance
  int step = -1;      ///< the step it was running (the peak's own step, for the innermost)
  int64_t copy = -1;  ///< for a fold's (or fold vjp's) copy: its iteration; -1 otherwise
  bool reverse = false;  ///< a fold vjp's copy of the reverse sweep (else its forward, or a fold's)
  int64_t bytes = 0;     ///< what this frame and those above it hold at the peak: its share
};

/// One instance of the host program, as the call runs it.
struct InstanceMemory {
  int instance = -1;
  int depth = 0;             ///< in the call tree, where the walk first reaches it (the entry 0)
  int64_t runs = 0;          ///< frames of it one call runs
  int64_t share = 0;         ///< what its frame holds at the peak, its callees' frames included (0 when not running)
  int64_t own_peak = 0;      ///< the most any frame of it holds while it runs, its callees' included
};

/// A value live at the peak, in a frame that is running then.
struct LiveValue {
  int instance = -1;
  int value = 0;  ///< in the instance's function
  int64_t bytes = 0;
};

/// A stored value's place in the arena (memory_placement.h).
struct PlacedValue {
  int instance = -1;
  int value = 0;
  Lifetime life;
  int64_t offset = 0;
};

struct CallMemory {
  int64_t parameter_bytes = 0;  ///< every parameter at its stored type
  int64_t parameter_elements = 0;
  /// By stored type: elements and bytes.
  std::map<runtime::FloatType, std::pair<int64_t, int64_t>> parameters_by_type;
  int64_t input_bytes = 0;   ///< the entry's arguments as compiled, the parameters among them
  int64_t output_bytes = 0;  ///< the result's tensors (a parameter tree's leaves not counted)
  int64_t peak_bytes = 0;    ///< the most bytes live at once, the inputs apart
  int64_t kept_at_peak = 0;  ///< of which, the values of kept forwards (`--remat store`)
  std::vector<PeakFrame> peak_at;  ///< where the peak first occurs, the entry's frame first; empty when 0
  int peak_value = -1;             ///< the value stored at the peak (in the innermost frame's function)
  /// The largest values live at the peak in running frames, largest first
  /// (at most kLargestAtPeak; a kept frame's values are in kept_at_peak).
  std::vector<LiveValue> largest_at_peak;
  /// The arena: every stored value at a fixed offset for its life, in store
  /// order, and the arena's size (at least the peak; memory_placement.h).
  std::vector<PlacedValue> placed;
  int64_t arena_bytes = 0;
  /// The arena `quire export --target c` allocates for this call (filled by
  /// the command, which can ask the export; export/c_export.h's c_arena):
  /// its bytes, the most bytes live at once in it, its allocations; or why
  /// there is none. Unset: not asked.
  struct CExportArena {
    int64_t bytes = 0;
    int64_t peak = 0;
    int64_t allocations = 0;
    std::string unavailable;
  };
  std::optional<CExportArena> c_export;
  std::vector<InstanceMemory> instances;  ///< in call-tree order, the entry's first
  int64_t steps = 0;                      ///< host steps the call runs, its callees' included
};

/// How many of the values live at the peak CallMemory names.
inline constexpr size_t kLargestAtPeak = 5;

/// Counts one call of `compiled`'s entry (`prog`: the program it was compiled from).
CallMemory count_call_memory(const elab::Program& prog, const CompiledProgram& compiled);

/// A call or a step refused by `--memory-limit` before it runs; what() is
/// memory_limit_refusal's text.
struct MemoryLimitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `--memory-limit`: the reason a call that needs more than `limit` bytes
/// (its inputs and its peak) is refused, with the figures and the largest
/// values live at the peak, each a site; nullopt when it fits. `what` names
/// the call ("one call of `loss`", "the step's vjp"); `extra` bytes (an
/// optimizer's state) are added to the need, described by `extra_what`.
std::optional<std::string> memory_limit_refusal(const elab::Program& prog, const CompiledProgram& compiled,
                                                const CallMemory& m, int64_t limit, const std::string& what,
                                                int64_t extra = 0, const std::string& extra_what = "");

/// `quire memory`'s printout and its JSON form (`label` names the realization: `f32`, `@r.json`).
std::string print_call_memory(const elab::Program& prog, const CompiledProgram& compiled, const CallMemory& m,
                              const std::string& label);
nlohmann::ordered_json call_memory_json(const elab::Program& prog, const CompiledProgram& compiled,
                                        const CallMemory& m, const std::string& label);

}  // namespace quire::compile

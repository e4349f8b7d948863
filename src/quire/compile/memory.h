#pragma once
// memory: what one call of an entry needs, counted from its compiled program
// (compile.h) at its dimensions and realized types, never a process's
// resident size (`quire memory`, docs/memory.md).
//
// The count replays the executor (executor.h) on the host program without
// computing anything (memory_count.cpp): the same frames, in the same order,
// through the same Core walker (core/walk.h), holding for each value where
// its elements live instead of the elements. A step that makes new elements
// (a kernel's result, a constant, a parameter read rounded to a half type, a
// gradient leaf summed from several parts) allocates a block; a step that
// reads elements where they are (a parameter read, a tuple's element, a
// tuple, a gradient leaf of one part, a split) shares its operand's. A block
// is live from its allocation until its last holder lets go of it: a frame's
// slot after the value's last reader (HostBuffer::last_read), a fold's
// reverse sweep once it has used a copy's input, a kept forward (`--remat
// store`) when the frame that kept it returns. So the count sees what the
// allocator sees: a tuple keeps its elements, a fold's vjp holds every
// copy's input until the sweep reaches it and every copy's gradient until
// they are stacked, and storage two values share counts once.
//
// The entry's arguments, which its caller holds, are counted apart (the
// inputs). memory_allocation_test.cpp holds the count equal to every
// allocation a run of the native backend makes (runtime/allocation_log.h).
// Requires: the program the compiled program was built from.

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

/// A block of elements live at the peak, named by the step that allocated it.
struct LiveValue {
  int instance = -1;
  int value = 0;     ///< in the instance's function
  std::string leaf;  ///< a parameter tree's leaf the step made (a gradient's), "" for a tensor
  int64_t bytes = 0;
};

/// A block's place in the arena (memory_placement.h).
struct PlacedValue {
  int instance = -1;
  int value = 0;
  std::string leaf;
  Lifetime life;
  int64_t offset = 0;
};

struct CallMemory {
  int64_t parameter_bytes = 0;  ///< every parameter at its stored type
  int64_t parameter_elements = 0;
  /// By stored type: elements and bytes.
  std::map<runtime::FloatType, std::pair<int64_t, int64_t>> parameters_by_type;
  int64_t input_bytes = 0;   ///< the entry's arguments as compiled, the parameters among them
  int64_t output_bytes = 0;  ///< the blocks the result holds (a gradient tree's leaves among them)
  int64_t peak_bytes = 0;    ///< the most bytes live at once, the inputs apart
  int64_t kept_at_peak = 0;  ///< of which, blocks made by kept forwards (`--remat store`)
  /// Of the peak, the blocks the result holds when the call returns: for a
  /// vjp, the gradient made so far.
  int64_t output_at_peak = 0;
  std::vector<PeakFrame> peak_at;  ///< where the peak first occurs, the entry's frame first; empty when 0
  int peak_value = -1;             ///< the value whose block was allocated at the peak (in the innermost frame's function)
  std::string peak_leaf;           ///< the block's leaf, for a parameter tree's (a gradient's); "" otherwise
  /// The largest blocks live at the peak, largest first (at most
  /// kLargestAtPeak; the first allocated on ties).
  std::vector<LiveValue> largest_at_peak;
  /// The arena: every block at a fixed offset for its life, in allocation
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

/// How many of the blocks live at the peak CallMemory names.
inline constexpr size_t kLargestAtPeak = 5;

/// The bytes the count gives an element.
enum class Widths : uint8_t {
  /// At the realized types: a real at its storage type (bf16 2 bytes), an
  /// i32 4, an i64 8, a boolean 1. What `quire memory` prints.
  Stored,
  /// As the native backend holds them: a real in f64 (8) or, for every
  /// narrower type, f32 (4); an integer or boolean tensor 8 (its elements
  /// are int64_t, runtime/tensor.h).
  Native,
};

struct CountOptions {
  Widths widths = Widths::Stored;
  /// false: integer and boolean tensors count 0 (the allocation log sees
  /// real elements alone).
  bool integers = true;
};

/// Counts one call of `compiled`'s entry (`prog`: the program it was compiled from).
CallMemory count_call_memory(const elab::Program& prog, const CompiledProgram& compiled, CountOptions options = {});

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

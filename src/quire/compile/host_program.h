#pragma once
// The host program: what one call of an entry does, as a value built before
// anything runs (compile.h builds it; docs/architecture.md).
//
// It is a list of function instances. An instance is one function as one
// call evaluates it: its realization table (the argument types it is called
// with and the numerics form around the call), the run-time shapes of its
// arguments, and how its frame runs:
//   - fused: its fusion groups launch as one kernel each (the default);
//   - kept: every launch alone, its values kept for a reverse sweep
//     (`--remat store`'s forward of a call or a fold copy);
//   - reusing: a vjp whose forward instructions come from a kept forward,
//     which it skips.
// Each instance lists its steps in order: a kernel launch (the kernel, the
// value each of its buffers reads), a launch without a kernel (evaluated by
// the reference kernels, and why), a call of another instance, a fold (a
// loop of `count` calls of one instance, the parameters sliced), a fold's
// vjp (the forward loop unless it is kept, then the vjp loop from the last
// copy), and host steps (constants, parameter reads, tuples, trees). Every
// value the instance stores is a buffer with its shape, type, bytes, the
// step that writes it and the last step that reads it.
//
// The kernels themselves live in the catalog (kernel/catalog.h), numbered in
// the order a run first meets them.

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quire/compile/library_kernel.h"
#include "quire/interp/interpreter.h"
#include "quire/kernel/catalog.h"
#include "quire/realize/realization.h"

namespace quire::compile {

enum class FrameMode : uint8_t { Fused, Kept, Reusing };
const char* frame_mode_name(FrameMode m);  ///< "fused", "kept", "reusing"

struct HostStep {
  enum class Kind : uint8_t {
    Kernel,     ///< a kernel launch
    Reference,  ///< a launch without a kernel: its steps one at a time on the reference kernels
    Call,       ///< a call of instance `callee`
    Fold,       ///< `count` calls of instance `callee`, copy i with the parameters' slice i
    FoldVjp,    ///< `count` forward calls of `callee` (-1: taken from the kept forward), then `count` of `vjp`, last
                ///< first
    Host,       ///< a constant, a parameter read, a tuple or tree operation on the host
    Library,    ///< the whole function as one library kernel (library_kernel.h): `library` says which
  };
  Kind kind = Kind::Host;
  int value = 0;             ///< the value it writes (a group's root)
  std::vector<int> steps;    ///< Kernel, Reference: the instructions it computes, the root last
  int kernel = -1;           ///< Kernel: its id in the catalog
  std::vector<int> inputs;   ///< Kernel: by input buffer, the value read (-1: a packed product's scratch)
  std::string why;           ///< Reference: why there is no kernel
  int64_t launch_steps = 0;  ///< Kernel, Reference: the group's instructions (a reused forward's included)
  int callee = -1;           ///< Call: the instance called; Fold, FoldVjp: copy 0's (forward)
  int vjp = -1;              ///< FoldVjp: copy 0's vjp instance
  int64_t count = 1;         ///< Fold, FoldVjp: copies
  /// Fold, FoldVjp: each copy's forward instance, copy 0 first (a copy's
  /// input type may differ from the first's, and with it its realization);
  /// empty for a FoldVjp whose forward is kept.
  std::vector<int> copies;
  std::vector<int> vjp_copies;  ///< FoldVjp: each copy's vjp instance, copy 0 first (run last first)
  std::vector<int> reads;       ///< every value it reads (operands, group inputs)
  LibraryKernel library = LibraryKernel::None;  ///< Library: the kernel
};

/// A value an instance holds: an argument or a stored result.
struct HostBuffer {
  int value = 0;
  interp::Value::Kind kind = interp::Value::Kind::Tensor;
  runtime::ElemKind elem = runtime::ElemKind::Real;
  runtime::FloatType type = runtime::FloatType::F64;  ///< a real tensor's storage type
  runtime::Shape shape;
  int64_t bytes = 0;     ///< a tensor's, at its storage type; 0 for the rest
  int first_write = -1;  ///< the step that writes it; -1 for an argument (or a kept forward's value)
  int last_read = -1;    ///< the last step that reads it; the step count for the result; -1 when unread
};

struct HostFunction {
  int function = -1;
  core::Numerics context = core::Numerics::Default;
  std::string signature;  ///< of the realization table ("" without a realization)
  FrameMode mode = FrameMode::Fused;
  const precision::FunctionRealization* table = nullptr;
  std::map<std::string, int64_t> dims;  ///< the dimensions it runs under (the callee's own bound)
  int first = 0;                        ///< Reusing: the forward instructions skipped
  int reused_from = -1;                 ///< Reusing: the kept instance whose forward it takes
  std::vector<HostStep> steps;
  std::vector<HostBuffer> buffers;  ///< arguments, then stored values, by value number
  /// A library function's instance that runs its lines: why it is not one
  /// library kernel ("" for the rest, and where it is one).
  std::string library_why_not;
  int64_t evaluations = 0;          ///< how many times one call of the entry runs it
};

struct HostProgram {
  int entry = -1;  ///< the function called
  int root = 0;    ///< its instance
  /// The entry's arguments as compiled, after the realization's casts:
  /// kinds, types and shapes only, no elements. A call must match them.
  std::vector<interp::Value> arguments;
  interp::Remat remat = interp::Remat::Recompute;  ///< how its reverse sweeps get forward values
  std::vector<HostFunction> functions;
  std::shared_ptr<kernel::KernelCatalog> catalog;
  std::vector<int64_t> launches;   ///< per kernel: launches per call of the entry
  int64_t kernel_launches = 0;     ///< launches per call
  int64_t reference_launches = 0;  ///< instructions the reference kernels evaluate per call
  int64_t library_launches = 0;    ///< library kernels run per call
  int threads = 1;                 ///< threads a library kernel may use (CompileRequest::threads)
};

/// By step of `h` (an instance of `fn`): the values whose holder lets go of
/// them after it, the last step that reads each (or the one that writes
/// it, when nothing reads it); a frame's result stays until it returns. The
/// executor releases them so, and the memory count (memory.h) replays it.
std::vector<std::vector<int>> released_after(const HostFunction& h, const core::Function& fn);

/// `quire dump --stage host`: every instance with its steps and buffers.
std::string print_host(const elab::Program& prog, const HostProgram& host);
nlohmann::ordered_json host_json(const elab::Program& prog, const HostProgram& host);

/// `quire dump --stage kernel`: the catalog's kernels with their launches per call, the host
/// listing, and the library functions (each instance a library kernel, or its lines and why).
std::string print_kernels(const elab::Program& prog, const HostProgram& host);

}  // namespace quire::compile

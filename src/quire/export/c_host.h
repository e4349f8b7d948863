#pragma once
// The C export's host program writer (internal to export/; c_export.h is
// the interface): each instance of the host program as one C function.
//
// A value is described, not held: a Leaf is the C expression of a tensor's
// elements (or a key, or a host scalar) with its storage, type and shape; a
// CValue is a leaf, a tuple or a parameter tree of them. A HostWriter writes
// an instance the first time a call reaches it (its arguments' structure
// taken from that call) and remembers which leaves of its result are fresh
// allocations, which the caller then owns, and which it borrows from its
// arguments. A Frame writes one instance: its steps as Events, each with the
// allocations it reads, so that body() frees each after its last reader.
// c_host.cpp holds the steps of the host program (kernels, calls, folds);
// c_host_steps.cpp the C twins of what runs outside the kernels.

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "quire/compile/compile.h"
#include "quire/export/c_export.h"
#include "quire/interp/value.h"
#include "quire/kernel/kernel_ir.h"

namespace quire::exports::c_detail {

using compile::HostBuffer;
using compile::HostFunction;
using compile::HostStep;
using interp::Value;
using runtime::FloatType;

// The storages of quire_runtime.h.
inline constexpr int kDouble = 0;
inline constexpr int kFloat = 1;
inline constexpr int kInt = 2;

const char* storage_name(int storage);   ///< "QUIRE_DOUBLE", …
const char* storage_ctype(int storage);  ///< "double", "float", "int64_t"
/// How a real value of type `t` is held: the narrow float types as float, the rest as double.
int storage_of(FloatType t);
int storage_of(kernel::ElemType t);
/// A double as C source that reads back as exactly it.
std::string c_double(double v);
/// A C compound literal `(const int64_t[]){…}`, or NULL when empty.
std::string c_array(const std::vector<int64_t>& v);

/// One leaf of a value in the generated code: a tensor's elements, a key or a host scalar.
struct Leaf {
  Value::Kind kind = Value::Kind::Tensor;  ///< Tensor, Key or Host
  std::string expr;                        ///< the C expression that holds it
  int storage = kDouble;
  FloatType type = FloatType::F64;  ///< a real tensor's value type
  runtime::ElemKind elem = runtime::ElemKind::Real;
  runtime::Shape shape;
  int owner = -1;  ///< the allocation of the frame it lies in (-1: none the frame owns)
  int slot = -1;   ///< the frame's argument slot it lies in (-1: none)
};

/// A value: a leaf, a tuple of values, or a parameter tree (leaves by path).
struct CValue {
  Value::Kind kind = Value::Kind::Tensor;
  Leaf leaf;
  std::vector<CValue> elements;
  std::map<std::string, Leaf> params;
};

/// The leaves in order: a tuple's elements in turn, a tree's by path.
void leaves_of(const CValue& v, std::vector<const Leaf*>& out);
std::vector<Leaf*> leaves_of(CValue& v);
/// The leaves' names as interp::flatten_value gives them.
void leaf_names(const CValue& v, const std::string& path, std::vector<std::string>& out);
/// The member of quire_slot that holds a leaf of kind k: "p", "k" or "h".
const char* slot_member(Value::Kind k);

/// The value an instance returns, per leaf: fresh (an allocation the caller
/// then owns; leaves that share one share `group`) or borrowed from
/// argument slot `slot`.
struct ResultLeaf {
  int group = -1;
  int slot = -1;
};

/// One allocation, release or call of a frame, in the order its C text runs
/// them: what the arena's schedule is made from (HostWriter::arena).
struct Action {
  enum class Kind : uint8_t { Alloc, Release, Call } kind = Kind::Alloc;
  std::string name;                 ///< Alloc, Release: the variable holding the allocation
  int64_t bytes = 0;                ///< Alloc
  int callee = -1;                  ///< Call: the instance called
  std::vector<std::string> groups;  ///< Call: the variables its fresh result allocations go to, by group
};

struct Instance {
  std::string name;
  CValue result;  ///< its leaves' exprs unused; kinds, types and shapes
  std::vector<ResultLeaf> origins;
  int groups = 0;
  /// Its actions in order (each event's, then the releases after it), and
  /// the variables of its result's fresh allocations, by group.
  std::vector<Action> actions;
  std::vector<std::string> group_names;
};

/// What one statement of a frame does: its text, the allocations it reads,
/// and its actions in order.
struct Event {
  std::string text;
  std::set<int> reads;
  std::vector<Action> actions;
};

/// The arena of an exported call: every allocation the program makes, in the
/// order it makes them, at a fixed offset for its life (compile::place_by_size,
/// the planner of `quire memory`'s arena).
struct Arena {
  std::vector<int64_t> sizes;    ///< bytes, by allocation
  std::vector<int64_t> offsets;  ///< by allocation
  int64_t bytes = 0;             ///< the arena's size
  int64_t peak = 0;              ///< the most bytes live at once
};

class HostWriter;

/// One instance being written.
class Frame {
 public:
  Frame(HostWriter& writer, int instance);

  HostWriter& w;
  const HostFunction& h;
  const core::Function& fn;
  std::vector<CValue> env;  ///< by value number
  std::vector<Event> events;
  std::vector<std::string> allocation_names;  ///< by allocation: the variable holding its base pointer
  std::set<int> returned;                     ///< allocations the result hands to the caller
  int temps = 0;

  std::string fresh_name(const std::string& stem) { return stem + std::to_string(temps++); }
  const CValue& arg(const core::Instr& in, size_t k) const { return env.at(static_cast<size_t>(in.args.at(k))); }

  const core::Instr& instr(int v) const;
  const HostBuffer* buffer(int v) const;
  [[noreturn]] void fail(int v, const std::string& why) const;

  /// A new allocation of the frame, its base pointer held in the variable `name`.
  int allocate(const std::string& name);
  void add(std::string text, const std::vector<const CValue*>& read);
  /// Value `value` is the tensor leaf `l`.
  void bind(int value, Leaf l);

  /// A tensor leaf for value v, freshly allocated by the statement that follows.
  Leaf new_tensor(int v, const std::string& stem = "v");
  /// The C text that allocates leaf l (its variable), recorded as an Alloc.
  std::string alloc_text(const Leaf& l);
  /// `void* name = quire_alloc(n, storage);`, recorded as an Alloc.
  std::string alloc_named(const std::string& name, int64_t n, int storage);
  /// `quire_release(name);`, recorded as a Release.
  std::string release_named(const std::string& name);
  std::vector<Action> pending;  ///< the actions of the event being written
  const Leaf& tensor(const core::Instr& in, size_t k) const;

  /// The rounding a value of natural type `from` takes where it is stored
  /// at site `in` (store_at_site): a C function's name, or "" for none.
  std::string rounding(const core::Instr& in, FloatType from, FloatType to);
  void check_read_down(const core::Instr& in) const;
  void run();

  // A kernel launch: its inputs as the kernel holds them, a packed product
  // computed first, the output allocated zero.
  void kernel_step(const HostStep& s);

  /// A call's arguments as slots, and the callee's result as the caller sees it.
  CValue call_instance(int callee, const std::vector<CValue>& args, const std::string& stem);
  void call_step(const HostStep& s);

  // A fold: copy i called with θᵢ (each leaf's slice i, by pointer), the
  // carried value, and the further operands, a key as copy_key(K, i).
  void fold_step(const HostStep& s);

  /// θ's slice for copy i: each leaf's elements from i · (its copy's count), by pointer.
  CValue theta_copy(const HostStep& s, const CValue& stacked, int64_t i) const;

  /// A fold operand as copy i sees it: a key as copy_key(K, i) (interp::ValueStructure::for_copy).
  CValue for_copy(CValue a, int64_t i);

  // A fold's vjp (core/walk.h's fold_vjp): the forward copies, each copy's
  // input kept, then the copies' vjps last first, each taking the next's
  // cotangent; the result is (the forward's result, x's cotangent, the
  // copies' θ gradients stacked along a new leading axis).
  void fold_vjp_step(const HostStep& s);
  void store_scalar(const core::Instr& in, const std::string& value_text);
  void host_scalar(const core::Instr& in, double value);

  /// A view of operand 0 under another shape (a reshape: the same elements in the same order).
  void alias(const core::Instr& in);

  /// A value that a step passes on unchanged, stored at its site: where
  /// the site's type is narrower (a parameter's master read as a half),
  /// a rounded copy (store_at_site), else the value itself.
  void stored_as_site(const core::Instr& in, CValue& v);

  /// A copying step: the reference kernel run on position tensors, its map fitted with boxes.
  void copies(const core::Instr& in);

  /// A result computed as f64 (or integers) into `natural`, then stored at the site.
  void finish_computed(const core::Instr& in, Leaf out, const std::string& natural_name, int natural_storage,
                       std::string text, const std::vector<const CValue*>& read);
  void draw(const core::Instr& in);
  void gather_like(const core::Instr& in);

  /// Whether every operand and the result of `in` hold integers or booleans.
  bool on_integers(const core::Instr& in) const;

  /// The strides that read operand k along each axis of the result (its alignment, interp::axis_map).
  std::vector<int64_t> aligned_strides(const core::Instr& in, size_t k, const runtime::Shape& result) const;

  /// The runtime's integer operation of `op` (quire_runtime.h's QUIRE_INT_…).
  static const char* int_op(core::Op op);

  /// An element-wise step on integers (exact, as runtime::binary's integer path).
  void int_elementwise(const core::Instr& in);

  /// An element-wise step with a real operand or a real result, as
  /// runtime::unary, binary and where compute it: each element in f64 by
  /// the prelude's twin of apply_unary / apply_binary (quire_add, …), then
  /// stored at the site's type.
  void real_elementwise(const core::Instr& in);

  /// The cotangent of a gather or a pick: ct's elements added (a gather's,
  /// in ct's order, each sum rounded to the site's accumulator) or placed
  /// where the forward read them, into +0.0, then stored at the site.
  void gather_adjoint(const core::Instr& in);

  /// A scan (runtime/scan_order.h's order, each step rounded to the site's
  /// accumulator) or the cotangent of its a, computed in f64 by the
  /// runtime's quire_scan / quire_scan_grad_a, then stored at the site.
  void scan(const core::Instr& in);

  /// A tree shaped as operand 0, each leaf the sum of the parts whose paths
  /// name it, in order, from +0.0 (the reference's `params`), held in f64.
  void make_params(const core::Instr& in);

  /// A reduction of integers over the axes interp::reduced_axes names.
  void int_reduce(const core::Instr& in);
  void step(const core::Instr& in, const std::string& why);

  /// The statements, with each allocation released after its last reader
  /// (or after its writer, when nothing reads it), those returned excepted.
  /// The C text of the frame's statements, each allocation released after
  /// its last reader; `actions` receives every action in order.
  std::string body(std::vector<Action>& actions) const;
};

class HostWriter {
 public:
  explicit HostWriter(const CExportRequest& r) : prog_(*r.prog), compiled_(*r.compiled), host_(r.compiled->host) {}

  /// Writes the root instance (and every instance it reaches) for the entry's arguments.
  void write_program(const std::vector<CValue>& arguments) { root_ = &instance(host_.root, arguments); }

  const std::string& functions() const { return functions_; }            ///< every instance's C function, callees first
  const std::set<int>& kernels() const { return kernels_; }              ///< the kernels launched
  const std::set<std::string>& roundings() const { return roundings_; }  ///< the quire_store_… functions used
  const Instance& root() const { return *root_; }
  /// The arena of one call of the root: its schedule expanded through every
  /// call, each allocation's life from its Alloc to its Release (the root's
  /// result living to the end), placed by size.
  Arena arena() const;

 private:
  friend class Frame;
  /// The instance `id`, written on its first call (`at_call`: that call's arguments).
  const Instance& instance(int id, const std::vector<CValue>& at_call);
  /// A C function that rounds to each type of `chain` in turn; its name.
  std::string rounding_function(const std::vector<FloatType>& chain);
  /// Expands instance `id`'s actions into `lives` (by allocation: start,
  /// end, bytes); returns its result groups' allocations.
  std::vector<size_t> expand(int id, std::vector<std::array<int64_t, 3>>& lives, int64_t& time, int depth) const;

  const elab::Program& prog_;
  const compile::CompiledProgram& compiled_;
  const compile::HostProgram& host_;
  std::map<int, Instance> instances_;
  std::string functions_;
  std::set<int> kernels_;
  std::set<std::string> roundings_;
  int depth_ = 0;
  const Instance* root_ = nullptr;
};

}  // namespace quire::exports::c_detail

// count_call_memory (memory.h): the executor's frames replayed on the host
// program, each value held as where its elements live.
//
// The replay is a domain of the Core walker, as the executor is
// (executor.cpp): calls, folds and a fold's vjp run through
// core::walk_structural, so every copy the walk makes of a value (a fold's
// inputs kept for its reverse sweep, a copy's gradient until the stack, a
// kept forward's frame) holds the same blocks for as long as the executor's
// does. A block is a shared_ptr: the last holder to let go releases it, and
// its destructor tells the count. What each step allocates and what it
// shares is the reference's (interp/reference_step.cpp, runtime/tensor.h):
// Replay::host_value and reference_value say it for the host's steps and
// the reference kernels', interp/step_storage.h for the operations.

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "quire/compile/build_host.h"
#include "quire/compile/memory.h"
#include "quire/compile/memory_placement.h"
#include "quire/core/printer.h"
#include "quire/core/walk.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/step_storage.h"
#include "quire/kernel/fusion.h"
#include "quire/kernel/kernel_ir.h"
#include "quire/realize/realization.h"

namespace quire::compile {

namespace {

using core::Op;
using Kind = interp::Value::Kind;

class Replay;

const core::Instr& instr_of(const core::Function& fn, int value) {
  return fn.body.at(static_cast<size_t>(value - static_cast<int>(fn.args.size()) - 1));
}

/// One allocation of elements, live until its last holder lets go of it.
struct Block {
  Replay* replay = nullptr;
  int64_t bytes = 0;
  size_t life = 0;    ///< its index in the replay's lives
  int64_t frame = 0;  ///< the serial of the frame that allocated it
  bool kept = false;  ///< allocated by a kept frame (`--remat store`)
  /// Widths::Native: the other view of these elements, made when a reader
  /// wanted them so and kept beside them (runtime/real_storage.h): f64 for
  /// f32 elements a reference kernel read, f32 for f64 elements a kernel
  /// read as f32.
  std::shared_ptr<Block> other_view;
  Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block();
};

/// A value as the replay holds it: a tensor's block (null: elements the
/// caller holds, or none), a tuple's elements, a parameter tree's leaves.
struct Held {
  Kind kind = Kind::Host;
  std::shared_ptr<Block> block;
  runtime::Shape shape;  ///< a tensor's
  int64_t width = 0;     ///< a tensor's bytes an element, as counted
  std::vector<Held> elements;
  std::map<std::string, Held> leaves;

  static Held tensor(std::shared_ptr<Block> block, runtime::Shape shape, int64_t width) {
    Held h;
    h.kind = Kind::Tensor;
    h.block = std::move(block);
    h.shape = std::move(shape);
    h.width = width;
    return h;
  }
};

/// A frame running now.
struct Active {
  int instance = -1;
  int64_t serial = 0;
  int step = -1;
  int64_t copy = -1;
  bool reverse = false;
  int64_t since = 0;  ///< bytes of live blocks allocated since it began (by it or the frames it called)
};

class Replay {
 public:
  /// A kept forward: the frame's values and the forwards it kept in turn.
  struct Saved;
  using Forward = std::shared_ptr<const Saved>;
  using Kept = core::KeptForwards<Held, Forward>;
  struct Saved {
    std::vector<Held> env;
    Kept kept;
  };

  Replay(const elab::Program& prog, const CompiledProgram& compiled, CountOptions options, CallMemory& m)
      : prog_(prog), host_(compiled.host), realization_(compiled.realization.get()), options_(options), m_(m) {
    const size_t n = host_.functions.size();
    released_.resize(n);
    buffers_.resize(n);
    own_peak_.assign(n, 0);
    runs_.assign(n, 0);
    depth_.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      const HostFunction& h = host_.functions[i];
      const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
      buffers_[i].assign(static_cast<size_t>(fn.value_count()) + 1, nullptr);
      for (const HostBuffer& b : h.buffers) buffers_[i].at(static_cast<size_t>(b.value)) = &b;
      released_[i] = released_after(h, fn);
    }
  }

  /// One call of the entry on its arguments (held by the caller: no blocks).
  void call() {
    std::vector<Held> args;
    for (const interp::Value& a : host_.arguments) args.push_back(argument(a));
    {
      Held result = run(host_.root, std::move(args), nullptr, nullptr, -1, false);
      std::unordered_set<const Block*> seen;
      m_.output_bytes = blocks_bytes(result, seen);
      std::unordered_set<size_t> result_lives;
      for (const Block* b : seen) result_lives.insert(b->life);
      for (size_t l : peak_lives_)
        if (result_lives.count(l)) m_.output_at_peak += lives_[l].bytes;
    }
    if (live_ != 0 || !live_blocks_.empty())
      throw std::logic_error("internal: the memory count's blocks outlive the call");
    const Placement placement = place_by_size(lives_);
    m_.arena_bytes = placement.arena_bytes;
    for (size_t r = 0; r < lives_.size(); ++r)
      m_.placed.push_back({sites_[r].instance, sites_[r].value, sites_[r].leaf, lives_[r], placement.offsets[r]});
    for (int id : order_) {
      const size_t i = static_cast<size_t>(id);
      m_.instances.push_back({id, depth_[i], runs_[i], 0, own_peak_[i]});
    }
    for (const PeakFrame& f : m_.peak_at)
      for (InstanceMemory& im : m_.instances)
        if (im.instance == f.instance) im.share = std::max(im.share, f.bytes);
  }

  /// A block's last holder let go of it.
  void release(const Block& b) {
    live_ -= b.bytes;
    if (b.kept) kept_live_ -= b.bytes;
    lives_.at(b.life).end = time_;
    for (Active& a : stack_)
      if (a.serial <= b.frame) a.since -= b.bytes;
    live_blocks_.erase(&b);
  }

  /// A tuple of `elements`, and element k of one (the walker's tuple operations, core/walk.h).
  using Value = Held;
  static Held tuple(std::vector<Held> elements) {
    Held h;
    h.kind = Kind::Tuple;
    h.elements = std::move(elements);
    return h;
  }
  static Held element(const Held& tuple, size_t k) { return tuple.elements.at(k); }

  /// Runs one frame of instance `id` on `args`; `reuse` supplies a reusing
  /// vjp's forward values, `keep` receives this frame's when given.
  Held run(int id, std::vector<Held> args, const Saved* reuse, Forward* keep, int64_t copy, bool reverse);

 private:
  struct Site {
    int instance;
    int value;
    std::string leaf;
  };

  struct Calls;

  Held argument(const interp::Value& v, int depth = 0) const {
    if (depth > 64) throw interp::EvalError("an argument nests too deeply");
    Held h;
    h.kind = v.kind;
    switch (v.kind) {
      case Kind::Tensor:
        h.shape = v.tensor.shape;
        h.width = width(v.tensor.kind, v.type);
        break;
      case Kind::Tuple:
        for (const interp::Value& e : v.elements) h.elements.push_back(argument(e, depth + 1));
        break;
      case Kind::Params:
        // Each leaf at its stored type (f64 without a realization).
        if (v.params)
          for (const auto& [path, t] : *v.params) {
            const precision::ParamStorage* p = realization_ ? realization_->param(path) : nullptr;
            h.leaves.emplace(path,
                             Held::tensor(nullptr, t.shape, width(t.kind, p ? p->stored : runtime::FloatType::F64)));
          }
        break;
      case Kind::Key:
      case Kind::Host:
        break;
    }
    return h;
  }

  /// Bytes an element of this kind and type, as the options count it.
  int64_t width(runtime::ElemKind elem, runtime::FloatType type) const {
    const bool real = elem == runtime::ElemKind::Real;
    if (!real && !options_.integers) return 0;
    if (options_.widths == Widths::Stored) return element_bytes(elem, type);
    return real && type != runtime::FloatType::F64 ? 4 : 8;
  }

  /// A new block of `bytes` allocated by `site` (none for 0 bytes).
  std::shared_ptr<Block> allocate(int64_t bytes, Site site) {
    if (bytes <= 0) return nullptr;
    auto b = std::make_shared<Block>();
    b->replay = this;
    b->bytes = bytes;
    b->life = lives_.size();
    b->frame = stack_.empty() ? 0 : stack_.back().serial;
    b->kept =
        !stack_.empty() && host_.functions.at(static_cast<size_t>(stack_.back().instance)).mode == FrameMode::Kept;
    lives_.push_back({time_, -1, bytes});
    sites_.push_back(std::move(site));
    ++time_;
    live_ += bytes;
    if (b->kept) kept_live_ += bytes;
    live_blocks_.insert(b.get());
    for (Active& a : stack_) {
      a.since += bytes;
      int64_t& own = own_peak_[static_cast<size_t>(a.instance)];
      own = std::max(own, a.since);
    }
    if (live_ > m_.peak_bytes) observe_peak(sites_.back());
    return b;
  }

  /// The peak is now: where, and the largest blocks live.
  void observe_peak(const Site& site) {
    m_.peak_bytes = live_;
    m_.kept_at_peak = kept_live_;
    m_.peak_value = site.value;
    m_.peak_leaf = site.leaf;
    m_.peak_at.clear();
    for (const Active& a : stack_) m_.peak_at.push_back({a.instance, a.step, a.copy, a.reverse, a.since});
    // Largest first; on ties the first allocated.
    std::vector<const Block*> blocks(live_blocks_.begin(), live_blocks_.end());
    std::sort(blocks.begin(), blocks.end(), [](const Block* a, const Block* b) {
      return a->bytes != b->bytes ? a->bytes > b->bytes : a->life < b->life;
    });
    peak_lives_.clear();
    for (const Block* b : blocks) peak_lives_.push_back(b->life);
    m_.largest_at_peak.clear();
    for (size_t k = 0; k < blocks.size() && k < kLargestAtPeak; ++k) {
      const Site& s = sites_.at(blocks[k]->life);
      m_.largest_at_peak.push_back({s.instance, s.value, s.leaf, blocks[k]->bytes});
    }
  }

  /// A value of `type` that holds no elements (a key, a host scalar, a
  /// tuple of them: split_key's).
  static Held without_storage(const elab::Type& type, int depth = 0) {
    if (depth > 64) throw std::logic_error("internal: a type nests too deeply");
    Held h;
    switch (type.kind) {
      case elab::TypeKind::Tuple:
        h.kind = Kind::Tuple;
        for (const elab::Type& e : type.elements) h.elements.push_back(without_storage(e, depth + 1));
        return h;
      case elab::TypeKind::Key:
        h.kind = Kind::Key;
        return h;
      case elab::TypeKind::Scalar:
        h.kind = Kind::Host;
        return h;
      case elab::TypeKind::Params:
      case elab::TypeKind::Tensor:
        break;
    }
    throw std::logic_error("internal: a step makes a tensor or a tree the memory count has no rule for");
  }

  /// The bytes of the distinct blocks `h` holds.
  static int64_t blocks_bytes(const Held& h, std::unordered_set<const Block*>& seen) {
    int64_t sum = 0;
    if (h.block && seen.insert(h.block.get()).second) {
      sum += h.block->bytes;
      // A view a reader made of the result's elements stays with them.
      if (const std::shared_ptr<Block>& v = h.block->other_view; v && seen.insert(v.get()).second) sum += v->bytes;
    }
    for (const Held& e : h.elements) sum += blocks_bytes(e, seen);
    for (const auto& [path, leaf] : h.leaves) sum += blocks_bytes(leaf, seen);
    return sum;
  }

  /// The value a reference kernel stores: its operand's elements where the
  /// runtime shares them (interp/step_storage.h), else elements of its own.
  Held reference_value(int id, const core::Function& fn, const core::Instr& in, const std::vector<Held>& env) {
    const std::vector<const HostBuffer*>& buffers = buffers_.at(static_cast<size_t>(id));
    const HostBuffer* b = buffers.at(static_cast<size_t>(in.id));
    const HostBuffer* x = in.args.empty() ? nullptr : buffers.at(static_cast<size_t>(in.args[0]));
    std::vector<runtime::Shape> shapes;
    for (int a : in.args) {
      const HostBuffer* operand = buffers.at(static_cast<size_t>(a));
      shapes.push_back(operand ? operand->shape : runtime::Shape{});
    }
    const interp::StepStorage storage = interp::step_storage(fn, in, shapes);
    const std::vector<Held> ops = operands(id, in, env);
    if (storage.shares && b && x && b->kind == Kind::Tensor && x->kind == Kind::Tensor &&
        x->elem == runtime::ElemKind::Real) {
      Held h = ops.at(0);
      h.shape = b->shape;
      return h;
    }
    return computed(id, in, ops, storage.reads);
  }

  /// The operands as a step on the reference kernels reads them. Under
  /// Widths::Native, a site that reads down rounds each real operand of
  /// another type into a copy first (interp::evaluate_step), which lives
  /// for the step (or as long as a value that shares it): f32 elements
  /// copied for a half, an f64 operand rounded into f32 for f32 or copied in
  /// f64 for a half.
  std::vector<Held> operands(int id, const core::Instr& in, const std::vector<Held>& env) {
    std::vector<Held> ops;
    for (int a : in.args) ops.push_back(env.at(static_cast<size_t>(a)));
    const HostFunction& h = host_.functions.at(static_cast<size_t>(id));
    if (options_.widths != Widths::Native || !h.table) return ops;
    const std::optional<precision::SiteType>& site = h.table->values.at(static_cast<size_t>(in.id));
    if (!site || !site->read_down) return ops;
    for (size_t k = 0; k < ops.size(); ++k) {
      const HostBuffer* x = buffers_.at(static_cast<size_t>(id)).at(static_cast<size_t>(in.args[k]));
      const std::optional<precision::SiteType>& operand_site = h.table->values.at(static_cast<size_t>(in.args[k]));
      if (!x || x->kind != Kind::Tensor || x->elem != runtime::ElemKind::Real || x->type == site->read_as) continue;
      if (operand_site && operand_site->weak) continue;
      const bool narrow = ops[k].width == 4;
      if (site->read_as == runtime::FloatType::F64 || (narrow && site->read_as == runtime::FloatType::F32)) continue;
      const int64_t w = narrow || site->read_as == runtime::FloatType::F32 ? 4 : 8;
      ops[k] = Held::tensor(allocate(runtime::element_count(x->shape) * w, {id, in.id, ""}), x->shape, w);
    }
    return ops;
  }

  /// A value the reference kernels compute (interp::evaluate_step) from
  /// `ops` into elements of its own. Widths::Native follows how they hold
  /// it. `reads`: by operand, whether its elements are read (interp::StepStorage).
  Held computed(int id, const core::Instr& in, const std::vector<Held>& ops, const std::vector<bool>& reads) {
    const HostBuffer* b = buffers_.at(static_cast<size_t>(id)).at(static_cast<size_t>(in.id));
    if (options_.widths != Widths::Native) return fresh(id, in.id);
    const bool real = b && b->kind == Kind::Tensor && b->elem == runtime::ElemKind::Real;
    const int64_t n = real ? runtime::element_count(b->shape) : 0;
    if (core::op_info(in.op).copies) {
      if (!real) return fresh(id, in.id);
      // A copy keeps the numbers it copies in their view: f32 when every
      // operand it copies is held so (runtime::detail::copies_narrow).
      bool narrow = true;
      const size_t copied = in.op == Op::Concat ? ops.size() : 1;
      for (size_t k = 0; k < copied; ++k) narrow = narrow && ops.at(k).width == 4;
      const int64_t w = narrow ? 4 : 8;
      return Held::tensor(allocate(n * w, {id, in.id, ""}), b->shape, w);
    }
    // Any other reference kernel computes in f64: it reads each real operand
    // held in f32 through an f64 view, which stays beside it, and a result
    // stored narrower is rounded into f32 from its f64 one, then freed.
    for (size_t k = 0; k < ops.size(); ++k) {
      const Held& x = ops[k];
      if (reads.at(k) && x.kind == Kind::Tensor && x.width == 4) view_of(x, 8);
    }
    const std::shared_ptr<Block> wide =
        real && width(b->elem, b->type) != 8 ? allocate(8 * n, {id, in.id, ""}) : nullptr;
    return fresh(id, in.id);
  }

  /// The other view of `x`'s elements, `w` bytes an element, made once for
  /// its block (a block the caller holds keeps its views: not counted).
  void view_of(const Held& x, int64_t w) {
    if (x.block && !x.block->other_view)
      x.block->other_view = allocate(x.block->bytes / x.width * w, sites_.at(x.block->life));
  }

  /// The native runner hands a kernel each real input in the view its
  /// buffer's type asks for (f32 for f32 and the halves, else f64), making
  /// it where the input lacks it.
  void kernel_views(const HostStep& s, const std::vector<Held>& env) {
    const kernel::Kernel& k = host_.catalog->kernels().at(static_cast<size_t>(s.kernel)).kernel;
    for (size_t b = 0; b < s.inputs.size() && b < k.buffers.size(); ++b) {
      if (s.inputs[b] < 0) continue;  // a packed product's scratch
      const Held& x = env.at(static_cast<size_t>(s.inputs[b]));
      if (x.kind != Kind::Tensor || (x.width != 4 && x.width != 8)) continue;
      const int64_t wants = kernel::held_as_f32(k.buffers[b].type) ? 4 : 8;
      if (wants != x.width) view_of(x, wants);
    }
  }

  /// A library kernel's result: its f32 tensors (f32 views of its operands
  /// made where they lack one), with its block scratch held while it runs.
  Held library_value(int id, const HostStep& s, const std::vector<Held>& env) {
    std::vector<runtime::Shape> shapes;
    for (int v : s.reads) {
      const Held& x = env.at(static_cast<size_t>(v));
      shapes.push_back(x.shape);
      const HostBuffer* b = buffers_.at(static_cast<size_t>(id)).at(static_cast<size_t>(v));
      if (options_.widths == Widths::Native && b && b->kind == Kind::Tensor && b->elem == runtime::ElemKind::Real &&
          x.width == 8)
        view_of(x, 4);
      // A tuple of cotangents (dropout_add_layer_norm.vjp's): its f64-held
      // parts are read as f32 too.
      if (options_.widths == Widths::Native && x.kind == Kind::Tuple)
        for (const Held& e : x.elements)
          if (e.kind == Kind::Tensor && e.width == 8) view_of(e, 4);
    }
    const std::shared_ptr<Block> scratch =
        allocate(library_scratch_bytes(s.library, shapes, host_.threads), {id, s.value, "scratch"});
    std::vector<Held> results;
    const int64_t w = width(runtime::ElemKind::Real, runtime::FloatType::F32);
    for (runtime::Shape& shape : library_result_shapes(s.library, shapes)) {
      const int64_t bytes = runtime::element_count(shape) * w;
      results.push_back(Held::tensor(allocate(bytes, {id, s.value, ""}), std::move(shape), w));
    }
    return library_result(s.library, std::move(results), [](std::vector<Held> parts) {
      Held tuple;
      tuple.kind = Kind::Tuple;
      tuple.elements = std::move(parts);
      return tuple;
    });
  }

  /// The value a host step stores: what it allocates and what it shares.
  Held host_value(int id, const core::Function& fn, const core::Instr& in, const std::vector<Held>& env);
  /// A new block for value `v` of instance `id`, at its buffer's shape and type.
  Held fresh(int id, int v) {
    const HostBuffer* b = buffers_.at(static_cast<size_t>(id)).at(static_cast<size_t>(v));
    if (!b) throw std::logic_error(fmt::format("internal: #{} stores %{} without a buffer", id, v));
    if (b->kind != Kind::Tensor) {
      const HostFunction& h = host_.functions.at(static_cast<size_t>(id));
      return without_storage(prog_.functions.at(static_cast<size_t>(h.function)).type_of(v));
    }
    const int64_t w = width(b->elem, b->type);
    return Held::tensor(allocate(runtime::element_count(b->shape) * w, {id, v, ""}), b->shape, w);
  }

  const elab::Program& prog_;
  const HostProgram& host_;
  const precision::Realization* realization_;
  CountOptions options_;
  CallMemory& m_;
  std::vector<std::vector<std::vector<int>>> released_;  ///< by instance, by step: values whose last reader it is
  std::vector<std::vector<const HostBuffer*>> buffers_;  ///< by instance, by value
  std::vector<int64_t> own_peak_, runs_;
  std::vector<int> depth_;
  std::vector<int> order_;
  std::vector<Active> stack_;
  int64_t serial_ = 0;
  int64_t live_ = 0;
  int64_t kept_live_ = 0;
  int64_t time_ = 0;             ///< allocations so far: the clock of the lives
  std::vector<Lifetime> lives_;  ///< every block's life, in allocation order
  std::vector<Site> sites_;      ///< by life
  std::unordered_set<const Block*> live_blocks_;
  std::vector<size_t> peak_lives_;  ///< the blocks live at the peak, by life
};

Block::~Block() {
  if (replay) replay->release(*this);
}

/// The walker's domain for one call, fold or fold_vjp step of instance
/// `instance` (the executor's Callees): each evaluation runs the instance
/// the step compiled for it.
struct Replay::Calls {
  using Value = Held;
  using Dims = core::NoDims;
  using Forward = Replay::Forward;
  Replay& self;
  const HostStep& step;
  int instance;

  const elab::Program& program() const { return self.prog_; }
  static Dims callee_dims(const core::Instr&, Dims) { return {}; }
  int64_t copies(const core::Instr&, Dims) const { return step.count; }
  static Held tuple(std::vector<Held> elements) { return Replay::tuple(std::move(elements)); }
  static Held element(const Held& tuple, size_t k) { return Replay::element(tuple, k); }
  static Held for_copy(const Held& operand, int64_t) { return operand; }
  /// θᵢ: each leaf's slice, a window onto the stacked leaf's elements
  /// (runtime::slice of a leading axis shares them).
  static Held copy_of(const Held& stacked, int64_t) {
    Held h;
    h.kind = Kind::Params;
    for (const auto& [path, leaf] : stacked.leaves) {
      if (leaf.shape.empty()) throw std::logic_error("internal: a stacked parameter without its stack axis");
      Held slice = leaf;
      slice.shape.erase(slice.shape.begin());
      h.leaves.emplace(path, std::move(slice));
    }
    return h;
  }
  /// The copies' gradients stacked along a new leading axis, each leaf a new
  /// block, held in f32 when every copy's leaf is, else in f64
  /// (interp::ValueStructure::stack): at the widest copy's width.
  Held stack(const Held& stacked, const std::vector<Held>& grads) {
    Held h;
    h.kind = Kind::Params;
    for (const auto& [path, leaf] : stacked.leaves) {
      int64_t width = grads.empty() ? self.width(runtime::ElemKind::Real, runtime::FloatType::F64) : 0;
      for (const Held& g : grads) width = std::max(width, g.leaves.at(path).width);
      h.leaves.emplace(
          path, Held::tensor(self.allocate(runtime::element_count(leaf.shape) * width, {instance, step.value, path}),
                             leaf.shape, width));
    }
    return h;
  }
  Held evaluate(const core::Evaluation<Forward>& e, std::vector<Held> args, Dims) {
    const size_t copy = static_cast<size_t>(e.copy);
    const std::vector<int>& compiled = e.role == core::CallRole::VjpCopy ? step.vjp_copies : step.copies;
    const int callee = e.role == core::CallRole::Call ? step.callee : copy < compiled.size() ? compiled[copy] : -1;
    const FrameMode mode = e.reuse ? FrameMode::Reusing : e.keep ? FrameMode::Kept : FrameMode::Fused;
    if (callee < 0 || self.host_.functions.at(static_cast<size_t>(callee)).mode != mode)
      throw std::logic_error(fmt::format("internal: the host program compiled no {} instance for a step of #{}",
                                         frame_mode_name(mode), instance));
    return self.run(callee, std::move(args), e.reuse ? e.reuse->get() : nullptr, e.keep,
                    e.role == core::CallRole::Call ? -1 : e.copy, e.role == core::CallRole::VjpCopy);
  }
};

Held Replay::run(int id, std::vector<Held> args, const Saved* reuse, Forward* keep, int64_t copy, bool reverse) {
  if (stack_.size() > static_cast<size_t>(interp::kMaxCallDepth))
    throw std::logic_error("internal: the host program's calls nest deeper than the executor allows");
  const size_t i = static_cast<size_t>(id);
  const HostFunction& h = host_.functions.at(i);
  const core::Function& fn = prog_.functions.at(static_cast<size_t>(h.function));
  if (depth_[i] < 0) {
    depth_[i] = static_cast<int>(stack_.size());
    order_.push_back(id);
  }
  ++runs_[i];
  stack_.push_back({id, ++serial_, -1, copy, reverse, 0});
  Held result;
  {
    std::vector<Held> env(static_cast<size_t>(fn.value_count()) + 1);
    for (size_t k = 0; k < args.size(); ++k) env[k + 1] = std::move(args[k]);
    Kept kept;
    if (h.mode == FrameMode::Reusing) {
      if (!reuse || fn.primal < 0)
        throw std::logic_error(fmt::format("internal: `{}` reuses a forward the count did not keep", fn.name));
      const core::Function& primal = prog_.functions.at(static_cast<size_t>(fn.primal));
      for (size_t k = 0; k < static_cast<size_t>(h.first); ++k)
        env[static_cast<size_t>(fn.body[k].id)] = reuse->env.at(static_cast<size_t>(primal.body[k].id));
      kept = reuse->kept.for_vjp(primal, fn);
    }
    // A frame keeps its callees' forwards when a reverse sweep will read them.
    Kept* keeping =
        host_.remat == interp::Remat::Store && (fn.primal >= 0 || h.mode == FrameMode::Kept) ? &kept : nullptr;
    for (size_t k = 0; k < h.steps.size(); ++k) {
      const HostStep& s = h.steps[k];
      stack_.back().step = static_cast<int>(k);
      ++m_.steps;
      switch (s.kind) {
        case HostStep::Kind::Kernel:
          if (options_.widths == Widths::Native) kernel_views(s, env);
          env[static_cast<size_t>(s.value)] = fresh(id, s.value);
          break;
        case HostStep::Kind::Reference:
          // The reference kernels store each step of the group, one at a time.
          for (int v : s.steps) env[static_cast<size_t>(v)] = reference_value(id, fn, instr_of(fn, v), env);
          break;
        case HostStep::Kind::Host:
          env[static_cast<size_t>(s.value)] = host_value(id, fn, instr_of(fn, s.value), env);
          break;
        case HostStep::Kind::Library:
          env[static_cast<size_t>(s.value)] = library_value(id, s, env);
          break;
        case HostStep::Kind::Call:
        case HostStep::Kind::Fold:
        case HostStep::Kind::FoldVjp: {
          const core::Instr& in = instr_of(fn, s.value);
          Calls calls{*this, s, id};
          env[static_cast<size_t>(s.value)] = core::walk_structural(
              calls, in, [&](size_t a) -> const Held& { return env.at(static_cast<size_t>(in.args.at(a))); },
              core::NoDims{}, keeping);
          break;
        }
      }
      if (!keep)
        for (int v : released_[i][k]) env[static_cast<size_t>(v)] = Held{};
    }
    // The frame ends: its result moves out unless the frame is kept.
    const size_t r = static_cast<size_t>(fn.result_value);
    result = keep ? env[r] : std::move(env[r]);
    if (keep) *keep = std::make_shared<const Saved>(Saved{std::move(env), std::move(kept)});
  }
  stack_.pop_back();
  return result;
}

Held Replay::host_value(int id, const core::Function& fn, const core::Instr& in, const std::vector<Held>& env) {
  auto arg = [&](size_t k) -> const Held& { return env.at(static_cast<size_t>(in.args.at(k))); };
  const HostBuffer* b = buffers_.at(static_cast<size_t>(id)).at(static_cast<size_t>(in.id));
  if (in.op == Op::Field) {
    // A parameter read at a half type is rounded into elements of its own
    // (interp::store_at_site); any other is the tree's leaf, or sub-tree.
    if (b && b->kind == Kind::Tensor && b->elem == runtime::ElemKind::Real && precision::is_half(b->type)) {
      // Rounded where the master is held: an f64 master in f64 elements.
      const auto leaf = arg(0).leaves.find(in.attr<core::attr::Member>().name);
      if (options_.widths != Widths::Native || leaf == arg(0).leaves.end() || leaf->second.width != 8)
        return fresh(id, in.id);
      return Held::tensor(allocate(runtime::element_count(b->shape) * 8, {id, in.id, ""}), b->shape, 8);
    }
    const std::string& name = in.attr<core::attr::Member>().name;
    const Held& tree = arg(0);
    if (in.type.kind == elab::TypeKind::Tensor) {
      auto it = tree.leaves.find(name);
      if (it == tree.leaves.end())
        throw std::logic_error(
            fmt::format("internal: {} reads `{}`, which the tree lacks", core::site_name(fn, in.id), name));
      return it->second;
    }
    Held h;
    h.kind = Kind::Params;
    h.leaves = interp::subtree(tree.leaves, name);
    return h;
  }
  if (in.op == Op::TupleGet || in.op == Op::MakeTuple) return core::walk_tuple(*this, in, arg);
  if (in.op == Op::MakeParams) {
    // Each leaf of the tree: its one part itself, or the sum of its parts
    // or +0.0 in elements of its own, in f64 (interp's `params`).
    std::map<std::string, std::vector<const Held*>> parts;
    for (size_t k = 1; k < in.args.size(); ++k) {
      const std::string& path = in.paths.at(k - 1);
      const Held& part = arg(k);
      if (part.kind == Kind::Params)
        for (const auto& [p, leaf] : part.leaves) parts[path + p].push_back(&leaf);
      else
        parts[path].push_back(&part);
    }
    Held h;
    h.kind = Kind::Params;
    const int64_t f64 = width(runtime::ElemKind::Real, runtime::FloatType::F64);
    for (const auto& [path, leaf] : arg(0).leaves) {
      auto it = parts.find(path);
      if (it != parts.end() && it->second.size() == 1)
        h.leaves.emplace(path, *it->second.front());
      else
        h.leaves.emplace(
            path, Held::tensor(allocate(runtime::element_count(leaf.shape) * f64, {id, in.id, path}), leaf.shape, f64));
    }
    return h;
  }
  // A split or its cotangent: the operand's elements under a new shape
  // (runtime::reshape shares them; kernel/fusion.cpp launches nothing).
  if (kernel::launch_kind(in) == kernel::LaunchKind::None && core::op_info(in.op).copies) {
    Held h = arg(0);
    if (b) h.shape = b->shape;
    return h;
  }
  // A constant, a host scalar made a tensor: every operand read.
  return computed(id, in, operands(id, in, env), std::vector<bool>(in.args.size(), true));
}

}  // namespace

CallMemory count_call_memory(const elab::Program& prog, const CompiledProgram& compiled, CountOptions options) {
  const HostProgram& host = compiled.host;
  CallMemory m;
  if (compiled.realization)
    for (const precision::ParamStorage& p : compiled.realization->params) {
      auto& [elements, bytes] = m.parameters_by_type[p.stored];
      const int64_t b = p.elements * element_bytes(runtime::ElemKind::Real, p.stored);
      elements += p.elements;
      bytes += b;
      m.parameter_elements += p.elements;
      m.parameter_bytes += b;
    }
  for (const interp::Value& a : host.arguments) {
    if (a.kind == interp::Value::Kind::Params) {
      if (!compiled.realization && a.params)
        for (const auto& [path, t] : *a.params) {
          auto& [elements, bytes] = m.parameters_by_type[runtime::FloatType::F64];
          elements += t.size();
          bytes += t.size() * 8;
          m.parameter_elements += t.size();
          m.parameter_bytes += t.size() * 8;
        }
      m.input_bytes += m.parameter_bytes;
    } else if (a.kind == interp::Value::Kind::Tuple) {
      for (const interp::Value& e : a.elements) m.input_bytes += buffer_bytes(e);
    } else {
      m.input_bytes += buffer_bytes(a);
    }
  }
  Replay(prog, compiled, options, m).call();
  return m;
}

}  // namespace quire::compile

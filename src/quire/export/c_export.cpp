#include "quire/export/c_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "quire/core/printer.h"
#include "quire/export/c_copies.h"
#include "quire/export/c_runtime.h"
#include "quire/interp/core_geometry.h"
#include "quire/interp/reference_step.h"
#include "quire/kernel/kernel_ir.h"
#include "quire/native/c_emit.h"
#include "quire/realize/realization.h"
#include "quire/runtime/float_types.h"

namespace quire::exports {

namespace {

using compile::HostBuffer;
using compile::HostFunction;
using compile::HostStep;
using core::Op;
using interp::Value;
using runtime::FloatType;

// The storages of quire_runtime.h.
constexpr int kDouble = 0;
constexpr int kFloat = 1;
constexpr int kInt = 2;

const char* storage_name(int storage) {
  return storage == kFloat ? "QUIRE_FLOAT" : storage == kInt ? "QUIRE_INT" : "QUIRE_DOUBLE";
}
const char* storage_ctype(int storage) { return storage == kFloat ? "float" : storage == kInt ? "int64_t" : "double"; }

/// How a real value of type `t` is held: the narrow float types as float, the rest as double.
int storage_of(FloatType t) {
  return t == FloatType::F32 || t == FloatType::BF16 || t == FloatType::F16 ? kFloat : kDouble;
}
int storage_of(kernel::ElemType t) {
  return kernel::held_as_f32(t) ? kFloat : kernel::is_float(t) ? kDouble : kInt;
}

/// A double as C source that reads back as exactly it.
std::string c_double(double v) {
  if (std::isnan(v)) return v < 0 || std::signbit(v) ? "(-NAN)" : "NAN";
  if (std::isinf(v)) return v < 0 ? "(-INFINITY)" : "INFINITY";
  char text[64];
  std::snprintf(text, sizeof text, "%a", v);
  return text;
}

std::string c_array(const std::vector<int64_t>& v) {
  if (v.empty()) return "NULL";
  std::vector<std::string> parts;
  for (int64_t x : v) parts.push_back(fmt::format("{}", x));
  return fmt::format("(const int64_t[]){{{}}}", fmt::join(parts, ", "));
}

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

void leaves_of(const CValue& v, std::vector<const Leaf*>& out) {
  switch (v.kind) {
    case Value::Kind::Tensor:
    case Value::Kind::Key:
    case Value::Kind::Host: out.push_back(&v.leaf); return;
    case Value::Kind::Tuple:
      for (const CValue& e : v.elements) leaves_of(e, out);
      return;
    case Value::Kind::Params:
      for (const auto& [path, l] : v.params) out.push_back(&l);
      return;
  }
}

std::vector<Leaf*> leaves_of(CValue& v) {
  std::vector<const Leaf*> c;
  leaves_of(v, c);
  std::vector<Leaf*> out;
  for (const Leaf* l : c) out.push_back(const_cast<Leaf*>(l));
  return out;
}

/// The leaves' names as interp::flatten_value gives them.
void leaf_names(const CValue& v, const std::string& path, std::vector<std::string>& out) {
  switch (v.kind) {
    case Value::Kind::Tensor:
    case Value::Kind::Key:
    case Value::Kind::Host: out.push_back(path); return;
    case Value::Kind::Tuple:
      for (size_t i = 0; i < v.elements.size(); ++i) leaf_names(v.elements[i], fmt::format("{}.{}", path, i), out);
      return;
    case Value::Kind::Params:
      for (const auto& [p, l] : v.params) out.push_back(path + "." + p);
      return;
  }
}

const char* slot_member(Value::Kind k) { return k == Value::Kind::Key ? "k" : k == Value::Kind::Host ? "h" : "p"; }

/// The value an instance returns, per leaf: fresh (an allocation the caller
/// then owns; leaves that share one share `group`) or borrowed from
/// argument slot `slot`.
struct ResultLeaf {
  int group = -1;
  int slot = -1;
};

struct Instance {
  std::string name;
  CValue result;  ///< its leaves' exprs unused; kinds, types and shapes
  std::vector<ResultLeaf> origins;
  int groups = 0;
};

/// What one statement of a frame does: its text, the allocations it reads,
/// and the one it makes (if any).
struct Event {
  std::string text;
  std::set<int> reads;
};

class Writer {
 public:
  explicit Writer(const CExportRequest& r)
      : prog_(*r.prog), compiled_(*r.compiled), host_(r.compiled->host), realization_(r.compiled->realization.get()) {}

  /// The whole of program.c's body: the instances, root last, and main.
  void write_program(const std::vector<CValue>& arguments, const std::vector<std::string>& argument_names) {
    std::vector<CValue> args = arguments;
    const Instance& root = instance(host_.root, args);
    root_ = &root;
    root_args_ = arguments;
    root_names_ = argument_names;
  }

  std::string functions() const { return functions_; }
  std::set<int> kernels() const { return kernels_; }
  std::set<std::string> roundings() const { return roundings_; }
  const Instance& root() const { return *root_; }

 private:
  // ---- instances ----

  const Instance& instance(int id, const std::vector<CValue>& at_call) {
    if (auto it = instances_.find(id); it != instances_.end()) return it->second;
    if (++depth_ > 256) fail_plain("calls nest deeper than the export follows");
    Frame f(*this, id);
    // The arguments as the instance sees them: slot j of `in`.
    int slot = 0;
    for (size_t i = 0; i < at_call.size(); ++i) {
      CValue v = at_call[i];
      for (Leaf* l : leaves_of(v)) {
        l->expr = fmt::format("in[{}].{}", slot, slot_member(l->kind));
        l->owner = -1;
        l->slot = slot++;
      }
      f.env[i + 1] = std::move(v);
    }
    Instance inst;
    inst.name = fmt::format("instance_{}", id);
    f.run();
    // The result: fresh allocations move to the caller, the rest are borrowed.
    CValue result = f.env.at(static_cast<size_t>(f.fn.result_value));
    std::map<int, int> group_of;
    std::vector<const Leaf*> leaves;
    leaves_of(result, leaves);
    std::string out;
    for (size_t j = 0; j < leaves.size(); ++j) {
      const Leaf& l = *leaves[j];
      ResultLeaf o;
      if (l.owner >= 0) {
        if (l.expr != f.allocation_names.at(static_cast<size_t>(l.owner)))
          fail_plain(fmt::format("internal: {} returns a view into its own buffer", f.fn.name));
        auto [it, fresh] = group_of.emplace(l.owner, static_cast<int>(group_of.size()));
        o.group = it->second;
        f.returned.insert(l.owner);
      } else {
        o.slot = l.slot;
      }
      inst.origins.push_back(o);
      out += fmt::format("  out[{}].{} = {};\n", j, slot_member(l.kind), l.expr);
    }
    inst.groups = static_cast<int>(group_of.size());
    inst.result = result;
    std::string text = fmt::format("/* {} ({}): {} */\nstatic void {}(const quire_slot* in, quire_slot* out) {{\n",
                                   prog_.functions.at(static_cast<size_t>(f.h.function)).name,
                                   f.h.signature.empty() ? "-" : f.h.signature, compile::frame_mode_name(f.h.mode),
                                   inst.name);
    if (slot == 0) text += "  (void)in;\n";
    text += f.body();
    text += out;
    text += "}\n\n";
    functions_ += text;
    --depth_;
    return instances_.emplace(id, std::move(inst)).first->second;
  }

  // ---- one frame ----

  struct Frame {
    Writer& w;
    int id;
    const HostFunction& h;
    const core::Function& fn;
    std::vector<CValue> env;
    std::vector<Event> events;
    std::vector<std::string> allocation_names;  ///< by allocation: the variable holding its base pointer
    std::set<int> returned;
    int temps = 0;

    Frame(Writer& writer, int instance)
        : w(writer),
          id(instance),
          h(writer.host_.functions.at(static_cast<size_t>(instance))),
          fn(writer.prog_.functions.at(static_cast<size_t>(h.function))),
          env(static_cast<size_t>(fn.value_count()) + 1) {}

    const core::Instr& instr(int v) const {
      return fn.body.at(static_cast<size_t>(v - static_cast<int>(fn.args.size()) - 1));
    }
    const HostBuffer* buffer(int v) const {
      for (const HostBuffer& b : h.buffers)
        if (b.value == v) return &b;
      return nullptr;
    }
    [[noreturn]] void fail(int v, const std::string& why) const {
      throw ExportError(fmt::format("{}: {}", core::site_name(fn, v), why));
    }
    std::string fresh_name(const std::string& stem) { return fmt::format("{}{}", stem, temps++); }

    /// A new allocation of `n` elements, held in variable `name`.
    int allocate(const std::string& name) {
      allocation_names.push_back(name);
      return static_cast<int>(allocation_names.size()) - 1;
    }

    void add(std::string text, const std::vector<const CValue*>& read) {
      Event e;
      e.text = std::move(text);
      for (const CValue* v : read) {
        std::vector<const Leaf*> ls;
        leaves_of(*v, ls);
        for (const Leaf* l : ls)
          if (l->owner >= 0) e.reads.insert(l->owner);
      }
      events.push_back(std::move(e));
    }

    /// A tensor leaf for value v, freshly allocated by the statement that follows.
    Leaf new_tensor(int v, const std::string& stem = "v") {
      const HostBuffer* b = buffer(v);
      if (!b || b->kind != Value::Kind::Tensor) fail(v, "internal: no tensor buffer");
      Leaf l;
      l.kind = Value::Kind::Tensor;
      l.elem = b->elem;
      l.type = b->type;
      l.shape = b->shape;
      l.storage = b->elem == runtime::ElemKind::Real ? storage_of(b->type) : kInt;
      l.expr = fmt::format("{}{}", stem, v);
      if (stem != "v") l.expr = fresh_name(stem);
      l.owner = allocate(l.expr);
      return l;
    }
    std::string alloc_text(const Leaf& l) const {
      return fmt::format("  void* {} = quire_alloc({}, {});\n", l.expr, runtime::element_count(l.shape),
                         storage_name(l.storage));
    }

    const CValue& arg(const core::Instr& in, size_t k) const { return env.at(static_cast<size_t>(in.args.at(k))); }
    const Leaf& tensor(const core::Instr& in, size_t k) const {
      const CValue& v = arg(in, k);
      if (v.kind != Value::Kind::Tensor) fail(in.id, fmt::format("internal: operand {} is not a tensor", k));
      return v.leaf;
    }

    /// The rounding a value of natural type `from` takes where it is stored
    /// at site `in` (store_at_site): a C function's name, or "" for none.
    std::string rounding(const core::Instr& in, FloatType from, FloatType to) {
      const precision::SiteType* site =
          h.table && h.table->values.at(static_cast<size_t>(in.id)) ? &*h.table->values[static_cast<size_t>(in.id)] : nullptr;
      if (!site || site->reason == precision::Reason::Carried || from == to) return "";
      if (site->storage != to) fail(in.id, "internal: the site's type is not its buffer's");
      const bool via_f32 = precision::is_half(to) && !w.compiled_.realization->half_intermediates &&
                           !core::op_info(in.op).stored_directly;
      return w.rounding_function(via_f32 && from != FloatType::F32 ? std::vector<FloatType>{FloatType::F32, to}
                                                                   : std::vector<FloatType>{to});
    }

    void check_read_down(const core::Instr& in) const {
      const precision::SiteType* site =
          h.table && h.table->values.at(static_cast<size_t>(in.id)) ? &*h.table->values[static_cast<size_t>(in.id)] : nullptr;
      if (!site || !site->read_down) return;
      for (size_t k = 0; k < in.args.size(); ++k) {
        const CValue& v = arg(in, k);
        const auto& operand_site = h.table->values.at(static_cast<size_t>(in.args[k]));
        if (v.kind == Value::Kind::Tensor && v.leaf.elem == runtime::ElemKind::Real && v.leaf.type != site->read_as &&
            !(operand_site && operand_site->weak))
          fail(in.id, "reads an operand rounded down outside a kernel, which the C export does not write yet");
      }
    }

    void run() {
      if (h.mode != compile::FrameMode::Fused)
        throw ExportError(fmt::format("{}: a {} frame belongs to a gradient's reverse sweep, which the C export does "
                                      "not write yet",
                                      fn.name, compile::frame_mode_name(h.mode)));
      for (const HostStep& s : h.steps) {
        switch (s.kind) {
          case HostStep::Kind::Kernel: kernel_step(s); break;
          case HostStep::Kind::Reference:
            for (int m : s.steps) step(instr(m), s.why);
            break;
          case HostStep::Kind::Host: step(instr(s.value), ""); break;
          case HostStep::Kind::Call: call_step(s); break;
          case HostStep::Kind::Fold: fold_step(s); break;
          case HostStep::Kind::FoldVjp: fold_vjp_step(s); break;
        }
      }
    }

    // A kernel launch: its inputs as the kernel holds them, a packed product
    // computed first, the output allocated zero.
    void kernel_step(const HostStep& s) {
      const kernel::Kernel& k = w.compiled_.catalog->kernels().at(static_cast<size_t>(s.kernel)).kernel;
      w.kernels_.insert(s.kernel);
      std::string text;
      std::vector<const CValue*> read;
      std::vector<std::string> inputs;
      std::vector<std::string> temps_made;
      auto as_held = [&](const Leaf& l, int b) {
        const int want = storage_of(k.buffers.at(static_cast<size_t>(b)).type);
        if (want == l.storage) return l.expr;
        const std::string t = fresh_name("t");
        const int64_t n = runtime::element_count(l.shape);
        text += fmt::format("  void* {0} = quire_alloc({1}, {2});\n  quire_convert({0}, {2}, {3}, {4}, {1}, NULL);\n", t,
                            n, storage_name(want), l.expr, storage_name(l.storage));
        temps_made.push_back(t);
        return t;
      };
      for (size_t b = 0; b < s.inputs.size(); ++b) {
        const int v = s.inputs[b];
        if (v < 0) {
          inputs.push_back("");  // the scratch, below
          continue;
        }
        const CValue& cv = env.at(static_cast<size_t>(v));
        if (cv.kind != Value::Kind::Tensor) fail(s.value, "internal: a kernel reads a value that is not a tensor");
        read.push_back(&cv);
        inputs.push_back(as_held(cv.leaf, static_cast<int>(b)));
      }
      if (k.product && inputs.at(static_cast<size_t>(k.product->scratch)).empty()) {
        const kernel::PackedProduct& p = *k.product;
        const std::string c = fresh_name("t");
        const int64_t batches = runtime::element_count(p.batch);
        text += fmt::format("  void* {} = quire_alloc({}, QUIRE_FLOAT);\n", c, batches * p.m * p.n);
        temps_made.push_back(c);
        auto operand = [&](int b, FloatType read_as) {
          const CValue& cv = env.at(static_cast<size_t>(s.inputs.at(static_cast<size_t>(b))));
          const std::string round = read_as == FloatType::F64 ? "NULL" : w.rounding_function({read_as});
          return fmt::format("{}, {}, {}", cv.leaf.expr, storage_name(cv.leaf.storage), round);
        };
        text += fmt::format("  quire_packed_product({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", c, p.m,
                            p.n, p.k, operand(p.a, p.a_read), p.a_rs, p.a_cs, c_array(p.a_batch),
                            operand(p.b, p.b_read), p.b_rs, p.b_cs, c_array(p.b_batch), c_array(p.batch),
                            p.batch.size());
        inputs[static_cast<size_t>(p.scratch)] = c;
      }
      for (size_t b = 0; b < inputs.size(); ++b)
        if (inputs[b].empty()) fail(s.value, "internal: a kernel input with no value");
      Leaf out = new_tensor(s.value);
      if (out.storage != storage_of(k.buffers.back().type))
        fail(s.value, "internal: the kernel's output is held otherwise than its value");
      text += alloc_text(out);
      const kernel::Stmt* split = kernel::split_loop(k);
      text += fmt::format("  quire_k{}((const void* const[]){{{}}}, {}, 0, {});\n", s.kernel, fmt::join(inputs, ", "),
                          out.expr, split ? split->extent : 0);
      for (const std::string& t : temps_made) text += fmt::format("  quire_release({});\n", t);
      add(std::move(text), read);
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(s.value)] = std::move(v);
    }

    /// A call's arguments as slots, and the callee's result as the caller sees it.
    CValue call_instance(int callee, const std::vector<CValue>& args, const std::string& stem) {
      const Instance& inst = w.instance(callee, args);
      std::vector<std::string> slots;
      std::vector<const Leaf*> arg_leaves;
      for (const CValue& a : args) leaves_of(a, arg_leaves);
      for (const Leaf* l : arg_leaves) {
        if (l->kind == Value::Kind::Tensor) slots.push_back(fmt::format("{{.p = {}}}", l->expr));
        if (l->kind == Value::Kind::Key) slots.push_back(fmt::format("{{.k = {}}}", l->expr));
        if (l->kind == Value::Kind::Host) slots.push_back(fmt::format("{{.h = {}}}", l->expr));
      }
      const std::string r = fresh_name(stem);
      CValue result = inst.result;
      std::vector<Leaf*> leaves = leaves_of(result);
      std::string text = fmt::format("  quire_slot {}[{}];\n  {}((const quire_slot[]){{{}}}, {});\n", r,
                                     std::max<size_t>(leaves.size(), 1), inst.name,
                                     slots.empty() ? "{.h = 0}" : fmt::format("{}", fmt::join(slots, ", ")), r);
      std::vector<int> group_owner(static_cast<size_t>(inst.groups), -1);
      for (size_t j = 0; j < leaves.size(); ++j) {
        Leaf& l = *leaves[j];
        const ResultLeaf& o = inst.origins.at(j);
        l.slot = -1;
        if (o.group >= 0) {
          int& owner = group_owner.at(static_cast<size_t>(o.group));
          if (owner < 0) {
            const std::string name = fmt::format("{}_{}", r, j);
            text += fmt::format("  void* {} = {}[{}].p;\n", name, r, j);
            owner = allocate(name);
          }
          l.owner = owner;
          l.expr = allocation_names.at(static_cast<size_t>(owner));
        } else {
          const Leaf& from = *arg_leaves.at(static_cast<size_t>(o.slot));
          l.owner = from.owner;
          l.slot = from.slot;
          l.expr = fmt::format("{}[{}].{}", r, j, slot_member(l.kind));
          if (l.kind == Value::Kind::Key) {
            const std::string name = fmt::format("{}_{}", r, j);
            text += fmt::format("  const quire_key {} = {}[{}].k;\n", name, r, j);
            l.expr = name;
          }
        }
      }
      std::vector<const CValue*> read;
      for (const CValue& a : args) read.push_back(&a);
      add(std::move(text), read);
      return result;
    }

    void call_step(const HostStep& s) {
      const core::Instr& in = instr(s.value);
      std::vector<CValue> args;
      for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(in, k));
      env[static_cast<size_t>(s.value)] = call_instance(s.callee, args, "r");
    }

    // A fold: copy i called with θᵢ (each leaf's slice i, by pointer), the
    // carried value, and the further operands, a key as copy_key(K, i).
    void fold_step(const HostStep& s) {
      const core::Instr& in = instr(s.value);
      const CValue& stacked = arg(in, 0);
      if (stacked.kind != Value::Kind::Params) fail(s.value, "internal: a fold over no parameter tree");
      CValue carried = arg(in, 1);
      for (int64_t i = 0; i < s.count; ++i) {
        std::vector<CValue> args = {theta_copy(s, stacked, i), carried};
        for (size_t k = 2; k < in.args.size(); ++k) args.push_back(for_copy(arg(in, k), i));
        const int callee = static_cast<size_t>(i) < s.copies.size() ? s.copies[static_cast<size_t>(i)] : s.callee;
        carried = call_instance(callee, args, "f");
      }
      env[static_cast<size_t>(s.value)] = std::move(carried);
    }

    /// θ's slice for copy i: each leaf's elements from i · (its copy's count), by pointer.
    CValue theta_copy(const HostStep& s, const CValue& stacked, int64_t i) const {
      CValue theta = stacked;
      for (auto& [path, l] : theta.params) {
        if (l.shape.empty()) fail(s.value, fmt::format("stacked parameter `{}` has no stack axis", path));
        runtime::Shape shape(l.shape.begin() + 1, l.shape.end());
        l.expr = fmt::format("quire_offset({}, {}, {})", l.expr, storage_name(l.storage), i * runtime::element_count(shape));
        l.shape = shape;
      }
      return theta;
    }

    /// A fold operand as copy i sees it: a key as copy_key(K, i) (interp::ValueStructure::for_copy).
    CValue for_copy(CValue a, int64_t i) {
      if (a.kind != Value::Kind::Key) return a;
      const std::string name = fresh_name("key");
      add(fmt::format("  const quire_key {} = quire_copy_key({}, {});\n", name, a.leaf.expr, i), {});
      a.leaf.expr = name;
      return a;
    }

    // A fold's vjp (core/walk.h's fold_vjp): the forward copies, each copy's
    // input kept, then the copies' vjps last first, each taking the next's
    // cotangent; the result is (the forward's result, x's cotangent, the
    // copies' θ gradients stacked along a new leading axis).
    void fold_vjp_step(const HostStep& s) {
      const core::Instr& in = instr(s.value);
      if (s.copies.empty() && s.count > 0)
        fail(s.value, "a fold's vjp whose forward is kept (--remat store), which the C export does not write yet");
      const CValue& stacked = arg(in, 0);
      if (stacked.kind != Value::Kind::Params) fail(s.value, "internal: a fold over no parameter tree");
      const size_t last = in.args.size() - 1;
      std::vector<CValue> inputs;
      CValue carried = arg(in, 1);
      for (int64_t i = 0; i < s.count; ++i) {
        inputs.push_back(carried);
        std::vector<CValue> args = {theta_copy(s, stacked, i), carried};
        for (size_t k = 2; k < last; ++k) args.push_back(for_copy(arg(in, k), i));
        carried = call_instance(s.copies.at(static_cast<size_t>(i)), args, "f");
      }
      CValue ct = arg(in, last);
      std::vector<CValue> grads(static_cast<size_t>(s.count));
      for (int64_t i = s.count - 1; i >= 0; --i) {
        std::vector<CValue> args = {theta_copy(s, stacked, i), inputs[static_cast<size_t>(i)]};
        for (size_t k = 2; k < last; ++k) args.push_back(for_copy(arg(in, k), i));
        args.push_back(ct);
        CValue r = call_instance(s.vjp_copies.at(static_cast<size_t>(i)), args, "b");
        if (r.kind != Value::Kind::Tuple || r.elements.size() < 3) fail(s.value, "internal: a copy's vjp is no tuple");
        grads[static_cast<size_t>(i)] = r.elements[1];
        ct = r.elements[2];
      }
      // The gradient of the stack: each leaf's copies side by side, copy 0
      // first, held in f32 when every copy's is (interp::ValueStructure::stack).
      CValue gradient;
      gradient.kind = Value::Kind::Params;
      std::string text;
      std::vector<const CValue*> read;
      for (const CValue& g : grads) read.push_back(&g);
      for (const auto& [path, l] : stacked.params) {
        bool narrow = s.count > 0;
        for (const CValue& g : grads) {
          auto it = g.params.find(path);
          if (g.kind != Value::Kind::Params || it == g.params.end())
            fail(s.value, fmt::format("internal: a copy's gradient lacks `{}`", path));
          narrow = narrow && it->second.storage == kFloat;
        }
        Leaf out = l;
        out.storage = narrow ? kFloat : kDouble;
        out.type = narrow ? FloatType::F32 : FloatType::F64;
        out.expr = fresh_name("g");
        out.slot = -1;
        out.owner = allocate(out.expr);
        const int64_t per_copy = s.count > 0 ? runtime::element_count(l.shape) / s.count : 0;
        text += alloc_text(out);
        for (int64_t i = 0; i < s.count; ++i) {
          const Leaf& gi = grads[static_cast<size_t>(i)].params.at(path);
          text += fmt::format("  quire_convert(quire_offset({}, {}, {}), {}, {}, {}, {}, NULL);\n", out.expr,
                              storage_name(out.storage), i * per_copy, storage_name(out.storage), gi.expr,
                              storage_name(gi.storage), per_copy);
        }
        gradient.params.emplace(path, std::move(out));
      }
      add(std::move(text), read);
      CValue v;
      v.kind = Value::Kind::Tuple;
      v.elements = {carried, ct, gradient};
      env[static_cast<size_t>(s.value)] = std::move(v);
    }

    // ---- one instruction outside a kernel ----

    void store_scalar(const core::Instr& in, const std::string& value_text) {
      Leaf l = new_tensor(in.id);
      const std::string round = rounding(in, FloatType::F64, l.type);
      std::string text = alloc_text(l);
      text += fmt::format("  (({}*){})[0] = ({}){};\n", storage_ctype(l.storage), l.expr, storage_ctype(l.storage),
                          round.empty() ? value_text : fmt::format("{}({})", round, value_text));
      add(std::move(text), {});
      CValue v;
      v.leaf = std::move(l);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    void host_scalar(const core::Instr& in, double value) {
      CValue v;
      v.kind = Value::Kind::Host;
      v.leaf.kind = Value::Kind::Host;
      v.leaf.expr = c_double(value);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// A view of operand 0 under another shape (a reshape: the same elements in the same order).
    void alias(const core::Instr& in) {
      CValue v = arg(in, 0);
      const HostBuffer* b = buffer(in.id);
      if (v.kind != Value::Kind::Tensor || !b) fail(in.id, "internal: a reshape of no tensor");
      if (runtime::element_count(b->shape) != runtime::element_count(v.leaf.shape))
        fail(in.id, "internal: a reshape that changes the element count");
      v.leaf.shape = b->shape;
      stored_as_site(in, v);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// A value that a step passes on unchanged, stored at its site: where
    /// the site's type is narrower (a parameter's master read as a half),
    /// a rounded copy (store_at_site), else the value itself.
    void stored_as_site(const core::Instr& in, CValue& v) {
      if (v.kind != Value::Kind::Tensor || v.leaf.elem != runtime::ElemKind::Real) return;
      const HostBuffer* b = buffer(in.id);
      if (!b || b->type == v.leaf.type) return;
      const std::string round = rounding(in, v.leaf.type, b->type);
      if (round.empty()) return;
      Leaf out = new_tensor(in.id);
      std::string text = alloc_text(out);
      text += fmt::format("  quire_convert({}, {}, {}, {}, {}, {});\n", out.expr, storage_name(out.storage), v.leaf.expr,
                          storage_name(v.leaf.storage), runtime::element_count(out.shape), round);
      CValue from = v;
      add(std::move(text), {&from});
      v.leaf = std::move(out);
    }

    /// A copying step: the reference kernel run on position tensors, its map fitted with boxes.
    void copies(const core::Instr& in) {
      std::vector<Value> probe(env.size());
      std::vector<const CValue*> read;
      for (size_t k = 0; k < in.args.size(); ++k) {
        const CValue& a = arg(in, k);
        if (a.kind != Value::Kind::Tensor) fail(in.id, "internal: a copy of something that is not a tensor");
        probe.at(static_cast<size_t>(in.args[k])) = Value::of(position_tensor(static_cast<int>(k), a.leaf.shape, a.leaf.elem));
        read.push_back(&a);
      }
      Value r = interp::evaluate_step(fn, in, probe, h.dims, nullptr);
      Leaf out = new_tensor(in.id);
      if (r.kind != Value::Kind::Tensor || r.tensor.shape != out.shape)
        fail(in.id, "internal: the copy's shape is not its buffer's");
      const std::optional<std::vector<CopyBox>> boxes = fit_boxes(out.shape, element_sources(r.tensor));
      if (!boxes) fail(in.id, "computes elements that are no copies, which the C export does not write yet");
      std::string text = alloc_text(out);
      for (const CopyBox& c : *boxes) {
        const Leaf& from = tensor(in, static_cast<size_t>(c.operand));
        const std::string round = out.elem == runtime::ElemKind::Real ? rounding(in, from.type, out.type) : "";
        text += fmt::format("  quire_copy_box({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", out.expr,
                            storage_name(out.storage), c.dst_at, c_array(c.dst_strides), from.expr,
                            storage_name(from.storage), c.src_at, c_array(c.src_strides), c_array(c.extents),
                            c.extents.size(), round.empty() ? "NULL" : round);
      }
      add(std::move(text), read);
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// A result computed as f64 (or integers) into `natural`, then stored at the site.
    void finish_computed(const core::Instr& in, Leaf out, const std::string& natural_name, int natural_storage,
                         std::string text, const std::vector<const CValue*>& read) {
      const int64_t n = runtime::element_count(out.shape);
      if (natural_storage == out.storage && out.storage == kInt) {
        // Integers are stored as computed.
        text += fmt::format("  void* {} = {};\n", out.expr, natural_name);
      } else {
        const std::string round =
            out.elem == runtime::ElemKind::Real ? rounding(in, FloatType::F64, out.type) : std::string();
        text += alloc_text(out);
        text += fmt::format("  quire_convert({}, {}, {}, {}, {}, {});\n  quire_release({});\n", out.expr,
                            storage_name(out.storage), natural_name, storage_name(natural_storage), n,
                            round.empty() ? "NULL" : round, natural_name);
      }
      add(std::move(text), read);
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    void draw(const core::Instr& in) {
      const CValue& key = arg(in, 0);
      Leaf out = new_tensor(in.id);
      const int64_t n = runtime::element_count(out.shape);
      const std::string t = fresh_name("t");
      std::string text;
      std::vector<const CValue*> read;
      if (in.op == Op::Bernoulli) {
        const Leaf& p = tensor(in, 1);
        read.push_back(&arg(in, 1));
        text += fmt::format("  void* {0} = quire_alloc({1}, QUIRE_INT);\n  quire_draw_bernoulli({0}, {1}, {2}, "
                            "(double)(({3}*){4})[0]);\n",
                            t, n, key.leaf.expr, storage_ctype(p.storage), p.expr);
        finish_computed(in, std::move(out), t, kInt, std::move(text), read);
        return;
      }
      const core::attr::DrawParams& d = in.attr<core::attr::DrawParams>();
      text += fmt::format("  void* {0} = quire_alloc({1}, QUIRE_DOUBLE);\n  quire_draw_{2}({0}, {1}, {3}, {4}, {5});\n",
                          t, n, in.op == Op::Uniform ? "uniform" : "normal", key.leaf.expr, c_double(d.first),
                          c_double(d.second));
      finish_computed(in, std::move(out), t, kDouble, std::move(text), read);
    }

    void gather_like(const core::Instr& in) {
      const Leaf& x = tensor(in, 0);
      const Leaf& ids = tensor(in, 1);
      Leaf out = new_tensor(in.id);
      if (ids.storage != kInt || x.storage != out.storage)
        fail(in.id, "internal: a gather whose table and result are held otherwise");
      const int rest = static_cast<int>(x.shape.size() - fn.type_of(in.args[0]).tensor.axes.size());
      const int axis = in.op == Op::Gather ? in.axes.at(0) : rest + in.axes.at(0);
      auto product = [&](size_t from, size_t to) {
        int64_t p = 1;
        for (size_t d = from; d < to; ++d) p *= x.shape.at(d);
        return p;
      };
      const size_t a = static_cast<size_t>(axis);
      std::string text = alloc_text(out);
      if (in.op == Op::Gather)
        text += fmt::format("  quire_gather({}, {}, {}, {}, {}, {}, {}, {});\n", out.expr, x.expr,
                            storage_name(x.storage), product(0, a), x.shape.at(a), product(a + 1, x.shape.size()),
                            ids.expr, runtime::element_count(ids.shape));
      else
        text += fmt::format("  quire_pick({}, {}, {}, {}, {}, {}, {});\n", out.expr, x.expr, storage_name(x.storage),
                            product(0, a), x.shape.at(a), product(a + 1, x.shape.size()), ids.expr);
      add(std::move(text), {&arg(in, 0), &arg(in, 1)});
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// Whether every operand and the result of `in` hold integers or booleans.
    bool on_integers(const core::Instr& in) const {
      const HostBuffer* b = buffer(in.id);
      if (!b || b->kind != Value::Kind::Tensor || b->elem == runtime::ElemKind::Real) return false;
      for (size_t k = 0; k < in.args.size(); ++k) {
        const CValue& a = arg(in, k);
        if (a.kind != Value::Kind::Tensor || a.leaf.elem == runtime::ElemKind::Real) return false;
      }
      return true;
    }

    /// The strides that read operand k along each axis of the result (its alignment, interp::axis_map).
    std::vector<int64_t> aligned_strides(const core::Instr& in, size_t k, const runtime::Shape& result) const {
      const Leaf& l = tensor(in, k);
      const size_t explicit_k = fn.type_of(in.args.at(k)).tensor.axes.size();
      int64_t result_rest = 0;
      for (size_t j = 0; j < in.args.size(); ++j)
        if (in.align.at(j).rest)
          result_rest = std::max<int64_t>(result_rest, static_cast<int64_t>(tensor(in, j).shape.size() -
                                                                            fn.type_of(in.args.at(j)).tensor.axes.size()));
      const runtime::AxisMap map = interp::axis_map(in.align.at(k), static_cast<int64_t>(l.shape.size()), explicit_k, result_rest);
      if (map.size() != result.size()) fail(in.id, "internal: an alignment of another rank than the result");
      const std::vector<int64_t> own = runtime::contiguous_strides(l.shape);
      std::vector<int64_t> out(result.size(), 0);
      for (size_t i = 0; i < map.size(); ++i)
        if (map[i] >= 0 && l.shape.at(static_cast<size_t>(map[i])) != 1) out[i] = own[static_cast<size_t>(map[i])];
      return out;
    }

    /// The runtime's integer operation of `op` (quire_runtime.h's QUIRE_INT_…).
    static const char* int_op(Op op) {
      static const std::map<Op, const char*> names = {
          {Op::Add, "QUIRE_INT_ADD"}, {Op::Sub, "QUIRE_INT_SUB"},        {Op::Mul, "QUIRE_INT_MUL"},
          {Op::Min, "QUIRE_INT_MIN"}, {Op::Max, "QUIRE_INT_MAX"},        {Op::Lt, "QUIRE_INT_LT"},
          {Op::Le, "QUIRE_INT_LE"},   {Op::Gt, "QUIRE_INT_GT"},          {Op::Ge, "QUIRE_INT_GE"},
          {Op::Eq, "QUIRE_INT_EQ"},   {Op::Ne, "QUIRE_INT_NE"},          {Op::Neg, "QUIRE_INT_NEG"},
          {Op::Abs, "QUIRE_INT_ABS"}, {Op::Not, "QUIRE_INT_NOT"},        {Op::Relu, "QUIRE_INT_RELU"},
          {Op::Where, "QUIRE_INT_WHERE"}, {Op::Sum, "QUIRE_INT_SUM"},    {Op::ReduceMax, "QUIRE_INT_REDUCE_MAX"},
          {Op::ReduceMin, "QUIRE_INT_REDUCE_MIN"}};
      return names.at(op);
    }

    /// An element-wise step on integers (exact, as runtime::binary's integer path).
    void int_elementwise(const core::Instr& in) {
      Leaf out = new_tensor(in.id);
      std::vector<std::string> operands;
      std::vector<const CValue*> read;
      for (size_t k = 0; k < 3; ++k) {
        if (k >= in.args.size()) {
          operands.push_back("NULL, NULL");
          continue;
        }
        // A one-operand step reads its operand as it is (its alignment is the identity).
        const std::vector<int64_t> strides = in.args.size() == 1 ? runtime::contiguous_strides(out.shape)
                                                                 : aligned_strides(in, k, out.shape);
        operands.push_back(fmt::format("{}, {}", tensor(in, k).expr, c_array(strides)));
        read.push_back(&arg(in, k));
      }
      std::string text = alloc_text(out);
      text += fmt::format("  quire_int_elementwise({}, {}, {}, {}, {}, {}, {}, {});\n", int_op(in.op), out.expr,
                          c_array(out.shape), out.shape.size(), out.elem == runtime::ElemKind::I32 ? 1 : 0, operands[0],
                          operands[1], operands[2]);
      add(std::move(text), read);
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// An element-wise step with a real operand or a real result, as
    /// runtime::unary, binary and where compute it: each element in f64 by
    /// the prelude's twin of apply_unary / apply_binary (quire_add, …), then
    /// stored at the site's type.
    void real_elementwise(const core::Instr& in) {
      Leaf out = new_tensor(in.id);
      const size_t rank = out.shape.size();
      std::vector<const CValue*> read;
      std::vector<std::string> loads;
      for (size_t k = 0; k < in.args.size(); ++k) {
        const Leaf& a = tensor(in, k);
        const std::vector<int64_t> strides =
            in.args.size() == 1 ? runtime::contiguous_strides(out.shape) : aligned_strides(in, k, out.shape);
        std::string at = "0";
        for (size_t d = 0; d < rank; ++d)
          if (strides[d] != 0) at += fmt::format(" + i{} * {}", d, strides[d]);
        loads.push_back(fmt::format("(double)((const {}*){})[{}]", storage_ctype(a.storage), a.expr, at));
        read.push_back(&arg(in, k));
      }
      std::string value;
      if (in.op == Op::Where) {
        value = "x0 != 0.0 ? x1 : x2";
      } else if (in.op == Op::PowConst) {
        const double e = in.attr<core::attr::Exponent>().value;
        value = e == 2.0 ? "x0 * x0" : fmt::format("quire_pow(x0, {})", c_double(e));
      } else if (in.op == Op::Pow) {
        value = tensor(in, 1).shape.empty() ? "x1 == 2.0 ? x0 * x0 : quire_pow(x0, x1)" : "quire_pow(x0, x1)";
      } else if (in.args.size() == 1) {
        value = fmt::format("quire_{}(x0)", runtime::op_name(interp::unary_op(in.op)));
      } else {
        value = fmt::format("quire_{}(x0, x1)", runtime::op_name(interp::binary_op(in.op)));
      }
      const std::string round = out.elem == runtime::ElemKind::Real ? rounding(in, FloatType::F64, out.type) : "";
      std::string text = alloc_text(out);
      text += "  {\n    int64_t e = 0;\n";
      for (size_t d = 0; d < rank; ++d)
        text += fmt::format("    for (int64_t i{0} = 0; i{0} < {1}; ++i{0})\n", d, out.shape[d]);
      text += "    {\n";
      for (size_t k = 0; k < loads.size(); ++k) text += fmt::format("      const double x{} = {};\n", k, loads[k]);
      text += fmt::format("      const double r = {};\n", value);
      text += fmt::format("      (({0}*){1})[e++] = ({0})({2});\n", storage_ctype(out.storage), out.expr,
                          round.empty() ? "r" : round + "(r)");
      text += "    }\n  }\n";
      add(std::move(text), read);
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// The cotangent of a gather or a pick: ct's elements added (a gather's,
    /// in ct's order, each sum rounded to the site's accumulator) or placed
    /// where the forward read them, into +0.0, then stored at the site.
    void gather_adjoint(const core::Instr& in) {
      const Leaf& ct = tensor(in, 0);
      const Leaf& x = tensor(in, 1);
      const Leaf& ids = tensor(in, 2);
      const int rest = static_cast<int>(x.shape.size() - fn.type_of(in.args[1]).tensor.axes.size());
      const int axis = in.op == Op::GatherGrad ? in.axes.at(0) : rest + in.axes.at(0);
      const size_t a = static_cast<size_t>(axis);
      int64_t outer = 1, inner = 1;
      for (size_t d = 0; d < a; ++d) outer *= x.shape.at(d);
      for (size_t d = a + 1; d < x.shape.size(); ++d) inner *= x.shape.at(d);
      Leaf out = new_tensor(in.id);
      const std::string t = fresh_name("t");
      std::string text = fmt::format("  void* {} = quire_alloc({}, QUIRE_DOUBLE);\n", t, runtime::element_count(x.shape));
      if (in.op == Op::GatherGrad) {
        const precision::SiteType* site =
            h.table && h.table->values.at(static_cast<size_t>(in.id)) ? &*h.table->values[static_cast<size_t>(in.id)] : nullptr;
        const FloatType acc = site ? site->accumulator : FloatType::F64;
        text += fmt::format("  quire_gather_adjoint({}, {}, {}, {}, {}, {}, {}, {}, {});\n", t, ct.expr,
                            storage_name(ct.storage), outer, x.shape.at(a), inner, ids.expr,
                            runtime::element_count(ids.shape), acc == FloatType::F64 ? "NULL" : w.rounding_function({acc}));
      } else {
        text += fmt::format("  quire_pick_adjoint({}, {}, {}, {}, {}, {}, {});\n", t, ct.expr, storage_name(ct.storage),
                            outer, x.shape.at(a), inner, ids.expr);
      }
      finish_computed(in, std::move(out), t, kDouble, std::move(text), {&arg(in, 0), &arg(in, 2)});
    }

    /// A tree shaped as operand 0, each leaf the sum of the parts whose paths
    /// name it, in order, from +0.0 (the reference's `params`), held in f64.
    void make_params(const core::Instr& in) {
      const CValue& tree = arg(in, 0);
      std::vector<std::pair<std::string, const Leaf*>> parts;
      std::vector<const CValue*> read;
      for (size_t k = 1; k < in.args.size(); ++k) {
        const std::string& path = in.paths.at(k - 1);
        const CValue& part = arg(in, k);
        read.push_back(&part);
        if (part.kind == Value::Kind::Params)
          for (const auto& [p, l] : part.params) parts.emplace_back(path + p, &l);
        else
          parts.emplace_back(path, &part.leaf);
      }
      CValue v;
      v.kind = Value::Kind::Params;
      std::string text;
      for (const auto& [path, l] : tree.params) {
        Leaf out = l;
        out.storage = kDouble;
        out.type = FloatType::F64;
        out.elem = runtime::ElemKind::Real;
        out.slot = -1;
        out.expr = fresh_name("g");
        out.owner = allocate(out.expr);
        text += alloc_text(out);
        bool first = true;
        for (const auto& [p, part] : parts) {
          if (p != path) continue;
          if (part->shape != l.shape) fail(in.id, fmt::format("internal: a part of `{}` of another shape", path));
          text += fmt::format("  quire_accumulate({}, {}, {}, {}, {});\n", out.expr, part->expr,
                              storage_name(part->storage), runtime::element_count(l.shape), first ? 1 : 0);
          first = false;
        }
        v.params.emplace(path, std::move(out));
      }
      for (const auto& [p, part] : parts)
        if (!tree.params.count(p)) fail(in.id, fmt::format("internal: a part for `{}`, which the tree lacks", p));
      add(std::move(text), read);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    /// A reduction of integers over the axes interp::reduced_axes names.
    void int_reduce(const core::Instr& in) {
      const Leaf& x = tensor(in, 0);
      Leaf out = new_tensor(in.id);
      const int rank = static_cast<int>(x.shape.size());
      const int rest = rank - static_cast<int>(fn.type_of(in.args.at(0)).tensor.axes.size());
      const std::vector<int> axes = interp::reduced_axes(rank, rest, in.all_axes, in.axes);
      const std::vector<int64_t> strides = runtime::contiguous_strides(x.shape);
      std::vector<int64_t> kept, kept_strides, reduced, reduced_strides;
      for (int d = 0; d < rank; ++d) {
        const bool gone = std::find(axes.begin(), axes.end(), d) != axes.end();
        (gone ? reduced : kept).push_back(x.shape[static_cast<size_t>(d)]);
        (gone ? reduced_strides : kept_strides).push_back(strides[static_cast<size_t>(d)]);
      }
      if (runtime::element_count(kept) != runtime::element_count(out.shape))
        fail(in.id, "internal: a reduction whose result is not its kept axes");
      std::string text = alloc_text(out);
      text += fmt::format("  quire_int_reduce({}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", int_op(in.op), out.expr,
                          x.expr, c_array(kept), c_array(kept_strides), kept.size(), c_array(reduced),
                          c_array(reduced_strides), reduced.size(), out.elem == runtime::ElemKind::I32 ? 1 : 0);
      add(std::move(text), {&arg(in, 0)});
      CValue v;
      v.leaf = std::move(out);
      env[static_cast<size_t>(in.id)] = std::move(v);
    }

    void step(const core::Instr& in, const std::string& why) {
      check_read_down(in);
      auto no_twin = [&]() {
        fail(in.id, fmt::format("{} runs on the reference kernels{}, and the C export has no twin of it yet",
                                core::op_info(in.op).spelling, why.empty() ? "" : fmt::format(" ({})", why)));
      };
      switch (in.op) {
        case Op::Const: store_scalar(in, c_double(in.attr<core::attr::Literal>().value)); return;
        case Op::HostConst: host_scalar(in, in.attr<core::attr::Literal>().value); return;
        case Op::ConstInt: host_scalar(in, static_cast<double>(in.attr<core::attr::Integer>().value)); return;
        case Op::ConstBool: host_scalar(in, in.attr<core::attr::Boolean>().value ? 1.0 : 0.0); return;
        case Op::Real: {
          const CValue& a = arg(in, 0);
          if (a.kind != Value::Kind::Host) fail(in.id, "internal: `real` of no host scalar");
          store_scalar(in, a.leaf.expr);
          return;
        }
        case Op::Field: {
          const CValue& tree = arg(in, 0);
          const std::string& name = in.attr<core::attr::Member>().name;
          CValue v;
          if (in.type.kind == elab::TypeKind::Tensor) {
            auto it = tree.params.find(name);
            if (it == tree.params.end()) fail(in.id, fmt::format("parameter `{}` is missing", name));
            v.leaf = it->second;
            stored_as_site(in, v);
          } else {
            v.kind = Value::Kind::Params;
            for (const auto& [path, l] : tree.params)
              if (path.size() > name.size() && path.compare(0, name.size(), name) == 0 && path[name.size()] == '.')
                v.params.emplace(path.substr(name.size() + 1), l);
          }
          env[static_cast<size_t>(in.id)] = std::move(v);
          return;
        }
        case Op::TupleGet: {
          const CValue& t = arg(in, 0);
          const size_t i = static_cast<size_t>(in.attr<core::attr::Element>().index);
          if (t.kind != Value::Kind::Tuple || i >= t.elements.size()) fail(in.id, "internal: no such element");
          env[static_cast<size_t>(in.id)] = t.elements[i];
          return;
        }
        case Op::MakeTuple: {
          CValue v;
          v.kind = Value::Kind::Tuple;
          for (size_t k = 0; k < in.args.size(); ++k) v.elements.push_back(arg(in, k));
          env[static_cast<size_t>(in.id)] = std::move(v);
          return;
        }
        case Op::KeySplit: {
          const CValue& k = arg(in, 0);
          CValue v;
          v.kind = Value::Kind::Tuple;
          std::string text;
          for (int second = 0; second < 2; ++second) {
            CValue part;
            part.kind = Value::Kind::Key;
            part.leaf.kind = Value::Kind::Key;
            part.leaf.expr = fresh_name("key");
            text += fmt::format("  const quire_key {} = quire_split_key({}, {});\n", part.leaf.expr, k.leaf.expr, second);
            v.elements.push_back(std::move(part));
          }
          add(std::move(text), {});
          env[static_cast<size_t>(in.id)] = std::move(v);
          return;
        }
        case Op::SplitAxis:
        case Op::ReshapeAs: alias(in); return;
        case Op::MergeAxes:
        case Op::Transpose:
        case Op::Concat:
        case Op::Slice:
        case Op::MergeGrad:
        case Op::ConcatGrad:
        case Op::SliceGrad: copies(in); return;
        case Op::Expand:
          if (in.attr<core::attr::ExpandOf>().mean) no_twin();
          copies(in);
          return;
        case Op::ZerosLike: {
          Leaf out = new_tensor(in.id);
          add(alloc_text(out), {});
          CValue v;
          v.leaf = std::move(out);
          env[static_cast<size_t>(in.id)] = std::move(v);
          return;
        }
        case Op::Gather:
        case Op::Pick: gather_like(in); return;
        case Op::OneHot: {
          const Leaf& ids = tensor(in, 0);
          Leaf out = new_tensor(in.id);
          const int64_t classes = out.shape.empty() ? 0 : out.shape.back();
          const std::string t = fresh_name("t");
          std::string text = fmt::format("  void* {0} = quire_alloc({1}, QUIRE_DOUBLE);\n  quire_one_hot({0}, {2}, {3}, {4});\n",
                                         t, runtime::element_count(out.shape), ids.expr,
                                         runtime::element_count(ids.shape), classes);
          finish_computed(in, std::move(out), t, kDouble, std::move(text), {&arg(in, 0)});
          return;
        }
        case Op::Iota: {
          Leaf out = new_tensor(in.id);
          std::string text = alloc_text(out);
          text += fmt::format("  quire_iota({}, {});\n", out.expr, runtime::element_count(out.shape));
          add(std::move(text), {});
          CValue v;
          v.leaf = std::move(out);
          env[static_cast<size_t>(in.id)] = std::move(v);
          return;
        }
        case Op::Uniform:
        case Op::Normal:
        case Op::Bernoulli: draw(in); return;
        case Op::Call:
        case Op::Fold:
        case Op::FoldVjp:
          fail(in.id, "internal: a call outside a call step");
        case Op::MakeParams: make_params(in); return;
        case Op::PickGrad:
        case Op::GatherGrad: gather_adjoint(in); return;
        case Op::Neg:
        case Op::Abs:
        case Op::Not:
        case Op::Relu:
        case Op::Add:
        case Op::Sub:
        case Op::Mul:
        case Op::Min:
        case Op::Max:
        case Op::Lt:
        case Op::Le:
        case Op::Gt:
        case Op::Ge:
        case Op::Eq:
        case Op::Ne:
        case Op::Where:
          if (on_integers(in))
            int_elementwise(in);
          else
            real_elementwise(in);
          return;
        case Op::Exp:
        case Op::Log:
        case Op::Sqrt:
        case Op::Rsqrt:
        case Op::Tanh:
        case Op::Erf:
        case Op::Sigmoid:
        case Op::Gelu:
        case Op::GeluTanh:
        case Op::Silu:
        case Op::Log1p:
        case Op::Expm1:
        case Op::Softplus:
        case Op::Div:
        case Op::Pow:
        case Op::PowConst: real_elementwise(in); return;
        case Op::Sum:
        case Op::ReduceMax:
        case Op::ReduceMin:
          if (!on_integers(in)) no_twin();
          int_reduce(in);
          return;
        case Op::Cast:
        case Op::Mean:
        case Op::LogSumExp:
        case Op::Dot:
        case Op::Contract:
        case Op::SumTo:
        case Op::ContractGradA:
        case Op::ContractGradB:
#ifdef QUIRE_TEST_EXTRA_OP
        case Op::TestExtraOp:
#endif
          no_twin();
      }
      no_twin();
    }

    /// The statements, with each allocation released after its last reader
    /// (or after its writer, when nothing reads it), those returned excepted.
    std::string body() const {
      std::vector<int> last(allocation_names.size(), -1);
      std::vector<int> made(allocation_names.size(), -1);
      for (size_t e = 0; e < events.size(); ++e)
        for (int a : events[e].reads) last[static_cast<size_t>(a)] = static_cast<int>(e);
      // An allocation is made by the event during which it was named: the
      // first event after it was allocated.
      size_t next = 0;
      for (size_t e = 0; e < events.size(); ++e)
        for (; next < allocation_names.size(); ++next) {
          if (events[e].text.find(allocation_names[next]) == std::string::npos) break;
          made[next] = static_cast<int>(e);
        }
      std::string out;
      for (size_t e = 0; e < events.size(); ++e) {
        out += events[e].text;
        for (size_t a = 0; a < allocation_names.size(); ++a) {
          if (returned.count(static_cast<int>(a))) continue;
          const int end = std::max(last[a], made[a]);
          if (end == static_cast<int>(e)) out += fmt::format("  quire_release({});\n", allocation_names[a]);
        }
      }
      return out;
    }
  };

  /// A C function that rounds to each type of `chain` in turn.
  std::string rounding_function(const std::vector<FloatType>& chain) {
    std::vector<std::string> names;
    for (FloatType t : chain) names.push_back(runtime::float_type_name(t));
    const std::string name = fmt::format("quire_store_{}", fmt::join(names, "_"));
    std::string body = "x";
    for (FloatType t : chain) body = fmt::format("quire_round_{}({})", runtime::float_type_name(t), body);
    roundings_.insert(fmt::format("static double {}(double x) {{ return {}; }}\n", name, body));
    return name;
  }

  [[noreturn]] static void fail_plain(const std::string& why) { throw ExportError(why); }

  const elab::Program& prog_;
  const compile::CompiledProgram& compiled_;
  const compile::HostProgram& host_;
  const precision::Realization* realization_;
  std::map<int, Instance> instances_;
  std::string functions_;
  std::set<int> kernels_;
  std::set<std::string> roundings_;
  int depth_ = 0;
  const Instance* root_ = nullptr;
  std::vector<CValue> root_args_;
  std::vector<std::string> root_names_;
};

// ---- values as .npy bytes, as quire_runtime.c writes them ----

std::string npy_bytes(const std::string& descr, const std::string& data, const runtime::Shape& shape) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (", descr);
  for (size_t d = 0; d < shape.size(); ++d) dict += fmt::format("{}{}", d ? ", " : "", shape[d]);
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t header = dict.size() + 1 + (64 - unpadded % 64) % 64;
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header & 0xff);
  out += static_cast<char>(header >> 8);
  out += dict;
  out += std::string(header - dict.size() - 1, ' ');
  out += '\n';
  out += data;
  return out;
}

template <class T>
void append(std::string& data, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  data.append(bytes, sizeof(T));
}

/// A leaf's value as the exported program reads and writes it.
std::string leaf_npy(const Leaf& l, const Value& v) {
  std::string data;
  switch (l.kind) {
    case Value::Kind::Key:
      append<int64_t>(data, v.key.k0);
      append<int64_t>(data, v.key.k1);
      return npy_bytes("<i8", data, {2});
    case Value::Kind::Host: append<double>(data, v.host); return npy_bytes("<f8", data, {});
    case Value::Kind::Tensor:
    case Value::Kind::Tuple:
    case Value::Kind::Params: break;
  }
  const runtime::Tensor& t = v.tensor;
  if (!t.is_real()) {
    for (int64_t x : t.ints) append<int64_t>(data, x);
    return npy_bytes("<i8", data, t.shape);
  }
  const size_t n = t.reals.size();
  if (l.storage == kFloat) {
    for (size_t i = 0; i < n; ++i) append<float>(data, static_cast<float>(t.reals[i]));
    return npy_bytes("<f4", data, t.shape);
  }
  for (size_t i = 0; i < n; ++i) append<double>(data, t.reals[i]);
  return npy_bytes("<f8", data, t.shape);
}

/// The leaves of a run-time value, in leaves_of's order.
void value_leaves(const Value& v, std::vector<Value>& out) {
  switch (v.kind) {
    case Value::Kind::Tensor:
    case Value::Kind::Key:
    case Value::Kind::Host: out.push_back(v); return;
    case Value::Kind::Tuple:
      for (const Value& e : v.elements) value_leaves(e, out);
      return;
    case Value::Kind::Params:
      for (const auto& [path, t] : *v.params) out.push_back(Value::of(t));
      return;
  }
}

/// The descriptor of an entry argument (or a result) from its run-time value.
CValue describe(const Value& v, const precision::Realization* r, const std::string& path) {
  CValue c;
  c.kind = v.kind;
  switch (v.kind) {
    case Value::Kind::Tensor:
      c.leaf.kind = Value::Kind::Tensor;
      c.leaf.elem = v.tensor.kind;
      c.leaf.type = v.type;
      c.leaf.shape = v.tensor.shape;
      c.leaf.storage = v.tensor.is_real() ? storage_of(v.type) : kInt;
      return c;
    case Value::Kind::Key:
    case Value::Kind::Host: c.leaf.kind = v.kind; return c;
    case Value::Kind::Tuple:
      for (size_t i = 0; i < v.elements.size(); ++i)
        c.elements.push_back(describe(v.elements[i], r, fmt::format("{}.{}", path, i)));
      return c;
    case Value::Kind::Params:
      for (const auto& [p, t] : *v.params) {
        Leaf l;
        l.kind = Value::Kind::Tensor;
        l.elem = t.kind;
        l.shape = t.shape;
        const precision::ParamStorage* stored = r ? r->param(p) : nullptr;
        l.type = stored ? stored->stored : FloatType::F64;
        l.storage = t.is_real() ? storage_of(l.type) : kInt;
        c.params.emplace(p, std::move(l));
      }
      return c;
  }
  return c;
}

/// A C string literal of `s` (UTF-8 bytes kept; quotes, backslashes and controls escaped).
std::string c_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\')
      out += fmt::format("\\{}", static_cast<char>(ch));
    else if (ch < 0x20)
      out += fmt::format("\\{:03o}", ch);
    else
      out += static_cast<char>(ch);
  }
  return out + "\"";
}

std::string main_function(const Writer& w, const std::vector<CValue>& args, const std::vector<std::string>& names,
                          const std::vector<std::string>& result_names) {
  std::string text =
      "int main(int argc, char** argv) {\n"
      "  if (argc != 3) {\n"
      "    fprintf(stderr, \"usage: %s INPUTS OUTPUTS (folders: each input and output is a .npy file named as listed "
      "in README.md)\\n\", argv[0]);\n"
      "    return 2;\n"
      "  }\n"
      "  char path[4096];\n";
  std::vector<std::string> slots;
  int j = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<const Leaf*> leaves;
    leaves_of(args[i], leaves);
    std::vector<std::string> leaf_path;
    leaf_names(args[i], names[i], leaf_path);
    for (size_t k = 0; k < leaves.size(); ++k, ++j) {
      const Leaf& l = *leaves[k];
      text += fmt::format("  snprintf(path, sizeof path, \"%s/%s.npy\", argv[1], {});\n", c_string(leaf_path[k]));
      if (l.kind == Value::Kind::Key) {
        text += fmt::format("  const quire_key a{} = quire_read_key(path);\n", j);
        slots.push_back(fmt::format("{{.k = a{}}}", j));
      } else if (l.kind == Value::Kind::Host) {
        text += fmt::format("  const double a{} = quire_read_scalar(path);\n", j);
        slots.push_back(fmt::format("{{.h = a{}}}", j));
      } else {
        const std::string round = l.elem == runtime::ElemKind::Real && l.type != FloatType::F64
                                      ? fmt::format("quire_round_{}", runtime::float_type_name(l.type))
                                      : "NULL";
        text += fmt::format("  void* a{} = quire_read_npy(path, {}, {}, {}, {});\n", j, storage_name(l.storage),
                            c_array(l.shape), l.shape.size(), round);
        slots.push_back(fmt::format("{{.p = a{}}}", j));
      }
    }
  }
  std::vector<const Leaf*> results;
  leaves_of(w.root().result, results);
  text += fmt::format("  quire_slot result[{}];\n  {}((const quire_slot[]){{{}}}, result);\n",
                      std::max<size_t>(results.size(), 1), w.root().name,
                      slots.empty() ? "{.h = 0}" : fmt::format("{}", fmt::join(slots, ", ")));
  for (size_t k = 0; k < results.size(); ++k) {
    const Leaf& l = *results[k];
    text += fmt::format("  snprintf(path, sizeof path, \"%s/%s.npy\", argv[2], {});\n", c_string(result_names[k]));
    if (l.kind == Value::Kind::Key)
      text += fmt::format("  quire_write_key(path, result[{}].k);\n", k);
    else if (l.kind == Value::Kind::Host)
      text += fmt::format("  quire_write_scalar(path, result[{}].h);\n", k);
    else
      text += fmt::format("  quire_write_npy(path, result[{}].p, {}, {}, {});\n", k, storage_name(l.storage),
                          c_array(l.shape), l.shape.size());
  }
  // The outputs the root made are released; those it borrowed are the inputs'.
  for (size_t k = 0; k < results.size(); ++k)
    if (w.root().origins.at(k).group >= 0) {
      bool first = true;
      for (size_t e = 0; e < k; ++e)
        first = first && w.root().origins[e].group != w.root().origins[k].group;
      if (first) text += fmt::format("  quire_release(result[{}].p);\n", k);
    }
  for (int a = 0; a < j; ++a)
    if (slots[static_cast<size_t>(a)].rfind("{.p", 0) == 0) text += fmt::format("  quire_release(a{});\n", a);
  text += "  return 0;\n}\n";
  return text;
}

constexpr const char* kMakefile = R"(# Builds the exported program and checks it against the native backend.
#   make            the program
#   make check      runs it on check/inputs and compares every output with
#                   check/expected, byte for byte
# The flags after $(CFLAGS) keep the bits: no contraction of a*b+c into an
# FMA, no fast-math (the same flags the native backend compiles kernels with).
CC ?= cc
CFLAGS ?= -O2
QUIRE_FLAGS = -std=c11 -ffp-contract=off -fno-fast-math -fopenmp-simd -fno-math-errno -Wall -Wextra -Werror
SOURCES = program.c kernels.c quire_runtime.c

program: $(SOURCES) quire_runtime.h quire_prelude.h
	$(CC) $(CFLAGS) $(QUIRE_FLAGS) -o $@ $(SOURCES) -lm

check: program
	rm -rf check/out
	mkdir -p check/out
	./program check/inputs check/out
	@n=0; for f in check/expected/*.npy; do \
	  cmp "$$f" "check/out/$${f##*/}" || exit 1; n=$$((n + 1)); \
	done; echo "check: $$n outputs equal to the native backend's, bit for bit"

clean:
	rm -rf program check/out

.PHONY: check clean
)";

}  // namespace

std::vector<ExportedFile> export_c(const CExportRequest& request) {
  const elab::Program& prog = *request.prog;
  const compile::CompiledProgram& compiled = *request.compiled;
  const core::Function& entry = prog.functions.at(static_cast<size_t>(compiled.host.entry));
  const precision::Realization* r = compiled.realization.get();
  if (request.arguments.size() != entry.args.size())
    throw ExportError(fmt::format("`{}` takes {} arguments, given {}", entry.name, entry.args.size(),
                                  request.arguments.size()));
  std::vector<CValue> args;
  std::vector<std::string> names;
  for (size_t i = 0; i < request.arguments.size(); ++i) {
    names.push_back(entry.args[i].name);
    args.push_back(describe(request.arguments[i], r, names.back()));
  }
  Writer w(request);
  w.write_program(args, names);

  std::vector<std::string> result_names;
  leaf_names(w.root().result, "result", result_names);

  std::vector<ExportedFile> files;
  // program.c: the host program and main.
  std::string program = fmt::format(
      "/* program.c: `{}` of {} as a standalone C program, written by quire export --target c.\n"
      "   One function per instance of the host program (quire dump --stage host), the root last,\n"
      "   then main, which reads the inputs and writes the outputs as .npy files. */\n"
      "#include <stdio.h>\n#include <stdlib.h>\n\n#include \"quire_prelude.h\"\n#include \"quire_runtime.h\"\n\n",
      entry.name, request.source);
  for (int k : w.kernels())
    program += fmt::format("void quire_k{}(const void* const* inputs, void* output, int64_t lo, int64_t hi);\n", k);
  program += "\n/* Where a value is stored in a narrower type than it was computed in (store_at_site). */\n";
  for (const std::string& f : w.roundings()) program += f;
  program += "\n" + w.functions();
  program += main_function(w, args, names, result_names);
  files.push_back({"program.c", program});

  std::string kernels = "/* kernels.c: the kernels of the host program, as the native backend emits them. */\n";
  for (int k : w.kernels()) {
    const kernel::KernelRecord& rec = compiled.catalog->kernels().at(static_cast<size_t>(k));
    kernels += fmt::format("\n/* ---- kernel k{}: {} ---- */\n", k, rec.kernel.title);
    kernels += native::emit_c(rec.kernel, fmt::format("quire_k{}", k));
  }
  if (w.kernels().empty()) kernels += "typedef int quire_no_kernels; /* a translation unit may not be empty */\n";
  files.push_back({"kernels.c", kernels});
  files.push_back({"quire_prelude.h", "/* quire_prelude.h: the element helpers every kernel uses (native/c_emit.h). */\n" +
                                          native::c_prelude()});
  files.push_back({"quire_runtime.h", c_runtime_header()});
  files.push_back({"quire_runtime.c", c_runtime_source()});
  files.push_back({"Makefile", kMakefile});

  // The recorded inputs and outputs.
  std::vector<std::string> input_lines, output_lines;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<Value> values;
    value_leaves(request.arguments[i], values);
    std::vector<const Leaf*> leaves;
    leaves_of(args[i], leaves);
    std::vector<std::string> leaf_path;
    leaf_names(args[i], names[i], leaf_path);
    if (values.size() != leaves.size()) throw ExportError("internal: the arguments' leaves disagree");
    for (size_t k = 0; k < leaves.size(); ++k) {
      files.push_back({"check/inputs/" + leaf_path[k] + ".npy", leaf_npy(*leaves[k], values[k])});
      input_lines.push_back(leaf_path[k]);
    }
  }
  std::vector<Value> result_values;
  value_leaves(request.result, result_values);
  std::vector<const Leaf*> result_leaves;
  leaves_of(w.root().result, result_leaves);
  if (result_values.size() != result_leaves.size()) throw ExportError("internal: the result's leaves disagree");
  for (size_t k = 0; k < result_leaves.size(); ++k) {
    files.push_back({"check/expected/" + result_names[k] + ".npy", leaf_npy(*result_leaves[k], result_values[k])});
    output_lines.push_back(result_names[k]);
  }

  // The lists, one line each.
  auto list = [](const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += fmt::format("- `{}`\n", l);
    return out.empty() ? std::string("(none)\n") : out;
  };
  const std::string readme = fmt::format(
      "# `{}` as a C program\n\n"
      "Written by `{}`.\n\n"
      "A standalone C11 program: the host program of one call of `{}` at the dimensions and types it was compiled "
      "for, its kernels as quire's native backend compiles them, and a runtime. It needs a C compiler, libc and "
      "libm, nothing else.\n\n"
      "```\nmake                 # builds ./program\n./program INPUTS OUTPUTS\nmake check           # runs it on "
      "check/inputs and compares each output with check/expected, byte for byte\n```\n\n"
      "`check/expected` holds what quire's native backend computed on `check/inputs`; `make check` passes only when "
      "every output file is the same bytes. Under AddressSanitizer: `make clean check CFLAGS=\"-O1 -g "
      "-fsanitize=address,undefined\"`.\n\n"
      "## Inputs\n\nEach is `INPUTS/<name>.npy`, little-endian, in C order, of the shape it was exported for: `<f8` "
      "or `<f4` for reals (rounded to their type on reading), `<i8`, `<i4` or `|b1` for integers and booleans, a "
      "key as two `<i8` words, a host scalar as a 0-d `<f8`.\n\n{}\n"
      "## Outputs\n\nEach is written as `OUTPUTS/<name>.npy`: `<f8` for f64, `<f4` for f32, bf16 and f16 (each "
      "value exact in f32), `<i8` for integers and booleans.\n\n{}",
      entry.name, request.command, entry.name, list(input_lines), list(output_lines));
  files.insert(files.begin() + 6, {"README.md", readme});
  return files;
}

}  // namespace quire::exports

#include "quire/export/c_host.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

#include "quire/compile/memory_placement.h"
#include "quire/core/printer.h"
#include "quire/native/c_emit.h"
#include "quire/realize/realization.h"
#include "quire/runtime/float_types.h"

namespace quire::exports::c_detail {

using core::Op;

const char* storage_name(int storage) {
  return storage == kFloat ? "QUIRE_FLOAT" : storage == kInt ? "QUIRE_INT" : "QUIRE_DOUBLE";
}
const char* storage_ctype(int storage) { return storage == kFloat ? "float" : storage == kInt ? "int64_t" : "double"; }

/// How a real value of type `t` is held: the narrow float types as float, the rest as double.
int storage_of(FloatType t) {
  return t == FloatType::F32 || t == FloatType::BF16 || t == FloatType::F16 ? kFloat : kDouble;
}
int storage_of(kernel::ElemType t) { return kernel::held_as_f32(t) ? kFloat : kernel::is_float(t) ? kDouble : kInt; }

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

void leaves_of(const CValue& v, std::vector<const Leaf*>& out) {
  switch (v.kind) {
    case Value::Kind::Tensor:
    case Value::Kind::Key:
    case Value::Kind::Host:
      out.push_back(&v.leaf);
      return;
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
    case Value::Kind::Host:
      out.push_back(path);
      return;
    case Value::Kind::Tuple:
      for (size_t i = 0; i < v.elements.size(); ++i) leaf_names(v.elements[i], fmt::format("{}.{}", path, i), out);
      return;
    case Value::Kind::Params:
      for (const auto& [p, l] : v.params) out.push_back(path + "." + p);
      return;
  }
}

const char* slot_member(Value::Kind k) { return k == Value::Kind::Key ? "k" : k == Value::Kind::Host ? "h" : "p"; }

Frame::Frame(HostWriter& writer, int instance)
    : w(writer),
      h(writer.host_.functions.at(static_cast<size_t>(instance))),
      fn(writer.prog_.functions.at(static_cast<size_t>(h.function))),
      env(static_cast<size_t>(fn.value_count()) + 1) {}

const Instance& HostWriter::instance(int id, const std::vector<CValue>& at_call) {
  if (auto it = instances_.find(id); it != instances_.end()) return it->second;
  if (++depth_ > 256) throw ExportError("calls nest deeper than the export follows");
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
        throw ExportError(fmt::format("internal: {} returns a view into its own buffer", f.fn.name));
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
  inst.group_names.resize(group_of.size());
  for (const auto& [owner, group] : group_of)
    inst.group_names[static_cast<size_t>(group)] = f.allocation_names.at(static_cast<size_t>(owner));
  inst.result = result;
  std::string text =
      fmt::format("/* {} ({}): {} */\nstatic void {}(const quire_slot* in, quire_slot* out) {{\n",
                  prog_.functions.at(static_cast<size_t>(f.h.function)).name,
                  f.h.signature.empty() ? "-" : f.h.signature, compile::frame_mode_name(f.h.mode), inst.name);
  if (slot == 0) text += "  (void)in;\n";
  text += f.body(inst.actions);
  text += out;
  text += "}\n\n";
  functions_ += text;
  --depth_;
  return instances_.emplace(id, std::move(inst)).first->second;
}

/// A C function that rounds to each type of `chain` in turn.
std::string HostWriter::rounding_function(const std::vector<FloatType>& chain) {
  std::vector<std::string> names;
  for (FloatType t : chain) names.push_back(runtime::float_type_name(t));
  const std::string name = fmt::format("quire_store_{}", fmt::join(names, "_"));
  std::string body = "x";
  for (FloatType t : chain) body = fmt::format("quire_round_{}({})", runtime::float_type_name(t), body);
  roundings_.insert(fmt::format("static double {}(double x) {{ return {}; }}\n", name, body));
  return name;
}

std::vector<size_t> HostWriter::expand(int id, std::vector<std::array<int64_t, 3>>& lives, int64_t& time,
                                       int depth) const {
  if (depth > 256) throw ExportError("calls nest deeper than the export follows");
  const Instance& inst = instances_.at(id);
  std::map<std::string, size_t> made;  // by variable: its allocation in `lives`
  for (const Action& a : inst.actions) switch (a.kind) {
      case Action::Kind::Alloc:
        made[a.name] = lives.size();
        lives.push_back({time++, -1, a.bytes});
        break;
      case Action::Kind::Release: {
        auto it = made.find(a.name);
        if (it == made.end())
          throw ExportError(fmt::format("internal: {} releases `{}`, which it never made", inst.name, a.name));
        lives.at(it->second)[1] = time++;
        break;
      }
      case Action::Kind::Call: {
        const std::vector<size_t> result = expand(a.callee, lives, time, depth + 1);
        if (result.size() != a.groups.size()) throw ExportError("internal: a call's result groups disagree");
        for (size_t g = 0; g < result.size(); ++g) made[a.groups[g]] = result[g];
        break;
      }
    }
  std::vector<size_t> out;
  for (const std::string& n : inst.group_names) out.push_back(made.at(n));
  return out;
}

Arena HostWriter::arena() const {
  std::vector<std::array<int64_t, 3>> lives;
  int64_t time = 0;
  expand(host_.root, lives, time, 0);
  Arena a;
  std::vector<compile::Lifetime> placed;
  for (auto& [start, end, bytes] : lives) {
    if (end < 0) end = time + 1;  // the root's result: until the program writes it
    placed.push_back({start, end, bytes});
    a.sizes.push_back(bytes);
  }
  const compile::Placement p = compile::place_by_size(placed);
  a.offsets = p.offsets;
  a.bytes = p.arena_bytes;
  // The peak of live bytes, for the README beside the arena.
  std::vector<std::pair<int64_t, int64_t>> changes;
  for (const compile::Lifetime& l : placed) {
    changes.push_back({l.start, l.bytes});
    changes.push_back({l.end, -l.bytes});
  }
  std::sort(changes.begin(), changes.end());
  int64_t live = 0;
  for (const auto& [t, d] : changes) {
    live += d;
    a.peak = std::max(a.peak, live);
  }
  return a;
}

const core::Instr& Frame::instr(int v) const {
  return fn.body.at(static_cast<size_t>(v - static_cast<int>(fn.args.size()) - 1));
}

const HostBuffer* Frame::buffer(int v) const {
  for (const HostBuffer& b : h.buffers)
    if (b.value == v) return &b;
  return nullptr;
}

[[noreturn]] void Frame::fail(int v, const std::string& why) const {
  throw ExportError(fmt::format("{}: {}", core::site_name(fn, v), why));
}

/// A new allocation of the frame, its base pointer held in the variable `name`.
int Frame::allocate(const std::string& name) {
  allocation_names.push_back(name);
  return static_cast<int>(allocation_names.size()) - 1;
}

void Frame::bind(int value, Leaf l) {
  CValue v;
  v.leaf = std::move(l);
  env[static_cast<size_t>(value)] = std::move(v);
}

void Frame::add(std::string text, const std::vector<const CValue*>& read) {
  Event e;
  e.text = std::move(text);
  e.actions = std::move(pending);
  pending.clear();
  for (const CValue* v : read) {
    std::vector<const Leaf*> ls;
    leaves_of(*v, ls);
    for (const Leaf* l : ls)
      if (l->owner >= 0) e.reads.insert(l->owner);
  }
  events.push_back(std::move(e));
}

/// A tensor leaf for value v, freshly allocated by the statement that follows.
Leaf Frame::new_tensor(int v, const std::string& stem) {
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

std::string Frame::alloc_text(const Leaf& l) { return alloc_named(l.expr, runtime::element_count(l.shape), l.storage); }

std::string Frame::alloc_named(const std::string& name, int64_t n, int storage) {
  Action a;
  a.kind = Action::Kind::Alloc;
  a.name = name;
  a.bytes = std::max<int64_t>(n, 1) * (storage == kFloat ? 4 : 8);
  pending.push_back(std::move(a));
  return fmt::format("  void* {} = quire_alloc({}, {});\n", name, n, storage_name(storage));
}

std::string Frame::release_named(const std::string& name) {
  Action a;
  a.kind = Action::Kind::Release;
  a.name = name;
  pending.push_back(std::move(a));
  return fmt::format("  quire_release({});\n", name);
}

const Leaf& Frame::tensor(const core::Instr& in, size_t k) const {
  const CValue& v = arg(in, k);
  if (v.kind != Value::Kind::Tensor) fail(in.id, fmt::format("internal: operand {} is not a tensor", k));
  return v.leaf;
}

/// The rounding a value of natural type `from` takes where it is stored
/// at site `in` (store_at_site): a C function's name, or "" for none.
std::string Frame::rounding(const core::Instr& in, FloatType from, FloatType to) {
  const precision::SiteType* site = h.table && h.table->values.at(static_cast<size_t>(in.id))
                                        ? &*h.table->values[static_cast<size_t>(in.id)]
                                        : nullptr;
  if (!site || site->reason == precision::Reason::Carried || from == to) return "";
  if (site->storage != to) fail(in.id, "internal: the site's type is not its buffer's");
  const bool via_f32 =
      precision::is_half(to) && !w.compiled_.realization->half_intermediates && !core::op_info(in.op).stored_directly;
  return w.rounding_function(via_f32 && from != FloatType::F32 ? std::vector<FloatType>{FloatType::F32, to}
                                                               : std::vector<FloatType>{to});
}

void Frame::check_read_down(const core::Instr& in) const {
  const precision::SiteType* site = h.table && h.table->values.at(static_cast<size_t>(in.id))
                                        ? &*h.table->values[static_cast<size_t>(in.id)]
                                        : nullptr;
  if (!site || !site->read_down) return;
  for (size_t k = 0; k < in.args.size(); ++k) {
    const CValue& v = arg(in, k);
    const auto& operand_site = h.table->values.at(static_cast<size_t>(in.args[k]));
    if (v.kind == Value::Kind::Tensor && v.leaf.elem == runtime::ElemKind::Real && v.leaf.type != site->read_as &&
        !(operand_site && operand_site->weak))
      fail(in.id, "reads an operand rounded down outside a kernel, which the C export does not write yet");
  }
}

void Frame::run() {
  if (h.mode != compile::FrameMode::Fused)
    throw ExportError(
        fmt::format("{}: a {} frame belongs to a gradient's reverse sweep, which the C export does "
                    "not write yet",
                    fn.name, compile::frame_mode_name(h.mode)));
  for (const HostStep& s : h.steps) {
    switch (s.kind) {
      case HostStep::Kind::Kernel:
        kernel_step(s);
        break;
      case HostStep::Kind::Reference:
        for (int m : s.steps) step(instr(m), s.why);
        break;
      case HostStep::Kind::Host:
        step(instr(s.value), "");
        break;
      case HostStep::Kind::Call:
        call_step(s);
        break;
      case HostStep::Kind::Fold:
        fold_step(s);
        break;
      case HostStep::Kind::FoldVjp:
        fold_vjp_step(s);
        break;
      case HostStep::Kind::Library:
        // The export compiles without library kernels (CompileRequest::library_kernels).
        throw std::logic_error(fmt::format("internal: `{}` is a library kernel in the C export", fn.name));
    }
  }
}

// A kernel launch: its inputs as the kernel holds them, a packed product
// computed first, the output allocated zero.
void Frame::kernel_step(const HostStep& s) {
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
    text += alloc_named(t, n, want);
    text += fmt::format("  quire_convert({0}, {2}, {3}, {4}, {1}, NULL);\n", t, n, storage_name(want), l.expr,
                        storage_name(l.storage));
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
    text += alloc_named(c, batches * p.m * p.n, kFloat);
    temps_made.push_back(c);
    auto operand = [&](int b, FloatType read_as) {
      const CValue& cv = env.at(static_cast<size_t>(s.inputs.at(static_cast<size_t>(b))));
      const std::string round = read_as == FloatType::F64 ? "NULL" : w.rounding_function({read_as});
      return fmt::format("{}, {}, {}", cv.leaf.expr, storage_name(cv.leaf.storage), round);
    };
    text += fmt::format("  quire_packed_product({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});\n", c, p.m,
                        p.n, p.k, operand(p.a, p.a_read), p.a_rs, p.a_cs, c_array(p.a_batch), operand(p.b, p.b_read),
                        p.b_rs, p.b_cs, c_array(p.b_batch), c_array(p.batch), p.batch.size());
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
  for (const std::string& t : temps_made) text += release_named(t);
  add(std::move(text), read);
  bind(s.value, std::move(out));
}

/// A call's arguments as slots, and the callee's result as the caller sees it.
CValue Frame::call_instance(int callee, const std::vector<CValue>& args, const std::string& stem) {
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
  Action call;
  call.kind = Action::Kind::Call;
  call.callee = callee;
  for (int owner : group_owner) call.groups.push_back(allocation_names.at(static_cast<size_t>(owner)));
  pending.push_back(std::move(call));
  std::vector<const CValue*> read;
  for (const CValue& a : args) read.push_back(&a);
  add(std::move(text), read);
  return result;
}

void Frame::call_step(const HostStep& s) {
  const core::Instr& in = instr(s.value);
  std::vector<CValue> args;
  for (size_t k = 0; k < in.args.size(); ++k) args.push_back(arg(in, k));
  env[static_cast<size_t>(s.value)] = call_instance(s.callee, args, "r");
}

// A fold: copy i called with θᵢ (each leaf's slice i, by pointer), the
// carried value, and the further operands, a key as copy_key(K, i).
void Frame::fold_step(const HostStep& s) {
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
CValue Frame::theta_copy(const HostStep& s, const CValue& stacked, int64_t i) const {
  CValue theta = stacked;
  for (auto& [path, l] : theta.params) {
    if (l.shape.empty()) fail(s.value, fmt::format("stacked parameter `{}` has no stack axis", path));
    runtime::Shape shape(l.shape.begin() + 1, l.shape.end());
    l.expr =
        fmt::format("quire_offset({}, {}, {})", l.expr, storage_name(l.storage), i * runtime::element_count(shape));
    l.shape = shape;
  }
  return theta;
}

/// A fold operand as copy i sees it: a key as copy_key(K, i) (interp::ValueStructure::for_copy).
CValue Frame::for_copy(CValue a, int64_t i) {
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
void Frame::fold_vjp_step(const HostStep& s) {
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

/// The statements, with each allocation released after its last reader
/// (or after its writer, when nothing reads it), those returned excepted.
std::string Frame::body(std::vector<Action>& actions) const {
  std::vector<int> last(allocation_names.size(), -1);
  std::vector<int> made(allocation_names.size(), -1);
  std::map<std::string, size_t> by_name;
  for (size_t a = 0; a < allocation_names.size(); ++a) by_name[allocation_names[a]] = a;
  for (size_t e = 0; e < events.size(); ++e) {
    for (int a : events[e].reads) last[static_cast<size_t>(a)] = static_cast<int>(e);
    // An allocation of the frame is made by the event that allocates it or
    // receives it from a call.
    for (const Action& act : events[e].actions) {
      std::vector<std::string> names = act.groups;
      if (act.kind == Action::Kind::Alloc) names.push_back(act.name);
      for (const std::string& n : names)
        if (auto it = by_name.find(n); it != by_name.end()) made[it->second] = static_cast<int>(e);
    }
  }
  std::string out;
  for (size_t e = 0; e < events.size(); ++e) {
    out += events[e].text;
    actions.insert(actions.end(), events[e].actions.begin(), events[e].actions.end());
    for (size_t a = 0; a < allocation_names.size(); ++a) {
      if (returned.count(static_cast<int>(a))) continue;
      const int end = std::max(last[a], made[a]);
      if (end != static_cast<int>(e)) continue;
      out += fmt::format("  quire_release({});\n", allocation_names[a]);
      Action r;
      r.kind = Action::Kind::Release;
      r.name = allocation_names[a];
      actions.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace quire::exports::c_detail

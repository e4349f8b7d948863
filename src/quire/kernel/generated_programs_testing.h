#pragma once
// Random well-typed programs for differential tests of the kernel backends.
//
// The hand-written programs of kernel_testing.h cover every operation the
// lowering takes, one or two at a time; a backend must also be right on the
// compositions nobody wrote down: chains that fuse in unforeseen groups,
// values read by several groups, broadcasts of every shape, reductions and
// products whose operands are themselves fused chains. From a seed,
// generate_program writes one function:
//
//   - named axes a … e, each of a size drawn per program from 1, 2, 3, 5, 8,
//     17 and 33 (sizes that cross the vector lanes and tiles);
//   - lets read again later, element-wise unary and binary operations (the
//     right operand over a subset of the left's axes, in any order: broadcast
//     by name; now and then an argument whose axes of size 1 stretch),
//     `where` of a comparison, casts to bf16, f16 and f32, `precision(…)`
//     and `numerics(high)` regions, powers,
//     reductions over one or two axes, `·` and `contract` (batched or not),
//     `transpose`, and `slice`, `concat`, `merge` and `split` of arguments
//     shaped for them, `gather` of a table by i32 ids, `pick` by ids and `one_hot` of ids,
//     `scan` of arguments along one axis with another as the state;
//   - every tensor of at most three axes; arguments made as the expression
//     needs them;
//   - now and then a second function, `g`, generated the same way, which
//     `f` calls where it needs a value of g's axes.
//
// generate_module_program writes a tower instead: a stack of blocks folded,
// then one more block, each block's `apply` x plus such an expression of x
// (axes `..., m`) and the block's parameters, and `f` the mean square of
// the tower's output: parameters, folds and stacked gradients.
//
// The reference interpreter defines the bits; the tests run each program
// and its vjp through the kernel engine and compare bit for bit.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "quire/elab/elab_testing.h"
#include "quire/grad/vjp.h"
#include "quire/interp/interp_testing.h"
#include "quire/kernel/kernel_testing.h"
#include "quire/runtime/tensor.h"

namespace quire::kernel::testing {

struct GeneratedProgram {
  std::string source;                           ///< the program; its entry is `f`
  std::vector<runtime::Shape> argument_shapes;  ///< f's arguments, in order
  /// For each argument: 0 for a real tensor, else an i32 tensor of ids in
  /// [0, this bound) (what `gather` and `one_hot` read).
  std::vector<int64_t> id_bounds;
  runtime::Shape result_shape;  ///< f's result
};

namespace generated_detail {

using Axes = std::vector<char>;  // axis names, in the tensor's order

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {
    static constexpr int64_t kSizes[] = {1, 2, 3, 5, 8, 17, 33};
    int large = 0;
    for (char name : kNames) {
      int64_t size = kSizes[pick(7)];
      // At most two axes above 8, so that a three-axis tensor stays small
      // enough for the kernel interpreter under every policy.
      if (size > 8 && ++large > 2) size = kSizes[pick(4)];
      sizes_[name] = size;
    }
  }

  /// A function `f`: lets, then a value of random axes that reads each let
  /// again; before it, now and then, a function `g` that f calls.
  GeneratedProgram program() {
    const std::string helper = chance(0.4) ? make_helper() : "";
    const int lets = pick(4);
    std::string body;
    if (helper_) {  // g is called at least once
      body += "  let gv = " + call_helper(2) + "\n";
      lets_.push_back({"gv", helper_->result, {}});
    }
    for (int i = 0; i < lets; ++i) {
      const Axes axes = random_axes(1 + pick(3));
      const std::string name = "v" + std::to_string(i);
      body += "  let " + name + " = " + expr(axes, 3) + "\n";
      lets_.push_back({name, axes, {}});
    }
    const Axes result = helper_ && chance(0.5) ? helper_->result : random_axes(pick(3));
    std::string value = expr(result, 4);
    // Every let is read at least once more: reduced over the axes the result
    // lacks, it broadcasts by name onto the result.
    for (const Named& let : lets_) {
      std::string reduced_axes;
      for (char a : let.axes)
        if (std::find(result.begin(), result.end(), a) == result.end())
          reduced_axes += std::string(reduced_axes.empty() ? "" : ", ") + "axis " + a;
      value =
          "(" + value + " + " + (reduced_axes.empty() ? let.name : "sum(" + reduced_axes + ", " + let.name + ")") + ")";
    }
    body += "  " + value + "\n";

    GeneratedProgram out;
    std::string header = "fn f(";
    for (size_t i = 0; i < inputs_.size(); ++i) {
      header += (i ? ", " : "") + inputs_[i].name + " : " + type(inputs_[i]);
      out.argument_shapes.push_back(shape(inputs_[i]));
      out.id_bounds.push_back(inputs_[i].id_bound);
    }
    const Named result_value{"", result, {}};
    header += ") -> " + type(result_value) + " =\n";
    out.result_shape = shape(result_value);
    out.source = helper + header + body;
    return out;
  }

  /// A tower: `Net` folds a stack of `Block`s, whose `apply` is x plus a
  /// random expression of x (axes `..., m`) and the block's parameters, and
  /// then applies one more `Block`; `f` is the mean square of Net's output.
  GeneratedProgram module_program() {
    module_ = true;
    model_ = kNames[pick(5)];
    const Axes x_axes = {model_};
    std::string residual = expr(x_axes, 4);
    if (params_.empty()) residual = "(" + residual + ") * " + argument(x_axes, {});  // a parameter to train
    const std::string x_axis = type(Named{"", x_axes, {}}).substr(std::string("ℝ[").size());  // "m: 5]"
    const std::string x_type = "ℝ[..., " + x_axis;
    std::string block = "module Block {\n";
    for (const Named& p : params_) block += "  param " + p.name + " : " + type(p) + "  init = uniform(-1, 1)\n";
    block += "  fn apply(x : " + x_type + ") -> " + x_type + " =\n    x + " + residual + "\n}\n";
    static constexpr int64_t kBatches[] = {1, 3, 17};
    const int64_t batch = kBatches[pick(3)];
    GeneratedProgram out;
    out.source = block + "module Net {\n  use blocks : stack{" + std::to_string(1 + pick(3)) +
                 "}(Block)\n  use head : Block\n  fn apply(x : " + x_type + ") -> " + x_type +
                 " = head.apply(blocks.apply(x))\n}\nfn f(θ : params Net, x : ℝ[batch: " + std::to_string(batch) +
                 ", " + x_axis + ") -> ℝ[] = mean(Net.apply(θ, x)^2)\n";
    out.argument_shapes = {{batch, sizes_.at(model_)}};
    return out;
  }

 private:
  static constexpr char kNames[] = {'a', 'b', 'c', 'd', 'e'};
  static constexpr size_t kMaxAxes = 3;

  struct Named {
    std::string name;
    Axes axes;
    std::vector<int64_t>
        sizes;  // an argument's own (axes that stretch, or shaped for a restructuring); empty: the program's
    int64_t id_bound = 0;        // > 0: i32 ids below it
  };

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  runtime::Shape shape(const Named& n) const { return n.sizes.empty() ? sizes_of(n.axes) : n.sizes; }
  std::string type(const Named& n) const {
    const runtime::Shape s = shape(n);
    std::string t = n.id_bound > 0 ? "i32[" : "ℝ[";
    for (size_t i = 0; i < n.axes.size(); ++i)
      t += (i ? ", " : "") + std::string(1, n.axes[i]) + ": " + std::to_string(s[i]);
    return t + "]";
  }

  /// `count` distinct axes in a random order.
  Axes random_axes(size_t count) {
    Axes all(std::begin(kNames), std::end(kNames));
    std::shuffle(all.begin(), all.end(), rng_);
    all.resize(std::min(count, all.size()));
    return all;
  }
  /// A random subset of `axes` (possibly empty), in a random order.
  Axes subset(const Axes& axes) {
    Axes s;
    for (char a : axes)
      if (chance(0.6)) s.push_back(a);
    std::shuffle(s.begin(), s.end(), rng_);
    return s;
  }
  /// An axis name that `axes` lacks (there is always one: at most 3 of 5 are used).
  char fresh(const Axes& axes) {
    Axes free;
    for (char a : kNames)
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) free.push_back(a);
    return free[static_cast<size_t>(pick(static_cast<int>(free.size())))];
  }
  Axes inserted(Axes axes, char a) {
    axes.insert(axes.begin() + pick(static_cast<int>(axes.size()) + 1), a);
    return axes;
  }

  /// A value of exactly these axes: a let, an argument, or a literal scalar.
  std::string leaf(const Axes& axes) {
    std::vector<const Named*> matches;
    for (const Named& n : lets_)
      if (n.axes == axes) matches.push_back(&n);
    if (!matches.empty() && chance(0.7))
      return matches[static_cast<size_t>(pick(static_cast<int>(matches.size())))]->name;
    if (axes.empty() && chance(0.5)) {
      static const char* kLiterals[] = {"0.5", "2.0", "-1.5", "3.0", "0.125"};
      return kLiterals[pick(5)];
    }
    if (module_ && no_x_ == 0 && axes == Axes{model_} && chance(0.8)) return "x";
    for (const Named& n : module_ ? params_ : inputs_)
      if (n.axes == axes && n.sizes.empty() && n.id_bound == 0 && chance(0.6)) return n.name;
    return argument(axes, {});
  }

  /// An operand that broadcasts onto `axes`: a subset of them by name, in any
  /// order, and now and then a new argument some of whose axes have size 1
  /// (they stretch to the frame's size).
  std::string broadcast_operand(const Axes& axes, int depth) {
    const Axes s = subset(axes);
    if (s.empty() || !chance(0.25)) return expr(s, depth);
    std::vector<int64_t> sizes;
    for (char a : s) sizes.push_back(chance(0.5) ? 1 : sizes_.at(a));
    return argument(s, std::move(sizes));
  }

  std::string unary(const std::string& x) {
    // Functions called as they are, then forms that keep an argument in
    // (or, half the time, take it out of) the function's domain.
    static const char* kPlain[] = {"abs",       "tanh", "erf", "sigmoid", "relu",    "gelu",
                                   "gelu_tanh", "silu", "exp", "expm1",   "softplus"};
    constexpr int kPlainCount = static_cast<int>(std::size(kPlain));
    const int i = pick(kPlainCount + 8);
    if (i < kPlainCount) return std::string(kPlain[i]) + "(" + x + ")";
    switch (i - kPlainCount) {
      case 0:
        return "-(" + x + ")";  // not "-" + x: "--" begins a comment
      case 1:
        return "exp(" + x + " * 0.25)";
      case 2:
        return chance(0.5) ? "log(abs(" + x + ") + 1.0)" : "log(" + x + ")";
      case 3:
        return chance(0.5) ? "sqrt(abs(" + x + "))" : "sqrt(" + x + ")";
      case 4:
        return "rsqrt(abs(" + x + ") + 0.5)";
      case 5:
        return "(" + x + ")^2";
      case 6:
        return chance(0.5) ? "log1p(abs(" + x + "))" : "log1p(" + x + ")";
      default:
        return "(" + x + ")^3";
    }
  }

  /// A new argument with these axes and sizes (`sizes` may differ from the
  /// program's: the restructuring that reads it makes the program's).
  std::string argument(const Axes& axes, std::vector<int64_t> sizes) {
    std::vector<Named>& made = module_ ? params_ : inputs_;
    made.push_back({(module_ ? "p" : "x") + std::to_string(made.size()), axes, std::move(sizes)});
    return made.back().name;
  }
  std::vector<int64_t> sizes_of(const Axes& axes) const {
    std::vector<int64_t> s;
    for (char a : axes) s.push_back(sizes_.at(a));
    return s;
  }

  /// New i32 ids of these axes, each below `bound`.
  std::string ids(const Axes& axes, int64_t bound) {
    inputs_.push_back({"i" + std::to_string(inputs_.size()), axes, {}, bound});
    return inputs_.back().name;
  }

  /// `slice`, `concat`, `merge` or `split` of new arguments, giving axes `t`;
  /// or `gather` of a table by ids, `pick` along an axis by ids, `one_hot` of ids, or a `scan` of new
  /// arguments (not in a module's function, whose leaves are x and parameters).
  std::string restructured(const Axes& t) {
    if (t.empty()) return leaf(t);
    const size_t i = static_cast<size_t>(pick(static_cast<int>(t.size())));
    const int64_t size = sizes_.at(t[i]);
    const std::string axis = std::string(1, t[i]);
    std::vector<int64_t> sizes = sizes_of(t);
    switch (pick(module_ ? 4 : 8)) {
      case 4: {  // gather(axis v, table, ids): the table's axes before v, the ids' axes, the table's after v
        const size_t j = i + static_cast<size_t>(pick(static_cast<int>(t.size() - i) + 1));
        const char v = fresh(t);
        const int64_t rows = 1 + pick(9);
        const Axes before(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(i)),
            id_axes(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(j)),
            after(t.begin() + static_cast<std::ptrdiff_t>(j), t.end());
        Axes table = before;
        table.push_back(v);
        table.insert(table.end(), after.begin(), after.end());
        if (table.size() > kMaxAxes) return leaf(t);
        std::vector<int64_t> table_sizes = sizes_of(table);
        table_sizes[before.size()] = rows;
        // The ids' axes may be none: one row, the table's axis v removed.
        return std::string("gather(axis ") + v + ", " + argument(table, table_sizes) + ", " + ids(id_axes, rows) + ")";
      }
      case 5: {  // one_hot(ids, v: V) appends v: the result's last axis
        const Axes id_axes(t.begin(), t.end() - 1);
        return "one_hot(" + ids(id_axes, sizes_.at(t.back())) + ", " + t.back() + ": " +
               std::to_string(sizes_.at(t.back())) + ")";
      }
      case 6: {  // pick(axis v, x, ids): x has t's axes and a fresh v at i, the ids t's axes
        if (t.size() + 1 > kMaxAxes) return leaf(t);
        const char v = fresh(t);
        const int64_t rows = 1 + pick(9);
        Axes x = t;
        x.insert(x.begin() + static_cast<std::ptrdiff_t>(i), v);
        std::vector<int64_t> x_sizes = sizes;
        x_sizes.insert(x_sizes.begin() + static_cast<std::ptrdiff_t>(i), rows);
        return std::string("pick(axis ") + v + ", " + argument(x, x_sizes) + ", " + ids(t, rows) + ")";
      }
      case 7: {  // scan(axis a, axis n, axis m, a, x): steps along t[i], the state along another axis of t
        if (t.size() < 2 || t.size() + 1 > kMaxAxes) return leaf(t);
        size_t j = static_cast<size_t>(pick(static_cast<int>(t.size()) - 1));
        if (j >= i) ++j;
        const char m = fresh(t);
        Axes a = t;
        std::vector<int64_t> a_sizes = sizes;
        const size_t at = static_cast<size_t>(pick(static_cast<int>(t.size()) + 1));
        a.insert(a.begin() + static_cast<std::ptrdiff_t>(at), m);
        a_sizes.insert(a_sizes.begin() + static_cast<std::ptrdiff_t>(at), sizes[j]);
        return "scan(axis " + axis + ", axis " + std::string(1, t[j]) + ", axis " + m + ", " + argument(a, a_sizes) +
               ", " + argument(t, sizes) + ")";
      }
      case 0: {  // slice(axis a, x, start, stop, step) of a longer axis
        const int64_t start = pick(4), step = 1 + pick(3);
        sizes[i] = start + (size - 1) * step + 1 + pick(3);
        return "slice(axis " + axis + ", " + argument(t, sizes) + ", " + std::to_string(start) + ", " +
               std::to_string(start + (size - 1) * step + 1) + ", " + std::to_string(step) + ")";
      }
      case 1: {  // concat(axis a, x, y): sizes that add up
        if (size < 2) return leaf(t);
        const int64_t first = 1 + pick(static_cast<int>(size - 1));
        std::vector<int64_t> rest = sizes;
        sizes[i] = first;
        rest[i] = size - first;
        return "concat(axis " + axis + ", " + argument(t, sizes) + ", " + argument(t, rest) + ")";
      }
      case 2: {  // merge(axis p, axis q, x, a: size): p and q fresh, p·q = size
        if (t.size() + 1 > kMaxAxes) return leaf(t);
        const char p = fresh(t);
        Axes child = t;
        child[i] = p;
        const char q = fresh(child);
        child.insert(child.begin() + static_cast<std::ptrdiff_t>(i) + 1, q);
        const int64_t outer = size % 2 == 0 ? 2 : 1;
        sizes[i] = outer;
        sizes.insert(sizes.begin() + static_cast<std::ptrdiff_t>(i) + 1, size / outer);
        return std::string("merge(axis ") + p + ", axis " + q + ", " + argument(child, sizes) + ", " + axis + ": " +
               std::to_string(size) + ")";
      }
      default: {  // split(axis m, x, a: A, b: B) where t has two neighbours a, b
        if (t.size() < 2 || i + 1 >= t.size()) return leaf(t);
        const char m = fresh(t);
        Axes child = t;
        child[i] = m;
        child.erase(child.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        sizes[i] = size * sizes_.at(t[i + 1]);
        sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        return std::string("split(axis ") + m + ", " + argument(child, sizes) + ", " + axis + ": " +
               std::to_string(size) + ", " + t[i + 1] + ": " + std::to_string(sizes_.at(t[i + 1])) + ")";
      }
    }
  }

  std::string expr(const Axes& t, int depth) {
    if (depth <= 0 || chance(0.2)) return leaf(t);
    const int d = depth - 1;
    if (helper_ && t == helper_->result && chance(0.5)) return call_helper(d);
    switch (pick(13)) {
      case 0:
      case 1:
      case 2:
        return unary(expr(t, d));
      case 3:
      case 4:
      case 5: {
        static const char* kOps[] = {" + ", " - ", " * ", " / "};
        const std::string left = expr(t, d), right = broadcast_operand(t, d);
        const int op = pick(6);
        if (op < 4) return "(" + left + kOps[op] + right + ")";
        return std::string(op == 4 ? "max(" : "min(") + left + ", " + right + ")";
      }
      case 6: {  // a reduction over one or two axes the result lacks
        if (t.size() + 1 > kMaxAxes) return unary(expr(t, d));
        static const char* kReductions[] = {"sum", "mean", "max", "min", "logsumexp"};
        const char first = fresh(t);
        Axes child = inserted(t, first);
        std::string axes = std::string("axis ") + first;
        if (child.size() < kMaxAxes && chance(0.3)) {
          const char second = fresh(child);
          child = inserted(child, second);
          axes += std::string(", axis ") + second;
        }
        return std::string(kReductions[pick(5)]) + "(" + axes + ", " + expr(child, d) + ")";
      }
      case 7: {  // x · w: x's axes but the last, then w's but the first
        const char k = fresh(t);
        if (t.size() >= 2 && chance(0.4)) {
          Axes x(t.begin(), t.end() - 2), w = {k, t[t.size() - 2], t.back()};
          x.push_back(k);
          return "(" + expr(x, d) + " · " + without_x([&] { return expr(w, d); }) + ")";
        }
        Axes x = t, w = {k};
        if (!t.empty()) {
          x.pop_back();
          w.push_back(t.back());
        }
        x.push_back(k);
        return "(" + expr(x, d) + " · " + without_x([&] { return expr(w, d); }) + ")";
      }
      case 8: {  // contract(axis k, a, b): a's axes without k, then b's that are neither k nor batch
        const char k = fresh(t);
        const size_t split = static_cast<size_t>(pick(static_cast<int>(t.size()) + 1));
        const Axes front(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(split)),
            back(t.begin() + static_cast<std::ptrdiff_t>(split), t.end());
        const Axes a = inserted(front, k);
        Axes b = inserted(back, k);
        for (char batch : front)
          if (b.size() < kMaxAxes && chance(0.5)) b = inserted(b, batch);
        if (a.size() > kMaxAxes || b.size() > kMaxAxes) return unary(expr(t, d));
        return std::string("contract(axis ") + k + ", " + expr(a, d) + ", " + without_x([&] { return expr(b, d); }) +
               ")";
      }
      case 9: {  // transpose swaps two named axes
        if (t.size() < 2) return unary(expr(t, d));
        const size_t i = static_cast<size_t>(pick(static_cast<int>(t.size()))), j = (i + 1) % t.size();
        Axes child = t;
        std::swap(child[i], child[j]);
        return std::string("transpose(") + expr(child, d) + ", axis " + t[i] + ", axis " + t[j] + ")";
      }
      case 10: {  // where(comparison, x, y): the comparison has every axis, so it is the frame
        static const char* kTests[] = {" > ", " < ", " ≥ ", " ≤ ", " == ", " ≠ "};
        const std::string test = "(" + expr(t, d) + kTests[pick(6)] + broadcast_operand(t, d) + ")";
        return "where(" + test + ", " + broadcast_operand(t, d) + ", " + broadcast_operand(t, d) + ")";
      }
      case 11:
        return restructured(t);
      default: {  // a cast, or a region that sets the precision or the numerics of what it holds
        static const char* kCasts[] = {"bf16", "f16", "f32"};
        static const char* kRegions[] = {"precision(bf16)", "precision(f16)", "numerics(high)"};
        if (chance(0.5)) return std::string(kRegions[pick(3)]) + " { " + expr(t, d) + " }";
        return "(" + expr(t, d) + " as " + kCasts[pick(3)] + ")";
      }
    }
  }

  /// Generates an operand that must not have `...` (a product's right
  /// operand): it reads no `x` in a module's function.
  template <typename Make>
  std::string without_x(Make make) {
    ++no_x_;
    std::string e = make();
    --no_x_;
    return e;
  }

  /// A second function, `g`, that `f` may call: its own generated body over
  /// its own arguments, of the program's axis sizes. Returns its source.
  std::string make_helper() {
    Generator g(rng_(), sizes_);
    const Axes result = g.random_axes(1 + g.pick(2));
    const std::string body = g.expr(result, 3);
    helper_ = Helper{g.inputs_, result};
    std::string source = "fn g(";
    for (size_t i = 0; i < g.inputs_.size(); ++i)
      source += (i ? ", " : "") + g.inputs_[i].name + " : " + g.type(g.inputs_[i]);
    return source + ") -> " + type(Named{"", result, {}}) + " =\n  " + body + "\n";
  }
  /// A call of the helper: each argument an expression of its axes, or a new
  /// argument of f where the helper's has sizes of its own or holds ids.
  std::string call_helper(int depth) {
    std::string call = "g(";
    for (size_t i = 0; i < helper_->params.size(); ++i) {
      const Named& p = helper_->params[i];
      std::string a;
      if (p.id_bound > 0)
        a = ids(p.axes, p.id_bound);
      else if (!p.sizes.empty())
        a = argument(p.axes, p.sizes);
      else
        a = expr(p.axes, depth);
      call += (i ? ", " : "") + a;
    }
    return call + ")";
  }
  Generator(uint64_t seed, std::map<char, int64_t> sizes) : rng_(seed), sizes_(std::move(sizes)) {}

  struct Helper {
    std::vector<Named> params;
    Axes result;
  };

  std::mt19937_64 rng_;
  std::optional<Helper> helper_;  // g, where the program has one
  bool module_ = false;  // generating Block.apply: leaves are x and parameters
  char model_ = 'a';     // x's explicit axis there
  int no_x_ = 0;         // > 0 while generating an operand without `...`
  std::vector<Named> params_;
  std::map<char, int64_t> sizes_;
  std::vector<Named> inputs_, lets_;
};

}  // namespace generated_detail

/// One random program (a function `f`) from `seed`: the same program for a
/// seed under one standard library (the distributions' draws are the
/// library's), so the tests print the source of any program they fail on.
inline GeneratedProgram generate_program(uint64_t seed) { return generated_detail::Generator(seed).program(); }

/// One random tower (Generator::module_program) from `seed`: parameters,
/// a stack folded and its vjp's stacked gradients.
inline GeneratedProgram generate_module_program(uint64_t seed) {
  return generated_detail::Generator(seed).module_program();
}

/// How many programs a test runs: `count`, or QUIRE_GENERATED_PROGRAMS
/// (to run many more locally). The sanitizers' build (unoptimized, and
/// AddressSanitizer's checks) runs them about twenty times slower, so there
/// a test runs a fifth of its programs.
inline int generated_program_count(int count) {
  if (const char* n = std::getenv("QUIRE_GENERATED_PROGRAMS")) return std::atoi(n);
#if defined(__SANITIZE_ADDRESS__)
  return std::max(1, count / 5);
#else
  return count;
#endif
}

/// A generated program elaborated, with its vjp and the calls the tests make.
struct GeneratedCase {
  GeneratedProgram program;
  std::unique_ptr<elab::testing::Elaborated> e;  ///< check e->ok() first
  int f = -1, vjp = -1;
  std::vector<interp::Value>
      specials;  ///< f's arguments: random values among ±0, ±inf, NaN, a subnormal, … (a tower's: drawn)
  std::vector<interp::Value>
      finite;  ///< the vjp's: values in [-2, 2] (a gradient not NaN throughout), then the cotangent
};

inline runtime::Tensor finite_values(const runtime::Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-2, 2);
  std::vector<double> v(static_cast<size_t>(runtime::element_count(shape)));
  for (double& x : v) x = d(rng);
  return interp::testing::reals(shape, std::move(v));
}

/// A generated function (`module_program` false) on random values among
/// special ones, or a generated tower on its initial parameters and drawn
/// inputs; either's vjp on finite values.
inline GeneratedCase generated_case(uint64_t seed, bool module_program = false) {
  GeneratedCase c;
  c.program = module_program ? generate_module_program(seed) : generate_program(seed);
  c.e = elab::testing::elaborate_text(c.program.source);
  if (!c.e->ok()) return c;
  elab::Program& prog = *c.e->prog;
  c.f = prog.find_function("f");
  c.vjp = grad::vjp(prog, c.f, grad::differentiable_args(prog.functions[static_cast<size_t>(c.f)]));
  if (module_program) {
    c.specials = drawn_arguments(prog, c.f, {});
    c.finite = c.specials;
    c.finite.push_back(interp::Value::of(runtime::Tensor::scalar(1.0)));
    return c;
  }
  for (size_t i = 0; i < c.program.argument_shapes.size(); ++i) {
    const runtime::Shape& s = c.program.argument_shapes[i];
    const size_t n = static_cast<size_t>(runtime::element_count(s));
    if (const int64_t bound = c.program.id_bounds[i]; bound > 0) {
      std::mt19937_64 rng(seed * 43 + i);
      std::vector<int64_t> ids(n);
      for (int64_t& id : ids) id = std::uniform_int_distribution<int64_t>(0, bound - 1)(rng);
      c.specials.push_back(interp::Value::of(interp::testing::ints(runtime::ElemKind::I32, s, ids)));
      c.finite.push_back(c.specials.back());
      continue;
    }
    c.specials.push_back(interp::Value::of(interp::testing::reals(s, specials_and_random(n, seed * 31 + i))));
    c.finite.push_back(interp::Value::of(finite_values(s, seed * 37 + i)));
  }
  c.finite.push_back(interp::Value::of(finite_values(c.program.result_shape, seed * 41)));
  return c;
}

/// Calls check(c) on the generated cases of seeds 0 … count − 1 (functions,
/// or towers), each under a trace of its seed and source once it is shown
/// to elaborate; stops after the first program with a failure.
template <typename Check>
void for_each_generated_case(bool towers, int count, Check check) {
  for (int seed = 0; seed < generated_program_count(count); ++seed) {
    const GeneratedCase c = generated_case(static_cast<uint64_t>(seed), towers);
    SCOPED_TRACE("seed " + std::to_string(seed) + ":\n" + c.program.source);
    ASSERT_TRUE(c.e->ok()) << c.e->rendered();
    check(c);
    if (::testing::Test::HasFailure()) return;  // one program's failures at a time
  }
}

/// Each generated case's f on its arguments, and its vjp on finite values
/// under each of `remats`, through the kernel engine with `runner` on 2
/// threads, under each policy and plan (nullptr: unplanned): the reference
/// interpreter's bits. Returns the kernel launches counted.
inline int64_t expect_generated_reference_bits(KernelRunner& runner, bool towers, int count,
                                               const std::vector<precision::RealizeOptions>& policies,
                                               const std::vector<const machine::Profile*>& plans,
                                               const std::vector<interp::Remat>& remats) {
  int64_t launches = 0;
  for_each_generated_case(towers, count, [&](const GeneratedCase& c) {
    for (const precision::RealizeOptions& o : policies) {
      for (const machine::Profile* plan : plans) {
        SCOPED_TRACE(label(o) + (plan ? ", every kernel at its widest layout" : ", unplanned"));
        const Runs forward = run_both(*c.e->prog, c.f, c.specials, {}, o, runner, interp::Remat::Recompute, plan, 2);
        expect_same(forward.kernels, forward.reference, "f");
        launches += forward.kernel_launches;
        for (interp::Remat remat : remats) {
          const Runs backward = run_both(*c.e->prog, c.vjp, c.finite, {}, o, runner, remat, plan, 2);
          expect_same(backward.kernels, backward.reference,
                      remat == interp::Remat::Store ? "f.vjp (remat store)" : "f.vjp");
          launches += backward.kernel_launches;
        }
      }
    }
  });
  return launches;
}

}  // namespace quire::kernel::testing

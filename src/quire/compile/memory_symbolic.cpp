#include "quire/compile/memory_symbolic.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "quire/core/printer.h"

namespace quire::compile {

namespace {

using Int = __int128;

std::string int_text(Int v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  std::string digits;
  while (v != 0) {
    const int d = static_cast<int>(v % 10);
    digits.push_back(static_cast<char>('0' + (d < 0 ? -d : d)));
    v /= 10;
  }
  if (negative) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

Int gcd(Int a, Int b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    const Int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

Int factorial(int k) {
  Int f = 1;
  for (int i = 2; i <= k; ++i) f *= i;
  return f;
}

/// The falling factorial (x − b)(x − b − 1)…(x − b − k + 1) as integer
/// coefficients of x^0 … x^k.
std::vector<Int> falling(int64_t b, int k) {
  std::vector<Int> p = {1};
  for (int m = 0; m < k; ++m) {
    std::vector<Int> next(p.size() + 1, 0);
    for (size_t j = 0; j < p.size(); ++j) {
      next[j + 1] += p[j];
      next[j] -= p[j] * static_cast<Int>(b + m);
    }
    p = std::move(next);
  }
  return p;
}

/// The grid's points, each an index per dimension in [0, degree], the last
/// dimension fastest.
std::vector<std::vector<int>> grid_points(size_t dims) {
  std::vector<std::vector<int>> points = {{}};
  for (size_t d = 0; d < dims; ++d) {
    std::vector<std::vector<int>> next;
    for (const auto& p : points)
      for (int i = 0; i <= kSymbolicDegree; ++i) {
        next.push_back(p);
        next.back().push_back(i);
      }
    points = std::move(next);
  }
  return points;
}

/// Newton's forward differences on the grid's values (in grid_points order),
/// turned into a polynomial in the dimensions themselves.
Polynomial fit(const std::vector<std::string>& names, const std::vector<int64_t>& corner, std::vector<Int> values) {
  const size_t d = names.size();
  const size_t n = static_cast<size_t>(kSymbolicDegree + 1);
  std::vector<size_t> stride(d, 1);
  for (size_t a = d; a-- > 1;) stride[a - 1] = stride[a] * n;
  // Along each axis in turn: values[.., k, ..] ← Δ^k along it.
  for (size_t a = 0; a < d; ++a)
    for (size_t base = 0; base < values.size(); ++base) {
      if ((base / stride[a]) % n != 0) continue;  // one line along axis a from each of its starts
      for (size_t k = 1; k < n; ++k)
        for (size_t i = n - 1; i >= k; --i) values[base + i * stride[a]] -= values[base + (i - 1) * stride[a]];
    }
  Polynomial p;
  p.dims = names;
  const Int common = [&] {
    Int c = 1;
    for (size_t a = 0; a < d; ++a) c *= factorial(kSymbolicDegree);
    return c;
  }();
  const std::vector<std::vector<int>> points = grid_points(d);
  for (size_t at = 0; at < points.size(); ++at) {
    const Int delta = values[at];
    if (delta == 0) continue;
    const std::vector<int>& k = points[at];
    Int scale = common;
    for (size_t a = 0; a < d; ++a) scale /= factorial(k[a]);
    // Σ over the product of each dimension's falling factorial's monomials.
    std::vector<std::vector<Int>> factors;
    for (size_t a = 0; a < d; ++a) factors.push_back(falling(corner[a], k[a]));
    std::vector<int> exponent(d, 0);
    std::function<void(size_t, Int)> expand = [&](size_t a, Int coefficient) {
      if (a == d) {
        if (coefficient != 0) p.terms[exponent] += delta * scale * coefficient;
        return;
      }
      for (size_t j = 0; j < factors[a].size(); ++j) {
        exponent[a] = static_cast<int>(j);
        expand(a + 1, coefficient * factors[a][j]);
      }
    };
    expand(0, 1);
  }
  Int g = common;
  for (auto it = p.terms.begin(); it != p.terms.end();) {
    if (it->second == 0) {
      it = p.terms.erase(it);
    } else {
      g = gcd(g, it->second);
      ++it;
    }
  }
  for (auto& [m, c] : p.terms) c /= g;
  p.denominator = common / g;
  return p;
}

std::string range_text(const std::vector<std::string>& names, const std::vector<int64_t>& corner) {
  std::string out;
  for (size_t a = 0; a < names.size(); ++a)
    out += fmt::format("{}{} = {}…{}", out.empty() ? "" : ", ", names[a], corner[a], corner[a] + kSymbolicDegree);
  return out;
}

std::string point_text(const std::map<std::string, int64_t>& at) {
  std::string out;
  for (const auto& [k, v] : at) out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", k, v);
  return out;
}

struct Point {
  CompiledProgram compiled;
  CallMemory m;
};

/// A buffer's bytes by (instance, value) at one point.
std::map<std::pair<int, int>, int64_t> buffer_bytes(const HostProgram& host) {
  std::map<std::pair<int, int>, int64_t> out;
  for (size_t i = 0; i < host.functions.size(); ++i)
    for (const HostBuffer& b : host.functions[i].buffers)
      if (b.bytes > 0) out[{static_cast<int>(i), b.value}] = b.bytes;
  return out;
}

bool same_instances(const HostProgram& a, const HostProgram& b) {
  if (a.functions.size() != b.functions.size()) return false;
  for (size_t i = 0; i < a.functions.size(); ++i)
    if (a.functions[i].function != b.functions[i].function || a.functions[i].mode != b.functions[i].mode) return false;
  return true;
}

}  // namespace

bool Polynomial::value_at(const std::map<std::string, int64_t>& at, Int& out) const {
  Int sum = 0;
  for (const auto& [m, c] : terms) {
    Int term = c;
    for (size_t a = 0; a < dims.size(); ++a)
      for (int e = 0; e < m[a]; ++e) term *= at.at(dims[a]);
    sum += term;
  }
  if (sum % denominator != 0) return false;
  out = sum / denominator;
  return true;
}

std::string Polynomial::str() const {
  if (terms.empty()) return "0";
  // Highest total degree first, then by exponents (the first dimension's highest first).
  std::vector<std::pair<std::vector<int>, Int>> ordered(terms.begin(), terms.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& x, const auto& y) {
    const int dx = std::accumulate(x.first.begin(), x.first.end(), 0);
    const int dy = std::accumulate(y.first.begin(), y.first.end(), 0);
    return dx != dy ? dx > dy : x.first > y.first;
  });
  std::string out;
  for (const auto& [m, c] : ordered) {
    const bool negative = c < 0;
    const Int magnitude = negative ? -c : c;
    std::string factors;
    for (size_t a = 0; a < dims.size(); ++a) {
      if (m[a] == 0) continue;
      factors += (factors.empty() ? "" : "·") + dims[a] + (m[a] > 1 ? fmt::format("^{}", m[a]) : "");
    }
    const Int g = gcd(magnitude, denominator);
    const std::string number = denominator / g == 1 ? int_text(magnitude / g)
                                                    : fmt::format("({}/{})", int_text(magnitude / g), int_text(denominator / g));
    const std::string term = factors.empty() ? number : (number == "1" ? factors : number + "·" + factors);
    out += out.empty() ? (negative ? "-" : "") + term : (negative ? " - " : " + ") + term;
  }
  return out;
}

SymbolicMemory count_symbolic_memory(const elab::Program& prog, const CompileRequest& request) {
  if (!request.wrt.empty()) throw std::logic_error("internal: count_symbolic_memory of a request with wrt");
  if (request.dims.empty())
    throw SymbolicError("--symbolic: the entry has no dimension to count in (give each with --dim NAME=SIZE)");
  if (request.dims.size() > kSymbolicMaxDims)
    throw SymbolicError(fmt::format("--symbolic fits at most {} dimensions at once ({} points), given {}",
                                    kSymbolicMaxDims, grid_points(kSymbolicMaxDims).size(), request.dims.size()));
  SymbolicMemory s;
  s.given = request.dims;
  std::vector<std::string> names;
  std::vector<int64_t> corner;
  for (const auto& [k, v] : request.dims) {
    names.push_back(k);
    corner.push_back(v);
  }
  auto count_at = [&](const std::map<std::string, int64_t>& dims) {
    CompileRequest r = request;
    r.dims = dims;
    r.arguments = nullptr;  // the declared types at these dims give the shapes
    Point p{compile(prog, r), {}};
    p.m = count_call_memory(prog, p.compiled);
    return p;
  };
  const std::vector<std::vector<int>> points = grid_points(names.size());
  std::vector<Point> grid;
  for (const std::vector<int>& idx : points) {
    std::map<std::string, int64_t> dims;
    for (size_t a = 0; a < names.size(); ++a) dims[names[a]] = corner[a] + idx[a];
    grid.push_back(count_at(dims));
  }
  for (size_t a = 0; a < names.size(); ++a) s.check_point[names[a]] = corner[a] + kSymbolicDegree + 2;
  const Point check = count_at(s.check_point);

  // Each quantity fitted on the grid and checked off it.
  auto fitted = [&](const std::string& what, const std::function<int64_t(const Point&)>& of) {
    std::vector<Int> values;
    for (const Point& p : grid) values.push_back(of(p));
    Polynomial poly = fit(names, corner, std::move(values));
    Int predicted = 0;
    const int64_t counted = of(check);
    if (!poly.value_at(s.check_point, predicted) || predicted != counted)
      throw SymbolicError(fmt::format(
          "--symbolic: {} is not one polynomial of degree ≤ {} in each dimension: fitted on {} as {}, it gives {} at "
          "{}, where the count is {}{}",
          what, kSymbolicDegree, range_text(names, corner), poly.str(), int_text(predicted), point_text(s.check_point),
          counted,
          what == "the peak" || what == "the need"
              ? " (the peak moves to another site as the dimensions grow: count each size with --dim)"
              : ""));
    return poly;
  };
  s.parameters = fitted("the parameters", [](const Point& p) { return p.m.parameter_bytes; });
  s.inputs = fitted("the inputs", [](const Point& p) { return p.m.input_bytes; });
  s.outputs = fitted("the outputs", [](const Point& p) { return p.m.output_bytes; });
  s.peak = fitted("the peak", [](const Point& p) { return p.m.peak_bytes; });
  s.needs = fitted("the need", [](const Point& p) { return p.m.input_bytes + p.m.peak_bytes; });

  // Buffers, where every point compiles to the same instances.
  const HostProgram& first = grid.front().compiled.host;
  for (const Point& p : grid)
    if (!same_instances(first, p.compiled.host) || !same_instances(first, check.compiled.host)) {
      s.buffers_note = "the host program's instances change with the dimensions (a fold's count): only the totals "
                       "are fitted";
      return s;
    }
  std::vector<std::map<std::pair<int, int>, int64_t>> bytes;
  for (const Point& p : grid) bytes.push_back(buffer_bytes(p.compiled.host));
  const auto check_bytes = buffer_bytes(check.compiled.host);
  for (const auto& [bound_key, at_given] : bytes.front()) {
    const std::pair<int, int> key = bound_key;  // a lambda cannot capture a structured binding (C++20, clang 14)
    const HostFunction& h = first.functions.at(static_cast<size_t>(key.first));
    const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
    auto of = [&](const std::map<std::pair<int, int>, int64_t>& b) {
      auto it = b.find(key);
      return it == b.end() ? int64_t{0} : it->second;
    };
    std::vector<Int> values;
    for (const auto& b : bytes) values.push_back(of(b));
    Polynomial poly = fit(names, corner, std::move(values));
    Int predicted = 0;
    if (!poly.value_at(s.check_point, predicted) || predicted != of(check_bytes))
      throw SymbolicError(fmt::format("--symbolic: the buffer `{}` of instance #{} is not one polynomial of degree ≤ {}: "
                                      "fitted on {} as {}, it gives {} at {}, where it holds {}",
                                      core::site_name(fn, key.second), key.first, kSymbolicDegree,
                                      range_text(names, corner), poly.str(), int_text(predicted),
                                      point_text(s.check_point), of(check_bytes)));
    s.buffers.push_back({key.first, key.second, at_given, std::move(poly)});
  }
  std::stable_sort(s.buffers.begin(), s.buffers.end(),
                   [](const SymbolicBuffer& a, const SymbolicBuffer& b) { return a.bytes_at_given > b.bytes_at_given; });
  return s;
}

namespace {

std::string buffer_site(const elab::Program& prog, const HostProgram& host, const SymbolicBuffer& b) {
  const HostFunction& h = host.functions.at(static_cast<size_t>(b.instance));
  const core::Function& fn = prog.functions.at(static_cast<size_t>(h.function));
  return fmt::format("`{}` #{}", core::site_name(fn, b.value), b.instance);
}

}  // namespace

std::string print_symbolic_memory(const elab::Program& prog, const CompiledProgram& at_given, const SymbolicMemory& s,
                                  const std::string& label, size_t buffers_shown) {
  const HostProgram& host = at_given.host;
  std::vector<std::string> names(s.peak.dims);
  std::vector<int64_t> corner;
  for (const std::string& n : names) corner.push_back(s.given.at(n));
  std::string out = fmt::format(
      "quire memory --symbolic: `{}` in {}, remat {}: bytes as polynomials, fitted on {}, checked at {}\n",
      prog.functions.at(static_cast<size_t>(host.entry)).name, label, interp::remat_name(host.remat),
      range_text(names, corner), point_text(s.check_point));
  out += fmt::format("  parameters  {}\n", s.parameters.str());
  out += fmt::format("  inputs      {}\n", s.inputs.str());
  out += fmt::format("  outputs     {}\n", s.outputs.str());
  out += fmt::format("  peak        {}\n", s.peak.str());
  out += fmt::format("  needs       {}\n", s.needs.str());
  if (!s.buffers_note.empty()) return out + "buffers: " + s.buffers_note + "\n";
  const size_t shown = std::min(buffers_shown, s.buffers.size());
  out += fmt::format("buffers: the {} largest of {} at {}, and their bytes\n", shown, s.buffers.size(),
                     point_text(s.given));
  size_t width = 4;
  for (size_t i = 0; i < shown; ++i) width = std::max(width, buffer_site(prog, host, s.buffers[i]).size());
  for (size_t i = 0; i < shown; ++i)
    out += fmt::format("  {:<{}} {:>10}  {}\n", buffer_site(prog, host, s.buffers[i]), width,
                       s.buffers[i].bytes_at_given, s.buffers[i].bytes.str());
  return out;
}

nlohmann::ordered_json symbolic_memory_json(const elab::Program& prog, const CompiledProgram& at_given,
                                            const SymbolicMemory& s, const std::string& label) {
  const HostProgram& host = at_given.host;
  nlohmann::ordered_json j;
  j["format"] = "quire-memory-symbolic";
  j["version"] = 1;
  j["entry"] = prog.functions.at(static_cast<size_t>(host.entry)).name;
  j["realization"] = label;
  j["remat"] = interp::remat_name(host.remat);
  j["given"] = s.given;
  j["checked_at"] = s.check_point;
  j["degree"] = kSymbolicDegree;
  j["parameters"] = s.parameters.str();
  j["inputs"] = s.inputs.str();
  j["outputs"] = s.outputs.str();
  j["peak"] = s.peak.str();
  j["needs"] = s.needs.str();
  nlohmann::ordered_json buffers = nlohmann::ordered_json::array();
  for (const SymbolicBuffer& b : s.buffers) {
    const HostFunction& h = host.functions.at(static_cast<size_t>(b.instance));
    buffers.push_back({{"instance", b.instance},
                       {"site", core::site_name(prog.functions.at(static_cast<size_t>(h.function)), b.value)},
                       {"bytes", b.bytes_at_given},
                       {"formula", b.bytes.str()}});
  }
  j["buffers"] = buffers;
  if (!s.buffers_note.empty()) j["buffers_note"] = s.buffers_note;
  return j;
}

}  // namespace quire::compile

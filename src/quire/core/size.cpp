#include "quire/core/size.h"

#include <fmt/format.h>

#include <algorithm>

namespace quire::elab {

Size Size::constant(int64_t value) {
  Size s;
  if (value != 0) s.terms_[{}] = value;
  return s;
}

Size Size::symbol(const std::string& name) {
  Size s;
  s.terms_[{name}] = 1;
  return s;
}

std::optional<int64_t> Size::constant_value() const {
  if (terms_.empty()) return 0;
  if (terms_.size() == 1 && terms_.begin()->first.empty()) return terms_.begin()->second;
  return std::nullopt;
}

Size Size::add(const Size& a, const Size& b, bool& ok) {
  Size r = a;
  r.take_quotients(b);
  for (const auto& [m, c] : b.terms_) {
    int64_t& slot = r.terms_[m];
    if (__builtin_add_overflow(slot, c, &slot)) ok = false;
    if (slot == 0) r.terms_.erase(m);
  }
  return r;
}

Size Size::sub(const Size& a, const Size& b, bool& ok) {
  Size neg;
  neg.take_quotients(b);
  for (const auto& [m, c] : b.terms_) {
    if (c == INT64_MIN) ok = false;
    else neg.terms_[m] = -c;
  }
  return add(a, neg, ok);
}

Size Size::mul(const Size& a, const Size& b, bool& ok) {
  Size r;
  r.take_quotients(a);
  r.take_quotients(b);
  for (const auto& [ma, ca] : a.terms_)
    for (const auto& [mb, cb] : b.terms_) {
      Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end());
      int64_t c;
      if (__builtin_mul_overflow(ca, cb, &c)) ok = false;
      int64_t& slot = r.terms_[m];
      if (__builtin_add_overflow(slot, c, &slot)) ok = false;
      if (slot == 0) r.terms_.erase(m);
    }
  r.cancel_quotients(ok);
  return r;
}

void Size::cancel_quotients(bool& ok) {
  // Each step removes one quotient atom for its numerator's (strictly
  // smaller) atoms, so this ends; the bound guards the argument.
  for (int step = 0; step < 256; ++step) {
    Monomial found, rest;
    int64_t coefficient = 0;
    const Size* numerator = nullptr;
    for (const auto& [m, c] : terms_) {
      for (size_t qi = 0; qi < m.size() && !numerator; ++qi) {
        auto q = quotients_.find(m[qi]);
        if (q == quotients_.end() || q->second.second->terms_.size() != 1) continue;
        const auto& [den_atoms, den_c] = *q->second.second->terms_.begin();
        if (den_c == 0 || c % den_c != 0) continue;
        Monomial left = m;
        left.erase(left.begin() + static_cast<std::ptrdiff_t>(qi));
        bool whole = true;  // the denominator's atoms all occur in the rest of the monomial
        for (const std::string& a : den_atoms) {
          auto at = std::find(left.begin(), left.end(), a);
          if (at == left.end()) {
            whole = false;
            break;
          }
          left.erase(at);
        }
        if (!whole) continue;
        found = m;
        rest = left;
        coefficient = c / den_c;
        numerator = q->second.first.get();
      }
      if (numerator) break;
    }
    if (!numerator) return;
    Size factor;
    factor.terms_[rest] = coefficient;
    factor.quotients_ = quotients_;
    Size replaced = mul(factor, *numerator, ok);
    terms_.erase(found);
    *this = add(*this, replaced, ok);
  }
}

Size Size::div(const Size& a, const Size& b, bool& ok) {
  auto bc = b.constant_value();
  if (bc && *bc == 0) {
    ok = false;
    return Size();
  }
  if (bc) {
    bool exact = true;
    for (const auto& [m, c] : a.terms_) {
      if (*bc == -1 && c == INT64_MIN) {  // the one quotient int64 cannot hold
        ok = false;
        return Size();
      }
      if (c % *bc != 0) exact = false;
    }
    if (exact) {
      Size r;
      r.take_quotients(a);
      for (const auto& [m, c] : a.terms_) r.terms_[m] = c / *bc;
      return r;
    }
  }
  if (a.terms_.empty()) return Size();  // 0 / D
  // Opaque (7 / 2 included): equal only to the same quotient.
  Size r;
  std::string atom = fmt::format("({})/({})", a.str(), b.str());
  r.terms_[{atom}] = 1;
  r.quotients_[atom] = {std::make_shared<const Size>(a), std::make_shared<const Size>(b)};
  return r;
}

std::vector<std::string> Size::symbols() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const auto& [m, c] : terms_)
    for (const std::string& atom : m) {
      auto q = quotients_.find(atom);
      if (q == quotients_.end()) {
        add(atom);
        continue;
      }
      for (const std::string& s : q->second.first->symbols()) add(s);
      for (const std::string& s : q->second.second->symbols()) add(s);
    }
  return out;
}

Size Size::substitute(const std::map<std::string, Size>& binding, bool& ok) const {
  Size r;
  for (const auto& [m, c] : terms_) {
    Size term = constant(c);
    for (const std::string& atom : m) {
      Size factor;
      auto it = binding.find(atom);
      auto q = quotients_.find(atom);
      if (it != binding.end()) {
        factor = it->second;
      } else if (q != quotients_.end()) {
        factor = div(q->second.first->substitute(binding, ok), q->second.second->substitute(binding, ok), ok);
      } else {
        factor.terms_[{atom}] = 1;
      }
      term = mul(term, factor, ok);
    }
    r = add(r, term, ok);
  }
  return r;
}

std::optional<int64_t> Size::evaluate(const std::map<std::string, int64_t>& binding) const {
  int64_t total = 0;
  for (const auto& [m, c] : terms_) {
    int64_t term = c;
    for (const std::string& atom : m) {
      int64_t value = 0;
      auto it = binding.find(atom);
      auto q = quotients_.find(atom);
      if (it != binding.end()) {
        value = it->second;
      } else if (q != quotients_.end()) {
        auto num = q->second.first->evaluate(binding);
        auto den = q->second.second->evaluate(binding);
        if (!num || !den || *den == 0 || (*den == -1 && *num == INT64_MIN) || *num % *den != 0) return std::nullopt;
        value = *num / *den;
      } else {
        return std::nullopt;
      }
      if (__builtin_mul_overflow(term, value, &term)) return std::nullopt;
    }
    if (__builtin_add_overflow(total, term, &total)) return std::nullopt;
  }
  return total;
}

std::string Size::str() const {
  if (terms_.empty()) return "0";
  std::string out;
  // Symbolic terms first (in canonical order), the constant last: "2·D + 1".
  std::vector<std::pair<Monomial, int64_t>> ordered;
  for (const auto& t : terms_)
    if (!t.first.empty()) ordered.push_back(t);
  if (auto it = terms_.find({}); it != terms_.end()) ordered.push_back(*it);
  bool first = true;
  for (const auto& [m, c] : ordered) {
    uint64_t mag = c < 0 ? 0 - static_cast<uint64_t>(c) : static_cast<uint64_t>(c);  // |INT64_MIN| included
    if (first) out += c < 0 ? "-" : "";
    else out += c < 0 ? " - " : " + ";
    first = false;
    std::string atoms;
    for (size_t i = 0; i < m.size(); ++i) {
      std::string a = m[i];
      if (!a.empty() && a[0] == '(') {  // "(D)/(H)" prints as "D / H", "(D + 1)/(2)" as "(D + 1) / 2"
        size_t mid = a.find(")/(");
        std::string num = a.substr(1, mid - 1), den = a.substr(mid + 3, a.size() - mid - 4);
        if (num.find(' ') != std::string::npos) num = "(" + num + ")";
        if (den.find(' ') != std::string::npos || den.find("·") != std::string::npos) den = "(" + den + ")";
        a = num + " / " + den;
      }
      atoms += (i ? "·" : "") + a;
    }
    if (m.empty()) out += std::to_string(mag);
    else if (mag == 1) out += atoms;
    else out += fmt::format("{}·{}", mag, atoms);
  }
  return out;
}

}  // namespace quire::elab

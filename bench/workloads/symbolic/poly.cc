// Polynomial arithmetic over the integers modulo kModulus, truncated at
// kMaxDegree.
#include "poly.h"

namespace sym {

namespace {

void add_term(Poly& p, const Monomial& m, int64_t c) {
  auto [it, inserted] = p.try_emplace(m, 0);
  it->second = (it->second + c) % kModulus;
  if (it->second == 0) p.erase(it);
}

int degree(const Monomial& m) {
  int d = 0;
  for (uint8_t e : m) d += e;
  return d;
}

Poly multiply(const Poly& a, const Poly& b) {
  Poly r;
  for (const auto& [ma, ca] : a) {
    for (const auto& [mb, cb] : b) {
      if (degree(ma) + degree(mb) > kMaxDegree) continue;
      Monomial m(kVars);
      for (int v = 0; v < kVars; ++v) m[v] = static_cast<uint8_t>(ma[v] + mb[v]);
      add_term(r, m, (ca * cb) % kModulus);
    }
  }
  return r;
}

Poly constant(int64_t c) {
  Poly p;
  if (c != 0) p.emplace(Monomial(kVars), c);
  return p;
}

}  // namespace

Poly expand(const Expr& e) {
  switch (e.op) {
    case Op::Num:
      return constant(e.num);
    case Op::Var: {
      Monomial m(kVars);
      m[e.var] = 1;
      Poly p;
      p.emplace(std::move(m), 1);
      return p;
    }
    case Op::Neg: {
      Poly p = expand(*e.kids[0]);
      for (auto& [m, c] : p) c = (kModulus - c) % kModulus;
      return p;
    }
    case Op::Add: {
      Poly sum;
      for (const auto& k : e.kids)
        for (const auto& [m, c] : expand(*k)) add_term(sum, m, c);
      return sum;
    }
    case Op::Mul: {
      Poly product = constant(1);
      for (const auto& k : e.kids) product = multiply(product, expand(*k));
      return product;
    }
    case Op::Pow: {
      Poly base = expand(*e.kids[0]);
      Poly power = constant(1);
      for (int64_t i = 0; i < e.num; ++i) power = multiply(power, base);
      return power;
    }
  }
  wl::die("bad expression node");
}

Str to_string(const Poly& p) {
  Str out;
  for (const auto& [m, c] : p) {
    if (!out.empty()) out += " + ";
    char buf[24];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(c));
    out += buf;
    for (int v = 0; v < kVars; ++v) {
      if (m[v] == 0) continue;
      out += "*";
      out += variable_name(v);
      if (m[v] > 1) {
        out += "^";
        out += static_cast<char>('0' + m[v]);
      }
    }
  }
  return out.empty() ? Str("0") : out;
}

}  // namespace sym

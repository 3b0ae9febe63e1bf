// Expansion of expression trees into sparse polynomials: a map from monomial
// (exponent vector) to coefficient. Every term product allocates a key and
// maybe a map node, the pattern of espresso/cfrac-style set algebra.
#pragma once

#include "expr.h"

namespace sym {

// Terms above this total degree are dropped. Truncation keeps expansion
// bounded (powers of sums would otherwise explode) and, being a ring
// homomorphism, keeps expand(simplify(e)) == expand(e) — a free
// self-check of the workload.
constexpr int kMaxDegree = 4;

using Monomial = Vec<uint8_t>;  // exponent of each variable
using Poly = Map<Monomial, int64_t>;

Poly expand(const Expr& e);
Str to_string(const Poly& p);

}  // namespace sym

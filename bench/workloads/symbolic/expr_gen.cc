// Building expression trees: constructors, deep copy, and the random
// generator that feeds the symbolic workload.
#include "expr.h"

namespace sym {

const Str& variable_name(int index) {
  static const Str kNames[kVars] = {"x", "y", "z", "theta", "velocity_component_u", "pressure_gradient_v"};
  return kNames[index];
}

int variable_index(const Str& name) {
  for (int i = 0; i < kVars; ++i)
    if (variable_name(i) == name) return i;
  return -1;
}

ExprPtr make_num(int64_t value) {
  auto e = ExprPtr(new Expr);
  e->op = Op::Num;
  e->num = ((value % kModulus) + kModulus) % kModulus;
  return e;
}

ExprPtr make_var(int index) {
  auto e = ExprPtr(new Expr);
  e->op = Op::Var;
  e->var = index;
  return e;
}

ExprPtr make_node(Op op, Vec<ExprPtr> kids, int64_t num) {
  auto e = ExprPtr(new Expr);
  e->op = op;
  e->num = num;
  e->kids = std::move(kids);
  return e;
}

ExprPtr clone(const Expr& e) {
  auto c = ExprPtr(new Expr);
  c->op = e.op;
  c->num = e.num;
  c->var = e.var;
  c->kids.reserve(e.kids.size());
  for (const auto& k : e.kids) c->kids.push_back(clone(*k));
  return c;
}

// Leaves get likelier with depth so trees stay around a hundred nodes, with
// an occasional big one — the size spread real parse trees have.
ExprPtr random_expr(wl::Rng& rng, int depth) {
  double leaf_chance = 0.18 + 0.14 * depth;
  if (rng.unit() < leaf_chance) {
    if (rng.below(3) == 0) return make_num(static_cast<int64_t>(rng.range(0, 9)));
    return make_var(static_cast<int>(rng.below(kVars)));
  }
  uint64_t pick = rng.below(100);
  Vec<ExprPtr> kids;
  if (pick < 35) {
    int n = static_cast<int>(rng.range(2, 4));
    for (int i = 0; i < n; ++i) kids.push_back(random_expr(rng, depth + 1));
    return make_node(Op::Add, std::move(kids));
  }
  if (pick < 70) {
    kids.push_back(random_expr(rng, depth + 1));
    kids.push_back(random_expr(rng, depth + 1));
    return make_node(Op::Mul, std::move(kids));
  }
  kids.push_back(random_expr(rng, depth + 1));
  if (pick < 80) return make_node(Op::Neg, std::move(kids));
  return make_node(Op::Pow, std::move(kids), static_cast<int64_t>(rng.range(2, 3)));
}

}  // namespace sym
